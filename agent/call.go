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
func Call(path, token string) error {
	c, err := net.DialTimeout("unix", path, callDialTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(callDialTimeout))
	if _, err := c.Write([]byte(token + "\n")); err != nil {
		return fmt.Errorf("say the token: %w", err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return Serve(c, c)
}

// callDialTimeout bounds the agent's connect and its token's write: the
// server listens before the sandbox starts, and gives up on the call soon
// after.
const callDialTimeout = 10 * time.Second
