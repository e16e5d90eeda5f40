//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"net"
	"time"
)

// listenAgentCall: channels are for engines on Linux (channelsWork), so no
// sandbox has one here.
func listenAgentCall(dir string) (*agentCall, error) {
	return nil, errors.New("channels are served on Linux only")
}

// dropStaleCalls: no channels here.
func dropStaleCalls(string) {}

func (c *agentCall) accept(ctx context.Context, wait time.Duration) (net.Conn, bool, error) {
	return nil, false, errors.New("channels are served on Linux only")
}

// errNoCall is accept's error when nothing connected at all.
var errNoCall = errors.New("the agent did not call")

// Close stops listening.
func (c *agentCall) Close() {}
