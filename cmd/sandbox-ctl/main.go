// Command sandbox-ctl runs inside a sandbox. `sandbox-ctl agent` is the
// server's end of the channel into the sandbox (package agent): the server
// starts it over the engine's `exec -i` and speaks yamux on its stdio.
// Asking the host for child sandboxes is not implemented in this release:
// other commands say so and exit 69.
package main

import (
	"fmt"
	"os"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "agent" {
		if err := agent.Serve(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-ctl agent:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println("sandbox-ctl agent protocol", agent.Version)
		return
	}
	fmt.Fprintln(os.Stderr, "sandbox-ctl: child sandboxes are not available in this release of sandbox-mcp")
	os.Exit(69) // EX_UNAVAILABLE
}
