//go:build embedagent

package ctlbin

import _ "embed"

// The agents `make build` builds into built/ before it builds the server
// with -tags embedagent. The files are never committed.
var (
	//go:embed built/sandbox-ctl-linux-amd64
	embeddedAMD64 []byte
	//go:embed built/sandbox-ctl-linux-arm64
	embeddedARM64 []byte
)

// embeddedFor returns the agent built into this server for linux/arch.
func embeddedFor(arch string) []byte {
	switch arch {
	case "amd64":
		return embeddedAMD64
	case "arm64":
		return embeddedARM64
	}
	return nil
}
