//go:build !linux

package sandbox

import (
	"errors"
	"net"
)

// listenChannel: channels are for engines on Linux (channelsWork), so no
// sandbox has one here.
func listenChannel(dir string, serve func(net.Conn)) (*channelListener, string, error) {
	return nil, "", errors.New("channels are served on Linux only")
}

// Close stops listening.
func (cl *channelListener) Close() { cl.ln.Close() }
