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

// KillWriters fails off Linux.
func (c *Container) KillWriters() (int, error) { return 0, errNotLinux }

// KillAll fails off Linux.
func (c *Container) KillAll(timeout time.Duration) error { return errNotLinux }
