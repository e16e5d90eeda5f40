// Command sandbox-ctl runs inside a sandbox.
//
// `sandbox-ctl agent` is the server's end of the channel into the sandbox
// (package agent): the server starts it over the engine's `exec -i` and
// speaks yamux on its stdio; `sandbox-ctl agent SOCKET TOKEN [ca]`, which a
// new sandbox's main process starts (with ca once it installed the
// server's egress CA), speaks it over a connection to the server's SOCKET
// in its channel instead. The other commands ask the host for child
// sandboxes over the control socket (package ctl); `sandbox-ctl --help`
// lists them.
package main

import (
	"fmt"
	"os"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
	"github.com/sandbox-mcp/sandbox-mcp/ctl"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "agent" {
		agent.PrepareProcess()
		if err := agent.Serve(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-ctl agent:", err)
			os.Exit(1)
		}
		return
	}
	if (len(os.Args) == 4 || len(os.Args) == 5 && os.Args[4] == "ca") && os.Args[1] == "agent" {
		agent.PrepareProcess()
		if err := agent.Call(os.Args[2], os.Args[3], len(os.Args) == 5); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-ctl agent:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println("sandbox-ctl agent protocol", agent.Version)
		return
	}
	os.Exit(ctl.Main(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}
