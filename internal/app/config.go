package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/internal/units"
	"github.com/sandbox-mcp/sandbox-mcp/mcpserver"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/spawn"
	"github.com/sandbox-mcp/sandbox-mcp/work"
)

// Config is everything sandbox-mcp needs to run. Build it with Resolve.
type Config struct {
	Runtime string // auto|container|docker|podman|kubernetes
	// Kube is the cluster of runtime kubernetes.
	Kube KubeConfig
	// EnginePath is the engine CLI to run, when it is neither on PATH nor
	// in EngineDirs.
	EnginePath string
	StateDir   string
	Prefix     string
	File       string // config file read, "" for none
	Defaults   sandbox.Profile
	Profiles   map[string]sandbox.Profile
	Toolsets   []string
	// DynamicToolsets lets the agent list toolsets and enable more.
	DynamicToolsets bool
	BootDefault     bool
	PoolSize        int
	// Spares is how many warm spares of the default profile a server
	// keeps booted for the first call on a new name (0: none).
	Spares int
	// OutputsCap bounds the bytes of saved full outputs in the state
	// directory; OutputCallCap the bytes one command saves. 0 turns
	// saving off.
	OutputsCap    int64
	OutputCallCap int64
	// AuditCap bounds the bytes of the audit log of tool calls in the
	// state directory; 0 turns it off.
	AuditCap int64
	LogLevel string
	Version  string
	// AllowDirs are host directories that transfers may use, besides
	// the client's roots (or the start directory).
	AllowDirs []string
	// PortsBind is the host address port forwards listen on.
	PortsBind string
	// HTTP, when set, is the host:port MCP is served on over streamable
	// HTTP instead of stdio. HTTPTokenFile keeps its bearer token ("" for
	// http-token in the state directory); TLSCert and TLSKey serve TLS;
	// HTTPHosts are names clients may reach the server by besides its
	// address.
	HTTP            string
	HTTPTokenFile   string
	TLSCert, TLSKey string
	HTTPHosts       []string
	// AllowPrivilegedPorts lets expose listen on host ports below 1024.
	AllowPrivilegedPorts bool
	// JobRetention is how long ended background jobs are kept (see
	// sandbox.Config.JobRetention; negative: until their sandbox goes).
	JobRetention time.Duration
	// WorkQuiet is how long a sandbox tied to a repository must have run
	// no command before its work is recorded on its branch
	// (work.Service.Follow); negative: only when asked.
	WorkQuiet time.Duration
	// ChildPolicies are the sandboxes that may spawn children, and under
	// what policy; a sandbox not named may not.
	ChildPolicies map[string]spawn.Policy
	// EgressHosts is a file in /etc/hosts form whose names the egress
	// proxy resolves itself, before the host's DNS.
	EgressHosts string
	// Reload resolves the configuration again from the same flags,
	// environment and file; nil: it is not reloaded.
	Reload func() (Config, error) `json:"-"`
	// Console, when set, is the terminal the log shares with the
	// commands' output (the CLI's exec): log lines start lines of their
	// own there.
	Console *Console `json:"-"`
}

// DefaultConfig is the configuration before flags, environment and file.
func DefaultConfig() Config {
	return Config{
		Runtime:  "auto",
		StateDir: defaultStateDir(),
		Prefix:   "sandbox-mcp",
		Defaults: sandbox.Profile{Image: "mcp-dev", CPUs: 2, Memory: "1G", Disk: sandbox.DefaultDisk, Pids: sandbox.DefaultPids,
			Network: egress.ModeAllowlist, Presets: []string{"packages", "git"}},
		BootDefault: true,
		PoolSize:    shell.DefaultPoolSize,
		Spares:      1,
		OutputsCap:  mcpserver.DefaultOutputsCap, OutputCallCap: mcpserver.DefaultOutputCallCap, AuditCap: audit.DefaultCap,
		LogLevel:      "info",
		PortsBind:     "127.0.0.1",
		JobRetention:  sandbox.DefaultJobRetention,
		WorkQuiet:     work.DefaultQuiet,
		ChildPolicies: map[string]spawn.Policy{sandbox.DefaultName: spawn.DefaultPolicy()},
	}
}

func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sandbox-mcp")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "sandbox-mcp")
	}
	return filepath.Join(home, ".local", "state", "sandbox-mcp")
}

// Setting is one value that a flag and an environment variable can set
// (most also have a key in the config file). For every setting the flag
// wins over the environment, the environment over the file, and the file
// over the default.
type Setting struct {
	Flag      string // flag name without dashes
	Env       string // environment variable
	Usage     string // help text without the variable
	Default   string // shown in help; "" for none
	Bool      bool   // the flag takes no value
	List      bool   // the flag may be repeated; each value adds
	ServeOnly bool   // only `serve` has the flag
	// Sep joins the values of a repeated flag into one, as the variable
	// takes them: os.PathListSeparator unless set.
	Sep string

	// negate: the flag's value is the opposite of the variable's
	// (--no-boot-default against SANDBOX_MCP_BOOT_DEFAULT=false).
	negate bool
	set    func(c *Config, v string) error
}

