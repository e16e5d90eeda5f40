// Command sandbox-ctl runs inside a sandbox and asks the host to spawn and
// manage child sandboxes over a unix socket. The child-sandbox protocol is
// not implemented in this release: the command says so and exits 69.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "sandbox-ctl: child sandboxes are not available in this release of sandbox-mcp")
	os.Exit(69) // EX_UNAVAILABLE
}
