package app

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/secretshare"
)

// shareSecrets has this server share the secrets swapped in at egress
// with the other servers of its state directory, taking what they hold
// now. It returns what stops the sharing; without it (a socket that
// cannot be made) the server holds only its own, and says so.
func shareSecrets(ctx context.Context, stateDir string, m *sandbox.Manager, logger *slog.Logger) func() {
	node, err := secretshare.Start(filepath.Join(stateDir, "peers"), secretHolder{m}, logger)
	if err != nil {
		logger.Warn("secrets set through other servers of this state directory are not swapped in here", "err", err)
		return func() {}
	}
	node.Pull(ctx)
	m.SetSecretPeers(secretPeers{node})
	return func() {
		m.SetSecretPeers(nil)
		node.Close()
	}
}

// secretHolder is the Manager as secretshare sees it.
type secretHolder struct{ m *sandbox.Manager }

func (h secretHolder) Put(s secretshare.Secret) error {
	rules, err := egress.ParseSecretHosts(s.Hosts)
	if err != nil {
		return errors.New("the secret's hosts do not read")
	}
	return h.m.PutPeerSecret(s.Sandbox, egress.Secret{Name: s.Key, Placeholder: s.Placeholder, Value: s.Value, Hosts: rules})
}

func (h secretHolder) Drop(sandbox, key string) { h.m.DropPeerSecret(sandbox, key) }

func (h secretHolder) All() []secretshare.Secret {
	var out []secretshare.Secret
	for name, list := range h.m.AllEgressSecrets() {
		for _, s := range list {
			out = append(out, wireSecret(name, s))
		}
	}
	return out
}

// secretPeers tells the other servers of the Manager's sets and drops.
type secretPeers struct{ n *secretshare.Node }

func (p secretPeers) Put(name string, s egress.Secret) { p.n.Put(wireSecret(name, s)) }
func (p secretPeers) Drop(name, key string)            { p.n.Drop(name, key) }

// wireSecret is s of sandbox name as it travels.
func wireSecret(name string, s egress.Secret) secretshare.Secret {
	hosts := make([]string, 0, len(s.Hosts))
	for _, r := range s.Hosts {
		hosts = append(hosts, r.Text)
	}
	return secretshare.Secret{Sandbox: name, Key: s.Name, Placeholder: s.Placeholder, Value: s.Value, Hosts: hosts}
}