// Help is the flag's help text, naming its environment variable.
func (s Setting) Help() string {
	if s.negate {
		return fmt.Sprintf("%s (env %s=false)", s.Usage, s.Env)
	}
	return fmt.Sprintf("%s (env %s)", s.Usage, s.Env)
}

// Settings lists every setting, in the order Resolve applies them.
func Settings() []Setting {
	d := DefaultConfig()
	return []Setting{
		{Flag: "runtime", Env: "SANDBOX_MCP_RUNTIME", Default: d.Runtime,
			Usage: "container engine: auto, container, docker or podman; or kubernetes, to run sandboxes as pods of a cluster",
			set: func(c *Config, v string) error {
				if err := checkRuntime(v); err != nil {
					return err
				}
				c.Runtime = v
				return nil
			}},
		{Flag: "engine-path", Env: "SANDBOX_MCP_ENGINE_PATH",
			Usage: "the engine's CLI (an absolute path to container, docker or podman) when it is not on PATH",
			set: func(c *Config, v string) error {
				if err := checkEnginePath(v); err != nil {
					return err
				}
				c.EnginePath = v
				return nil
			}},
		{Flag: "kubeconfig", Env: "SANDBOX_MCP_KUBECONFIG",
			Usage: "runtime kubernetes: the kubeconfig `file` (default $KUBECONFIG, ~/.kube/config, or the pod's service account in the cluster)",
			set:   func(c *Config, v string) error { c.Kube.Kubeconfig = v; return nil }},
		{Flag: "kube-context", Env: "SANDBOX_MCP_KUBE_CONTEXT",
			Usage: "runtime kubernetes: the kubeconfig's `context` (default its current one)",
			set:   func(c *Config, v string) error { c.Kube.Context = v; return nil }},
		{Flag: "kube-namespace", Env: "SANDBOX_MCP_KUBE_NAMESPACE",
			Usage: "runtime kubernetes: the `namespace` of the sandboxes' pods (default the context's)",
			set: func(c *Config, v string) error {
				k := c.Kube
				k.Namespace = v
				if err := k.check(); err != nil {
					return err
				}
				c.Kube = k
				return nil
			}},
		{Flag: "kube-runtime-class", Env: "SANDBOX_MCP_KUBE_RUNTIME_CLASS",
			Usage: "runtime kubernetes: the pods' RuntimeClass (gvisor, kata, ...)",
			set: func(c *Config, v string) error {
				k := c.Kube
				k.RuntimeClass = v
				if err := k.check(); err != nil {
					return err
				}
				c.Kube = k
				return nil
			}},
		{Flag: "kube-storage-class", Env: "SANDBOX_MCP_KUBE_STORAGE_CLASS",
			Usage: "runtime kubernetes: the workspace claims' StorageClass (default the cluster's)",
			set: func(c *Config, v string) error {
				k := c.Kube
				k.StorageClass = v
				if err := k.check(); err != nil {
					return err
				}
				c.Kube = k
				return nil
			}},
		{Flag: "kube-snapshot-class", Env: "SANDBOX_MCP_KUBE_SNAPSHOT_CLASS",
			Usage: "runtime kubernetes: a VolumeSnapshotClass of the claims' CSI driver; snapshots and clones then keep the workspace in the storage (a VolumeSnapshot, and a claim made from it for a clone or a restore) instead of a tar through the server",
			set: func(c *Config, v string) error {
				k := c.Kube
				k.SnapshotClass = v
				if err := k.check(); err != nil {
					return err
				}
				c.Kube = k
				return nil
			}},
		{Flag: "kube-sandbox-crd", Env: "SANDBOX_MCP_KUBE_SANDBOX_CRD", Bool: true,
			Usage: "runtime kubernetes: have agent-sandbox's controller make each sandbox's pod from a Sandbox resource (agents.x-k8s.io/v1beta1), which it must have installed",
			set: func(c *Config, v string) error {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return fmt.Errorf("%q is not true or false", v)
				}
				c.Kube.SandboxCRD = b
				return nil
			}},
		{Flag: "kube-warm-pools", Env: "SANDBOX_MCP_KUBE_WARM_POOLS", Bool: true,
			Usage: "runtime kubernetes with --kube-sandbox-crd: keep the spares (--spares, a profile's spares) as agent-sandbox's SandboxWarmPools, which its controller (run with --extensions) keeps full",
			set: func(c *Config, v string) error {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return fmt.Errorf("%q is not true or false", v)
				}
				c.Kube.WarmPools = b
				return nil
			}},
		{Flag: "image", Env: "SANDBOX_MCP_IMAGE", Default: d.Defaults.Image,
			Usage: "default sandbox image",
			set: func(c *Config, v string) error {
				if v == "" {
					return errors.New("image must not be empty")
				}
				return setDefault(c, sandbox.Profile{Image: v})
			}},
		{Flag: "cpus", Env: "SANDBOX_MCP_CPUS", Default: strconv.FormatFloat(d.Defaults.CPUs, 'f', -1, 64),
			Usage: "default `number` of CPUs per sandbox",
			set: func(c *Config, v string) error {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return fmt.Errorf("%q is not a number", v)
				}
				if err := checkProfile(sandbox.Profile{CPUs: n}); err != nil {
					return err
				}
				c.Defaults.CPUs = n
				return nil
			}},
		{Flag: "memory", Env: "SANDBOX_MCP_MEMORY", Default: d.Defaults.Memory,
			Usage: "default memory per sandbox, e.g. 512M or 2G",
			set: func(c *Config, v string) error {
				return setDefault(c, sandbox.Profile{Memory: v})
			}},
		{Flag: "network", Env: "SANDBOX_MCP_NETWORK", Default: d.Defaults.Network,
			Usage: "default egress `mode`: allowlist (no route out; a proxy on the host lets through what --allow and the presets allow), open (the engine's network) or none (loopback only)",
			set: func(c *Config, v string) error {
				return setDefault(c, sandbox.Profile{Network: v})
			}},
		{Flag: "allow", Env: "SANDBOX_MCP_ALLOW", List: true, Sep: ",",
			Usage: "`pattern` allowlist sandboxes may connect to, besides the presets: pypi.org, *.example.com, github.com:443, 10.0.0.0/8 (private ranges only this way); repeatable, and the variable takes a comma-separated list",
			set: func(c *Config, v string) error {
				for _, one := range strings.Split(v, ",") {
					if one = strings.TrimSpace(one); one == "" {
						continue
					}
					if _, err := egress.ParseRule(one); err != nil {
						return err
					}
					c.Defaults.Allow = append(c.Defaults.Allow, one)
				}
				return nil
			}},
		{Flag: "presets", Env: "SANDBOX_MCP_PRESETS", Default: strings.Join(d.Defaults.Presets, ","),
			Usage: "allow `lists` for allowlist sandboxes, comma-separated: " + strings.Join(egress.PresetNames(), ", ") + ", or none",
			set: func(c *Config, v string) error {
				p := []string{}
				for _, one := range strings.Split(v, ",") {
					if one = strings.TrimSpace(one); one != "" && one != "none" {
						p = append(p, one)
					}
				}
				return setDefault(c, sandbox.Profile{Presets: p})
			}},
		{Flag: "intercept", Env: "SANDBOX_MCP_INTERCEPT", List: true, Sep: ",",
			Usage: "HTTPS `host` (or *.suffix) whose connections the egress proxy may open, under a CA of this host that allowlist sandboxes trust, to put secrets set with env's hosts into their requests; repeatable, and the variable takes a comma-separated list",
			set: func(c *Config, v string) error {
				for _, one := range strings.Split(v, ",") {
					if one = strings.TrimSpace(one); one == "" {
						continue
					}
					if _, err := egress.ParseSecretHosts([]string{one}); err != nil {
						return err
					}
					c.Defaults.Intercept = append(c.Defaults.Intercept, one)
				}
				return nil
			}},
		{Flag: "egress-hosts", Env: "SANDBOX_MCP_EGRESS_HOSTS", ServeOnly: true,
			Usage: "`file` in /etc/hosts form whose names the egress proxy resolves itself, before the host's DNS",
			set: func(c *Config, v string) error {
				if _, err := egress.ReadHostsFile(v); err != nil {
					return err
				}
				c.EgressHosts = v
				return nil
			}},
		{Flag: "profile", Env: "SANDBOX_MCP_PROFILES",
			Usage: "per-name `profiles` merged over the file's: NAME:key=value,…;NAME2:… (keys image, cpus, memory, virtualization, network, allow, presets, idle_ttl, disk, pids, spares)",
			set:   addProfiles},
		{Flag: "state-dir", Env: "SANDBOX_MCP_STATE_DIR", Default: d.StateDir,
			Usage: "`directory` where state lives (created 0700)",
			set: func(c *Config, v string) error {
				if v == "" {
					return errors.New("state dir must not be empty")
				}
				c.StateDir = v
				return nil
			}},
		{Flag: "prefix", Env: "SANDBOX_MCP_PREFIX", Default: d.Prefix,
			Usage: "container name prefix and owner label",
			set: func(c *Config, v string) error {
				if err := checkPrefix(v); err != nil {
					return err
				}
				c.Prefix = v
				return nil
			}},
		{Flag: "pool-size", Env: "SANDBOX_MCP_POOL_SIZE", Default: strconv.Itoa(d.PoolSize),
			Usage: "`number` of commands one sandbox runs at once",
			set: func(c *Config, v string) error {
				n, err := strconv.Atoi(v)
				if err != nil {
					return fmt.Errorf("%q is not a whole number", v)
				}
				if err := checkPoolSize(n); err != nil {
					return err
				}
				c.PoolSize = n
				return nil
			}},
		{Flag: "spares", Env: "SANDBOX_MCP_SPARES", ServeOnly: true, Default: strconv.Itoa(d.Spares),
			Usage: "`number` of warm spare sandboxes (default profile) kept booted for the first call on a new name; 0 keeps none",
			set: func(c *Config, v string) error {
				n, err := strconv.Atoi(v)
				if err != nil {
					return fmt.Errorf("%q is not a whole number", v)
				}
				if err := checkSpares(n); err != nil {
					return err
				}
				c.Spares = n
				return nil
			}},
		{Flag: "outputs-cap", Env: "SANDBOX_MCP_OUTPUTS_CAP", ServeOnly: true, Default: units.FormatSize(d.OutputsCap),
			Usage: "`size` the saved full outputs of truncated commands may take in the state directory, e.g. 256M or 1G; the oldest go first; 0 saves none",
			set: func(c *Config, v string) error {
				n, err := units.ParseSize(v)
				c.OutputsCap = n
				return err
			}},
		{Flag: "output-cap-per-call", Env: "SANDBOX_MCP_OUTPUT_CAP_PER_CALL", ServeOnly: true, Default: units.FormatSize(d.OutputCallCap),
			Usage: "`size` one command's saved full output may take; past it the saved copy is cut",
			set: func(c *Config, v string) error {
				n, err := units.ParseSize(v)
				c.OutputCallCap = n
				return err
			}},
		{Flag: "audit-cap", Env: "SANDBOX_MCP_AUDIT_CAP", ServeOnly: true, Default: units.FormatSize(d.AuditCap),
			Usage: "`size` the audit log of tool calls may take in the state directory (sandbox-mcp audit reads it); the oldest go first; 0 keeps none",
			set: func(c *Config, v string) error {
				n, err := units.ParseSize(v)
				c.AuditCap = n
				return err
			}},
		{Flag: "log-level", Env: "SANDBOX_MCP_LOG_LEVEL", Default: d.LogLevel,
			Usage: "log `level`: debug, info, warn or error (logs go to stderr)",
			set: func(c *Config, v string) error {
				if err := checkLogLevel(v); err != nil {
					return err
				}
				c.LogLevel = v
				return nil
			}},
		{Flag: "config", Env: "SANDBOX_MCP_CONFIG",
			Usage: "JSON config `file`; flags and environment win over it",
			set: func(c *Config, v string) error {
				c.File = v
				return nil
			}},
		{Flag: "toolsets", Env: "SANDBOX_MCP_TOOLSETS", ServeOnly: true,
			Usage: "tool groups to expose, comma-separated: " + strings.Join(mcpserver.ToolsetNames(), ", ") + ", default (core,jobs,lifecycle) or all",
			set: func(c *Config, v string) error {
				sets := SplitList(v)
				if _, err := mcpserver.ResolveToolsets(sets); err != nil {
					return err
				}
				c.Toolsets = sets
				return nil
			}},
		{Flag: "dynamic-toolsets", Env: "SANDBOX_MCP_DYNAMIC_TOOLSETS", ServeOnly: true, Bool: true,
			Usage: "let the agent list toolsets and enable more at run time (tools toolsets, enable_toolset)",
			set: func(c *Config, v string) error {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return fmt.Errorf("%q is not true or false", v)
				}
				c.DynamicToolsets = b
				return nil
			}},
		{Flag: "allow-dir", Env: "SANDBOX_MCP_ALLOW_DIRS", ServeOnly: true, List: true,
			Usage: "host `directory` that upload and download may use besides the client's roots; repeatable, and the variable takes a " +
				string(os.PathListSeparator) + "-separated list",
			set: func(c *Config, v string) error {
				for _, d := range filepath.SplitList(v) {
					if err := checkAllowDir(d); err != nil {
						return err
					}
					c.AllowDirs = append(c.AllowDirs, d)
				}
				return nil
			}},
		{Flag: "http", Env: "SANDBOX_MCP_HTTP", ServeOnly: true,
			Usage: "serve MCP over streamable HTTP at `host:port` (e.g. 127.0.0.1:8765) instead of stdio; a non-loopback address needs --tls-cert and --tls-key",
			set: func(c *Config, v string) error {
				if err := checkHTTPAddr(v); err != nil {
					return err
				}
				c.HTTP = v
				return nil
			}},
		{Flag: "http-token-file", Env: "SANDBOX_MCP_HTTP_TOKEN_FILE", ServeOnly: true,
			Usage: "`file` holding the bearer token HTTP clients send (mode 600, or root's readable by the server's group alone, as a Kubernetes secret mounted with fsGroup); made with a new token when missing; default http-token in the state directory",
			set: func(c *Config, v string) error {
				c.HTTPTokenFile = v
				return nil
			}},
		{Flag: "tls-cert", Env: "SANDBOX_MCP_TLS_CERT", ServeOnly: true,
			Usage: "PEM certificate `file` to serve HTTP over TLS with (with --tls-key)",
			set: func(c *Config, v string) error {
				c.TLSCert = v
				return nil
			}},
		{Flag: "tls-key", Env: "SANDBOX_MCP_TLS_KEY", ServeOnly: true,
			Usage: "PEM private key `file` of --tls-cert",
			set: func(c *Config, v string) error {
				c.TLSKey = v
				return nil
			}},
		{Flag: "http-host", Env: "SANDBOX_MCP_HTTP_HOSTS", ServeOnly: true, List: true, Sep: ",",
			Usage: "host `name` HTTP clients may reach the server by besides its address (and the names of its certificate); repeatable, and the variable takes a comma-separated list",
			set: func(c *Config, v string) error {
				for _, h := range SplitList(v) {
					c.HTTPHosts = append(c.HTTPHosts, h)
				}
				return nil
			}},
		{Flag: "ports-bind", Env: "SANDBOX_MCP_PORTS_BIND", Default: d.PortsBind,
			Usage: "host `address` that port forwards listen on (0.0.0.0 opens them to the network)",
			set: func(c *Config, v string) error {
				if err := checkBind(v); err != nil {
					return err
				}
				c.PortsBind = v
				return nil
			}},
		{Flag: "allow-privileged-ports", Env: "SANDBOX_MCP_ALLOW_PRIVILEGED_PORTS", Bool: true,
			Usage: "let expose listen on host ports below 1024 (a server run as root could otherwise take 22 or 80 from the host's own services)",
			set: func(c *Config, v string) error {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return fmt.Errorf("%q is not true or false", v)
				}
				c.AllowPrivilegedPorts = b
				return nil
			}},
		{Flag: "job-retention", Env: "SANDBOX_MCP_JOB_RETENTION", ServeOnly: true, Default: formatRetention(d.JobRetention),
			Usage: "how long an ended background job's record and log are kept: a `duration` such as 72h or 7d, or forever",
			set: func(c *Config, v string) error {
				r, err := parseRetention(v)
				c.JobRetention = r
				return err
			}},
		{Flag: "work-record", Env: "SANDBOX_MCP_WORK_RECORD", ServeOnly: true, Default: formatQuiet(d.WorkQuiet),
			Usage: "record a sandbox tied to a repository on its branch once its commands have been quiet this `duration` (such as 1s), or off: at checkpoints and refreshes only",
			set: func(c *Config, v string) error {
				q, err := parseQuiet(v)
				c.WorkQuiet = q
				return err
			}},
		{Flag: "child-policy", Env: "SANDBOX_MCP_CHILD_POLICIES", ServeOnly: true, List: true, Sep: ";",
			Usage: "let sandbox `NAME` spawn children: NAME alone for the default policy, NAME:{json} to change keys of it " +
				"(max_concurrent, max_total, total_child_cpus, total_child_memory, child_max_cpus, child_max_memory, allowed_images, child_ttl, " +
				"child_can_spawn, child_network_peers, inject_ctl, ...); repeatable, and the variable takes a ;-separated list",
			set: func(c *Config, v string) error {
				for _, one := range strings.Split(v, ";") {
					if one = strings.TrimSpace(one); one == "" {
						continue
					}
					name, js, _ := strings.Cut(one, ":")
					if err := addChildPolicy(c, name, []byte(js)); err != nil {
						return err
					}
				}
				return nil
			}},
		{Flag: "no-boot-default", Env: "SANDBOX_MCP_BOOT_DEFAULT", ServeOnly: true, Bool: true, negate: true,
			Usage: "do not boot the default sandbox at start",
			set: func(c *Config, v string) error {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return fmt.Errorf("%q is not true or false", v)
				}
				c.BootDefault = b
				return nil
			}},
	}
}

