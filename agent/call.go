package agent

import (
	"fmt"
	"net"
	"time"
)

// Call is the agent's start from a sandbox's own main process, where the
// server listens on a socket in the sandbox's channel for it: the agent
// connects to path, says token (a line), and serves the session over that
// connection (Serve) until the server goes away. No engine exec carries
// it, and the server learns of the agent's end from the connection's.
//
// caInstalled adds CallCA to the token's line: the sandbox's main process
// is done with the server's egress CA's install (the CA in place, or
// trust stores its user may not write) before it started the agent.
func Call(path, token string, caInstalled bool) error {
	c, err := net.DialTimeout("unix", path, callDialTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(callDialTimeout))
	line := token
	if caInstalled {
		line += CallCA
	}
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return fmt.Errorf("say the token: %w", err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return Serve(c, c)
}

// CallCA follows the token on a call's line when the egress CA's install
// was done before the agent started (Call).
const CallCA = " ca"

// callDialTimeout bounds the agent's connect and its token's write: the
// server listens before the sandbox starts, and gives up on the call soon
// after.
const callDialTimeout = 10 * time.Second
