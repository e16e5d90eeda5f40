// Package ctlbin finds the static sandbox-ctl that the server copies into
// each sandbox to run its agent, for linux/amd64 and linux/arm64. The
// sources, in order:
//
//  1. sandbox-ctl-linux-<arch> (or linux_<arch>/sandbox-ctl) in
//     $SANDBOX_MCP_CTL_DIR, then beside the server's executable: overrides,
//     for development and packagers;
//  2. the one embedded in the server: `make build` and `make release`
//     build the agents first and the server with -tags embedagent;
//  3. one built earlier from the server's module source, in the user's
//     cache directory;
//  4. one built now from that source with the local Go toolchain: a
//     server from `go install …@version` finds its source in the module
//     cache, one built in a checkout (without -trimpath) finds the checkout.
//
// Every candidate is checked (Check) before use; one that fails is
// refused, with its reason, and the next source is tried. Built binaries
// are never committed: the embedded ones exist only in a build tree.
package ctlbin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
)

const (
	// EnvDir names a directory holding sandbox-ctl-linux-<arch>, used
	// before any other source (for development and packagers).
	EnvDir = "SANDBOX_MCP_CTL_DIR"
	// ModulePath is the module the server and sandbox-ctl are built from.
	ModulePath = "github.com/sandbox-mcp/sandbox-mcp"
	// CtlPackage is sandbox-ctl's main package.
	CtlPackage = ModulePath + "/cmd/sandbox-ctl"
)

// Arches are the sandbox architectures sandbox-ctl is built for.
var Arches = []string{"amd64", "arm64"}

// Source is where a Binary came from.
type Source string

const (
	FromEnvDir   Source = "env"      // $SANDBOX_MCP_CTL_DIR
	FromBeside   Source = "beside"   // beside the server's executable
	FromEmbedded Source = "embedded" // inside the server
	FromBuild    Source = "build"    // built from the module source, cached
)

// Binary is a checked sandbox-ctl for one architecture. Data is what was
// checked: the server installs exactly these bytes.
type Binary struct {
	Arch   string
	Source Source
	Path   string // the file it was read from; "" when embedded
	Data   []byte
}

func (b *Binary) String() string {
	switch b.Source {
	case FromEmbedded:
		return "embedded in the server"
	case FromBuild:
		return "built from the module source into " + b.Path
	case FromEnvDir:
		return "from $" + EnvDir + ": " + b.Path
	}
	return "beside the server: " + b.Path
}

// Refusal is a candidate file that was found and refused.
type Refusal struct {
	Path string
	Why  string
}

func (r Refusal) String() string { return r.Path + " refused: " + r.Why }

// Report is what Resolve found for one architecture: a Binary, or why
// there is none.
type Report struct {
	Arch   string
	Binary *Binary
	// Refused lists the candidates found and refused on the way.
	Refused []Refusal
	// Later, when there is no Binary yet and Resolve was not to build
	// one, says how the first use will build it.
	Later string
	// Missing says, when there is no Binary, why each source that was
	// not refused gave none.
	Missing []string
}

// Err is nil when there is a Binary or one is built on first use, else
// says why there is none and what to do.
func (r Report) Err() error {
	if r.Binary != nil || r.Later != "" {
		return nil
	}
	var why []string
	for _, f := range r.Refused {
		why = append(why, f.String())
	}
	why = append(why, r.Missing...)
	if _, ok := machines[r.Arch]; !ok {
		return fmt.Errorf("no sandbox-ctl for linux/%s: %s", r.Arch, strings.Join(why, "; "))
	}
	return fmt.Errorf("no sandbox-ctl for linux/%s: %s. To fix: build the server with `make build` in a checkout, which embeds the agents; "+
		"a server from `go install` builds them itself when Go (https://go.dev/dl) is on the PATH it starts with "+
		"and its module source is in the module cache (`go install` again puts it back)",
		r.Arch, strings.Join(why, "; "))
}

// Find returns the sandbox-ctl for a linux/arch sandbox, building it
// from the module source when no other source has one. Its error says
// why there is none and what to do.
func Find(ctx context.Context, arch string) (*Binary, error) {
	r := Resolve(ctx, arch, true)
	if r.Binary != nil {
		return r.Binary, nil
	}
	return nil, r.Err()
}