// FlagValues holds the flags given on the command line, by name without
// dashes, as typed. A flag that was not given must be absent.
type FlagValues map[string]string

// Resolve builds the configuration from the defaults, the config file,
// the environment (getenv; an empty value counts as unset) and flags, each
// overriding the one before for every setting. Profiles merge per name: a
// profile from the environment or a flag overrides only the keys it sets.
// readFile reads the config file named by --config or SANDBOX_MCP_CONFIG.
// Errors name the flag, variable or file that holds the bad value.
func Resolve(flags FlagValues, getenv func(string) string, readFile func(string) ([]byte, error)) (Config, error) {
	c := DefaultConfig()
	settings := Settings()

	path, src := getenv("SANDBOX_MCP_CONFIG"), "SANDBOX_MCP_CONFIG"
	if v, ok := flags["config"]; ok {
		path, src = v, "--config"
	}
	if path != "" {
		data, err := readFile(path)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return Config{}, fmt.Errorf("config file %s (from %s): %w", path, src, err)
		}
		if err := c.applyFile(data); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	for _, s := range settings {
		if v := getenv(s.Env); v != "" {
			if err := s.set(&c, v); err != nil {
				return Config{}, fmt.Errorf("%s: %w", s.Env, err)
			}
		}
	}
	for _, s := range settings {
		v, ok := flags[s.Flag]
		if !ok {
			continue
		}
		if s.negate {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Config{}, fmt.Errorf("--%s: %q is not true or false", s.Flag, v)
			}
			v = strconv.FormatBool(!b)
		}
		if err := s.set(&c, v); err != nil {
			return Config{}, fmt.Errorf("--%s: %w", s.Flag, err)
		}
	}
	c.File = path
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// fileConfig is the config file's schema; nil means absent.
type fileConfig struct {
	Runtime     *string                    `json:"runtime"`
	Kube        *KubeConfig                `json:"kubernetes"`
	EnginePath  *string                    `json:"engine_path"`
	StateDir    *string                    `json:"state_dir"`
	Prefix      *string                    `json:"prefix"`
	Defaults    *sandbox.Profile           `json:"defaults"`
	Profiles    map[string]sandbox.Profile `json:"profiles"`
	Toolsets    []string                   `json:"toolsets"`
	Dynamic     *bool                      `json:"dynamic_toolsets"`
	BootDefault *bool                      `json:"boot_default"`
	PoolSize    *int                       `json:"pool_size"`
	Spares      *int                       `json:"spares"`
	OutputsCap  json.RawMessage            `json:"outputs_cap"` // a size: "256M" or bytes
	OutputCall  json.RawMessage            `json:"output_cap_per_call"`
	AuditCap    json.RawMessage            `json:"audit_cap"`
	LogLevel    *string                    `json:"log_level"`
	AllowDirs   []string                   `json:"allow_dirs"`
	PortsBind   *string                    `json:"ports_bind"`
	HTTP        *string                    `json:"http"`
	TokenFile   *string                    `json:"http_token_file"`
	TLSCert     *string                    `json:"tls_cert"`
	TLSKey      *string                    `json:"tls_key"`
	HTTPHosts   []string                   `json:"http_hosts"`
	Privileged  *bool                      `json:"allow_privileged_ports"`
	// JobRetention is a duration ("72h", "7d") or "forever".
	JobRetention *string `json:"job_retention"`
	// WorkRecord is a duration ("1s") or "off".
	WorkRecord *string `json:"work_record"`
	// ChildPolicies replaces the default's: {} lets no sandbox spawn.
	ChildPolicies map[string]json.RawMessage `json:"child_policies"`
}

