//go:build !linux

package agent

import (
	"errors"
	"net"
)

// ReceiveConn: channels are for engines on Linux, so a server elsewhere
// takes no passed connections.
func ReceiveConn(net.Conn) (net.Conn, error) {
	return nil, errors.New("passed connections are taken on Linux only")
}
