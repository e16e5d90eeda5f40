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
func TakeConn(uc *net.UnixConn, wait time.Duration) (*HandedConn, error) {
	return nil, errNoHandoff
}

// HandedConn is Linux's alone (see handoff_linux.go).
type HandedConn struct{ net.Conn }

// CloseWrite is Linux's alone (see handoff_linux.go).
func (h *HandedConn) CloseWrite() error { return errNoHandoff }