// TokenFile is the file holding the HTTP bearer token: --http-token-file,
// else http-token in the state directory.
func (c Config) TokenFile() string {
	if c.HTTPTokenFile != "" {
		return c.HTTPTokenFile
	}
	return filepath.Join(c.StateDir, "http-token")
}

// checkHTTPAddr accepts host:port with a port number ("" turns HTTP
// off); whether the host may be served without TLS is checked on start.
func checkHTTPAddr(v string) error {
	if v == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(v)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return fmt.Errorf("%q is not host:port (e.g. 127.0.0.1:8765)", v)
	}
	return nil
}

// applyFile merges a JSON config file into c. Unknown keys are errors, so
// a misspelt key does not go unnoticed.
func (c *Config) applyFile(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f fileConfig
	if err := dec.Decode(&f); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("line %d: %w", lineOf(data, se.Offset), err)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("line %d: %s must be %s, not %s", lineOf(data, te.Offset), te.Field, jsonKind(te.Type), te.Value)
		}
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON object")
	}
	check := func(key string, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	}
	if f.Runtime != nil {
		if err := check("runtime", checkRuntime(*f.Runtime)); err != nil {
			return err
		}
		c.Runtime = *f.Runtime
	}
	if f.Kube != nil {
		if err := check("kubernetes", f.Kube.check()); err != nil {
			return err
		}
		c.Kube = *f.Kube
	}
	if f.EnginePath != nil {
		if err := check("engine_path", checkEnginePath(*f.EnginePath)); err != nil {
			return err
		}
		c.EnginePath = *f.EnginePath
	}
	if f.StateDir != nil {
		if *f.StateDir == "" {
			return errors.New("state_dir: must not be empty")
		}
		c.StateDir = *f.StateDir
	}
	if f.Prefix != nil {
		if err := check("prefix", checkPrefix(*f.Prefix)); err != nil {
			return err
		}
		c.Prefix = *f.Prefix
	}
	if f.Defaults != nil {
		if err := check("defaults", setDefault(c, *f.Defaults)); err != nil {
			return err
		}
	}
	for name, p := range f.Profiles {
		if err := check("profiles."+name, mergeProfile(c, name, p)); err != nil {
			return err
		}
	}
	if f.Toolsets != nil {
		if _, err := mcpserver.ResolveToolsets(f.Toolsets); err != nil {
			return fmt.Errorf("toolsets: %w", err)
		}
		c.Toolsets = f.Toolsets
	}
	if f.Dynamic != nil {
		c.DynamicToolsets = *f.Dynamic
	}
	if f.BootDefault != nil {
		c.BootDefault = *f.BootDefault
	}
	if f.ChildPolicies != nil {
		c.ChildPolicies = map[string]spawn.Policy{}
		for name, js := range f.ChildPolicies {
			if err := check("child_policies."+name, addChildPolicy(c, name, js)); err != nil {
				return err
			}
		}
	}
	if f.PortsBind != nil {
		if err := check("ports_bind", checkBind(*f.PortsBind)); err != nil {
			return err
		}
		c.PortsBind = *f.PortsBind
	}
	if f.Privileged != nil {
		c.AllowPrivilegedPorts = *f.Privileged
	}
	if f.HTTP != nil {
		if err := check("http", checkHTTPAddr(*f.HTTP)); err != nil {
			return err
		}
		c.HTTP = *f.HTTP
	}
	if f.TokenFile != nil {
		c.HTTPTokenFile = *f.TokenFile
	}
	if f.TLSCert != nil {
		c.TLSCert = *f.TLSCert
	}
	if f.TLSKey != nil {
		c.TLSKey = *f.TLSKey
	}
	c.HTTPHosts = append(c.HTTPHosts, f.HTTPHosts...)
	if f.JobRetention != nil {
		r, err := parseRetention(*f.JobRetention)
		if err := check("job_retention", err); err != nil {
			return err
		}
		c.JobRetention = r
	}
	if f.WorkRecord != nil {
		q, err := parseQuiet(*f.WorkRecord)
		if err := check("work_record", err); err != nil {
			return err
		}
		c.WorkQuiet = q
	}
	if f.Spares != nil {
		if err := check("spares", checkSpares(*f.Spares)); err != nil {
			return err
		}
		c.Spares = *f.Spares
	}
	if f.PoolSize != nil {
		if err := check("pool_size", checkPoolSize(*f.PoolSize)); err != nil {
			return err
		}
		c.PoolSize = *f.PoolSize
	}
	if f.OutputsCap != nil {
		n, err := sizeFromJSON(f.OutputsCap)
		if err := check("outputs_cap", err); err != nil {
			return err
		}
		c.OutputsCap = n
	}
	if f.OutputCall != nil {
		n, err := sizeFromJSON(f.OutputCall)
		if err := check("output_cap_per_call", err); err != nil {
			return err
		}
		c.OutputCallCap = n
	}
	if f.AuditCap != nil {
		n, err := sizeFromJSON(f.AuditCap)
		if err := check("audit_cap", err); err != nil {
			return err
		}
		c.AuditCap = n
	}
	if f.LogLevel != nil {
		if err := check("log_level", checkLogLevel(*f.LogLevel)); err != nil {
			return err
		}
		c.LogLevel = *f.LogLevel
	}
	for _, d := range f.AllowDirs {
		if err := check("allow_dirs", checkAllowDir(d)); err != nil {
			return err
		}
		c.AllowDirs = append(c.AllowDirs, d)
	}
	return nil
}