// Resolve looks for the sandbox-ctl for a linux/arch sandbox through the
// sources in order. Only with build does it run the Go toolchain; without
// it, Report.Later says what the first use will build.
func Resolve(ctx context.Context, arch string, build bool) Report {
	r := Report{Arch: arch}
	if _, ok := machines[arch]; !ok {
		r.Missing = append(r.Missing, "sandbox-ctl is built for linux/amd64 and linux/arm64 only")
		return r
	}
	for _, c := range overrides(arch) {
		data, err := os.ReadFile(c.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = checkOverride(data, arch)
		}
		if err != nil {
			r.Refused = append(r.Refused, Refusal{Path: c.path, Why: errText(err)})
			continue
		}
		r.Binary = &Binary{Arch: arch, Source: c.source, Path: c.path, Data: data}
		return r
	}
	if data := embedded(arch); data == nil {
		r.Missing = append(r.Missing, "none is embedded (this server was built without `make build`)")
	} else if err := Check(data, arch); err != nil {
		r.Refused = append(r.Refused, Refusal{Path: "the embedded one", Why: err.Error()})
	} else {
		r.Binary = &Binary{Arch: arch, Source: FromEmbedded, Data: data}
		return r
	}
	b, later, err := fromSource(ctx, arch, build)
	switch {
	case err != nil:
		r.Missing = append(r.Missing, err.Error())
	case b != nil:
		r.Binary = b
	default:
		r.Later = later
	}
	return r
}

// errText is err without the path a file error repeats.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

type candidate struct {
	path   string
	source Source
}

// overrides are the files that stand in for the embedded agent.
func overrides(arch string) []candidate {
	names := []string{"sandbox-ctl-linux-" + arch, filepath.Join("linux_"+arch, "sandbox-ctl")}
	var out []candidate
	if d := os.Getenv(EnvDir); d != "" {
		for _, n := range names {
			out = append(out, candidate{filepath.Join(d, n), FromEnvDir})
		}
	}
	if d := selfDir(); d != "" {
		for _, n := range names {
			out = append(out, candidate{filepath.Join(d, n), FromBeside})
		}
	}
	return out
}

// checkOverride is Check, and refuses a sandbox-ctl built from another
// version of the module than the server (one left by an earlier install).
func checkOverride(data []byte, arch string) error {
	if err := Check(data, arch); err != nil {
		return err
	}
	own, theirs := ownVersion(), versionOf(data)
	if known(own) && known(theirs) && own != theirs {
		return fmt.Errorf("built from sandbox-mcp %s, but this server is %s: rebuild it, or remove it to use the server's own", theirs, own)
	}
	return nil
}

// known reports whether v is a module version (not a build outside
// version control).
func known(v string) bool { return v != "" && v != "(devel)" }

// Test hooks.
var (
	embedded   = embeddedFor
	executable = os.Executable
	versionOf  = builtVersion
	ownVersion = func() string {
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return ""
		}
		return moduleVersion(bi.Main, bi.Deps)
	}
)

// moduleVersion is the version of ModulePath among a build's modules.
func moduleVersion(main debug.Module, deps []*debug.Module) string {
	if main.Path == ModulePath {
		return main.Version
	}
	for _, d := range deps {
		if d.Path == ModulePath {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}

// self is the server's executable, links resolved.
func self() (string, error) {
	exe, err := executable()
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return exe, nil
}

func selfDir() string {
	exe, err := self()
	if err != nil {
		return ""
	}
	return filepath.Dir(exe)
}

var selfHash struct {
	once sync.Once
	sum  string
	err  error
}

// selfSum is a short hash of the server's executable: the cache key of
// agents built from a source that may change (a checkout).
func selfSum() (string, error) {
	selfHash.once.Do(func() {
		exe, err := self()
		if err != nil {
			selfHash.err = err
			return
		}
		data, err := os.ReadFile(exe)
		if err != nil {
			selfHash.err = err
			return
		}
		sum := sha256.Sum256(data)
		selfHash.sum = hex.EncodeToString(sum[:8])
	})
	return selfHash.sum, selfHash.err
}
