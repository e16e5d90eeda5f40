//go:build !embedagent

package ctlbin

// embeddedFor returns nothing: this server was built without the
// embedagent tag (`make build` sets it).
func embeddedFor(arch string) []byte { return nil }
