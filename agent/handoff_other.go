//go:build !linux

package agent

import (
	"errors"
	"net"
	"time"
)

// errNoHandoff: channels, and so handed connections, are Linux's alone.
var errNoHandoff = errors.New("handing connections over a channel needs Linux")

// HandConn is Linux's alone (see handoff_linux.go).
func HandConn(uc *net.UnixConn, c *net.TCPConn) error { return errNoHandoff }

// TakeConn is Linux's alone (see handoff_linux.go).
func TakeConn(uc *net.UnixConn, wait time.Duration) (*net.TCPConn, error) {
	return nil, errNoHandoff
}
