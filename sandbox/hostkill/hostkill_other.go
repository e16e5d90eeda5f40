//go:build !linux

package hostkill

import (
	"errors"
	"time"
)

// Container is one container's process tree; off Linux the engine's
// processes never run on the server's kernel.
type Container struct{}

var errNotLinux = errors.New("host-side kill needs Linux")

// Open fails off Linux.
func Open(pid int) (*Container, error) { return nil, errNotLinux }

// Now fails off Linux.
func Now() (uint64, error) { return 0, errNotLinux }

// KillWriters fails off Linux.
func (c *Container) KillWriters(startedBy uint64) (int, error) { return 0, errNotLinux }

// KillAll fails off Linux.
func (c *Container) KillAll(timeout time.Duration) error { return errNotLinux }