// checkAllowDir accepts an existing directory other than the filesystem
// root.
func checkAllowDir(d string) error {
	if d == "" {
		return errors.New("an allowed directory must not be empty")
	}
	abs, err := filepath.Abs(d)
	if err != nil {
		return err
	}
	if filepath.Clean(abs) == string(filepath.Separator) {
		return errors.New("/ cannot be allowed as a whole: name the directories to share")
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("allowed directory %s: %w", d, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("allowed directory %s is not a directory", d)
	}
	return nil
}

// sizeFromJSON reads a size from a config file: "256M" or a number of
// bytes.
func sizeFromJSON(data json.RawMessage) (int64, error) {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return 0, err
	}
	switch v := v.(type) {
	case string:
		return units.ParseSize(v)
	case float64:
		return units.ParseSize(strconv.FormatFloat(v, 'f', -1, 64))
	}
	return 0, fmt.Errorf("must be a size such as \"256M\" or a number of bytes, not %s", data)
}

// parseRetention reads a retention: a Go duration, a number of days ("7d")
// or "forever" (-1). It must be positive.
func parseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "forever") {
		return -1, nil
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if n, err = strconv.Atoi(days); err == nil {
			d = time.Duration(n) * 24 * time.Hour
		}
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration (such as 72h or 7d) or forever", s)
	}
	return d, nil
}

