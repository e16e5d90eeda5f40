package mcpserver

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/portfwd"
)

// engineDown fails a Dial the way a boot fails when the engine cannot be
// reached: a stopped podman machine answers "connection refused" too.
type engineDown struct{ *fake }

func (e engineDown) Dial(context.Context, string, int) (net.Conn, error) {
	return nil, errors.New(`boot sandbox "web": podman run: unable to connect to Podman socket: dial tcp 127.0.0.1:50411: connect: connection refused`)
}

type recPorts struct{ exposed []int }

func (r *recPorts) Expose(sandbox string, port, hostPort int) (portfwd.Info, bool, error) {
	r.exposed = append(r.exposed, port)
	return portfwd.Info{Sandbox: sandbox, Port: port, HostPort: port, URL: "http://127.0.0.1:8000"}, false, nil
}
func (r *recPorts) AllowsPrivileged() bool                     { return false }
func (r *recPorts) Unexpose(string, int) (portfwd.Info, error) { return portfwd.Info{}, nil }
func (r *recPorts) List(string) []portfwd.Info                 { return nil }

// expose of a port nothing listens on yet makes the forward (it waits for
// the server); one whose sandbox cannot be reached fails and makes none,
// whatever words the engine's error holds.
func TestExposeTellsAClosedPortFromAFailure(t *testing.T) {
	rp := &recPorts{}
	s := connect(t, &fake{}, Options{Toolsets: []string{"all"}, Ports: rp})
	if r := s.call("expose", map[string]any{"sandbox": "web", "port": 8000}); r.isError || len(rp.exposed) != 1 {
		t.Fatalf("a closed port: error %v, exposed %v: %s", r.isError, rp.exposed, r.text)
	}
	rp = &recPorts{}
	s = connect(t, engineDown{&fake{}}, Options{Toolsets: []string{"all"}, Ports: rp})
	if r := s.call("expose", map[string]any{"sandbox": "web", "port": 8000}); !r.isError || len(rp.exposed) != 0 {
		t.Fatalf("the engine unreachable: error %v, exposed %v: %s", r.isError, rp.exposed, r.text)
	}
}