// formatRetention is parseRetention's inverse for whole days.
func formatRetention(d time.Duration) string {
	switch {
	case d < 0:
		return "forever"
	case d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
	return d.String()
}

// parseQuiet reads work-record: a positive duration, or off (-1).
func parseQuiet(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "off") {
		return -1, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > 24*time.Hour {
		return 0, fmt.Errorf("%q is not a duration from 1ms to 24h (such as 1s), or off", s)
	}
	return d, nil
}

func formatQuiet(d time.Duration) string {
	if d < 0 {
		return "off"
	}
	return d.String()
}

// jsonKind names a Go type as a config file's author knows it.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

func lineOf(data []byte, offset int64) int {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	return 1 + bytes.Count(data[:offset], []byte("\n"))
}

// addProfiles merges "NAME:key=value,…;NAME2:…" into c.Profiles.
func addProfiles(c *Config, v string) error {
	for _, entry := range strings.Split(v, ";") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		name, spec, ok := strings.Cut(entry, ":")
		if !ok {
			return fmt.Errorf("%q: want NAME:key=value,…", entry)
		}
		name = strings.TrimSpace(name)
		p, err := sandbox.ParseProfileSpec(spec)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := mergeProfile(c, name, p); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// mergeProfile checks p and merges it over c's profile of that name.
func mergeProfile(c *Config, name string, p sandbox.Profile) error {
	if err := sandbox.ValidateName(name); err != nil {
		return err
	}
	if err := checkProfile(p); err != nil {
		return err
	}
	if c.Profiles == nil {
		c.Profiles = map[string]sandbox.Profile{}
	}
	c.Profiles[name] = c.Profiles[name].Merge(p)
	return nil
}

// setDefault checks p and merges it over c.Defaults.
func setDefault(c *Config, p sandbox.Profile) error {
	if err := checkProfile(p); err != nil {
		return err
	}
	if p.Spares != 0 {
		return fmt.Errorf("spares is a named profile's key: the defaults' spares are the top-level spares (--spares)")
	}
	c.Defaults = c.Defaults.Merge(p)
	return nil
}

// checkProfile validates the keys a partial profile sets; the image it
// may leave to the defaults.
func checkProfile(p sandbox.Profile) error {
	return sandbox.Profile{Image: "image"}.Merge(p).Validate()
}

func checkRuntime(v string) error {
	switch v {
	case "auto", "docker", "podman", "container", "kubernetes":
		return nil
	}
	return fmt.Errorf("runtime must be auto, container, docker, podman or kubernetes, not %q", v)
}

func checkPrefix(v string) error {
	if err := sandbox.ValidateName(v); err != nil || len(v) > 24 {
		return fmt.Errorf("prefix %q must be a valid name of at most 24 bytes", v)
	}
	return nil
}

func checkSpares(n int) error {
	if n < 0 || n > sandbox.MaxSpares {
		return fmt.Errorf("spares must be 0 to %d, not %d", sandbox.MaxSpares, n)
	}
	return nil
}

func checkPoolSize(n int) error {
	if n < 1 {
		return fmt.Errorf("pool size must be at least 1, not %d", n)
	}
	return nil
}

func checkLogLevel(v string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return fmt.Errorf("log level must be debug, info, warn or error, not %q", v)
	}
	return nil
}

// Validate checks a configuration, however it was built, before anything
// runs.
func (c *Config) Validate() error {
	if err := checkRuntime(c.Runtime); err != nil {
		return err
	}
	if err := c.Kube.check(); err != nil {
		return err
	}
	if err := c.Kube.checkTogether(); err != nil {
		return err
	}
	if c.EnginePath != "" && c.Runtime != "auto" && filepath.Base(c.EnginePath) != c.Runtime {
		return fmt.Errorf("engine_path %s is not the CLI of runtime %s", c.EnginePath, c.Runtime)
	}
	if err := checkPrefix(c.Prefix); err != nil {
		return err
	}
	if err := c.Defaults.Validate(); err != nil {
		return err
	}
	for name, p := range c.Profiles {
		if err := sandbox.ValidateName(name); err != nil {
			return fmt.Errorf("profile %q: %w", name, err)
		}
		if err := c.Defaults.Merge(p).Validate(); err != nil {
			return fmt.Errorf("profile %q: %w", name, err)
		}
		if p.Spares > 0 {
			if err := c.checkProfileSpare(name, p); err != nil {
				return fmt.Errorf("profile %q: %w", name, err)
			}
		}
	}
	return nil
}

// checkProfileSpare refuses a spare for a named profile that could never
// be taken (a name too long for a container name of its own) or would
// never stop (a sandbox that idle does not stop: its spare would wait for
// ever once the server that booted it is gone).
func (c *Config) checkProfileSpare(name string, p sandbox.Profile) error {
	if sandbox.ContainerName(c.Prefix, name) != c.Prefix+"-"+name {
		return fmt.Errorf("spares: the name is too long for a container of its own, which taking a spare needs")
	}
	spec := c.Defaults.Merge(p).IdleTTL
	if name == sandbox.DefaultName {
		spec = p.IdleTTL // the sandbox named default is reaped only by a profile of its own
	}
	ttl := sandbox.DefaultIdleTTL
	switch {
	case spec != "":
		ttl, _ = sandbox.ParseIdleTTL(spec) // validated above
	case name == sandbox.DefaultName:
		ttl = 0
	}
	if ttl == 0 {
		return fmt.Errorf("spares needs an idle_ttl: a spare of a sandbox that idle never stops would never stop either")
	}
	return nil
}

// checkBind accepts an IP address of this host to listen on.
func checkBind(v string) error {
	if net.ParseIP(v) == nil {
		return fmt.Errorf("%q is not an IP address (such as 127.0.0.1, ::1 or 0.0.0.0)", v)
	}
	return nil
}

// ListSep is what joins the values of a repeated flag of s.
func (s Setting) ListSep() string {
	if s.Sep != "" {
		return s.Sep
	}
	return string(os.PathListSeparator)
}

// addChildPolicy gives sandbox name the default child policy with the
// keys of js (a JSON object, or nothing) changed, after checking it.
func addChildPolicy(c *Config, name string, js []byte) error {
	if err := sandbox.ValidateName(name); err != nil {
		return fmt.Errorf("child policy for %q: %w", name, err)
	}
	p := spawn.DefaultPolicy()
	if len(bytes.TrimSpace(js)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return fmt.Errorf("child policy for %q: %w", name, err)
		}
		if dec.More() {
			return fmt.Errorf("child policy for %q: more than one JSON object (separate policies with ;)", name)
		}
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("child policy for %q: %w", name, err)
	}
	if c.ChildPolicies == nil {
		c.ChildPolicies = map[string]spawn.Policy{}
	}
	c.ChildPolicies[name] = p
	return nil
}
