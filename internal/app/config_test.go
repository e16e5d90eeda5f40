package app

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// sources are the inputs to Resolve in a test: flags, environment and
// files by path.
type sources struct {
	flags FlagValues
	env   map[string]string
	files map[string]string
}

func (s sources) resolve() (Config, error) {
	readFile := func(path string) ([]byte, error) {
		data, ok := s.files[path]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
		}
		return []byte(data), nil
	}
	return Resolve(s.flags, func(k string) string { return s.env[k] }, readFile)
}

// TestResolvePrecedence: for every setting, the default stands alone, the
// file overrides it, the environment the file, and the flag the
// environment.
func TestResolvePrecedence(t *testing.T) {
	def := DefaultConfig()
	for _, tc := range []struct {
		flag, env string
		fileJSON  string // the setting in the config file, "" if it has no key
		// values given by file, env and flag, and what each resolves to
		fileVal, envVal, flagVal string
		want                     [4]any // default, file, env, flag
		get                      func(Config) any
	}{
		{"runtime", "SANDBOX_MCP_RUNTIME", `"runtime": "docker"`, "", "podman", "container",
			[4]any{"auto", "docker", "podman", "container"}, func(c Config) any { return c.Runtime }},
		{"image", "SANDBOX_MCP_IMAGE", `"defaults": {"image": "file-img"}`, "", "env-img", "flag-img",
			[4]any{"mcp-dev", "file-img", "env-img", "flag-img"}, func(c Config) any { return c.Defaults.Image }},
		{"state-dir", "SANDBOX_MCP_STATE_DIR", `"state_dir": "/file"`, "", "/env", "/flag",
			[4]any{def.StateDir, "/file", "/env", "/flag"}, func(c Config) any { return c.StateDir }},
		{"prefix", "SANDBOX_MCP_PREFIX", `"prefix": "fromfile"`, "", "fromenv", "fromflag",
			[4]any{"sandbox-mcp", "fromfile", "fromenv", "fromflag"}, func(c Config) any { return c.Prefix }},
		{"cpus", "SANDBOX_MCP_CPUS", `"defaults": {"cpus": 3}`, "", "4", "0.5",
			[4]any{2.0, 3.0, 4.0, 0.5}, func(c Config) any { return c.Defaults.CPUs }},
		{"memory", "SANDBOX_MCP_MEMORY", `"defaults": {"memory": "2G"}`, "", "3G", "512M",
			[4]any{"1G", "2G", "3G", "512M"}, func(c Config) any { return c.Defaults.Memory }},
		{"profile", "SANDBOX_MCP_PROFILES", `"profiles": {"big": {"cpus": 3}}`, "", "big:cpus=4", "big:cpus=5",
			[4]any{0.0, 3.0, 4.0, 5.0}, func(c Config) any { return c.Profiles["big"].CPUs }},
		{"log-level", "SANDBOX_MCP_LOG_LEVEL", `"log_level": "warn"`, "", "error", "debug",
			[4]any{"info", "warn", "error", "debug"}, func(c Config) any { return c.LogLevel }},
		{"toolsets", "SANDBOX_MCP_TOOLSETS", `"toolsets": ["core"]`, "", "jobs", "core,lifecycle",
			[4]any{[]string(nil), []string{"core"}, []string{"jobs"}, []string{"core", "lifecycle"}}, func(c Config) any { return c.Toolsets }},
		{"dynamic-toolsets", "SANDBOX_MCP_DYNAMIC_TOOLSETS", `"dynamic_toolsets": true`, "", "false", "true",
			[4]any{false, true, false, true}, func(c Config) any { return c.DynamicToolsets }},
		{"no-boot-default", "SANDBOX_MCP_BOOT_DEFAULT", `"boot_default": false`, "", "true", "true",
			[4]any{true, false, true, false}, func(c Config) any { return c.BootDefault }},
		{"pool-size", "SANDBOX_MCP_POOL_SIZE", `"pool_size": 2`, "", "3", "8",
			[4]any{def.PoolSize, 2, 3, 8}, func(c Config) any { return c.PoolSize }},
		{"outputs-cap", "SANDBOX_MCP_OUTPUTS_CAP", `"outputs_cap": "1G"`, "", "512M", "0",
			[4]any{int64(256 << 20), int64(1 << 30), int64(512 << 20), int64(0)}, func(c Config) any { return c.OutputsCap }},
		{"output-cap-per-call", "SANDBOX_MCP_OUTPUT_CAP_PER_CALL", `"output_cap_per_call": 1048576`, "", "2MiB", "16m",
			[4]any{int64(64 << 20), int64(1 << 20), int64(2 << 20), int64(16 << 20)}, func(c Config) any { return c.OutputCallCap }},
		{"audit-cap", "SANDBOX_MCP_AUDIT_CAP", `"audit_cap": "1G"`, "", "16M", "0",
			[4]any{int64(64 << 20), int64(1 << 30), int64(16 << 20), int64(0)}, func(c Config) any { return c.AuditCap }},
		{"ports-bind", "SANDBOX_MCP_PORTS_BIND", `"ports_bind": "::1"`, "", "0.0.0.0", "127.0.0.2",
			[4]any{"127.0.0.1", "::1", "0.0.0.0", "127.0.0.2"}, func(c Config) any { return c.PortsBind }},
		{"http", "SANDBOX_MCP_HTTP", `"http": "127.0.0.1:8765"`, "", "[::1]:9000", "localhost:0",
			[4]any{"", "127.0.0.1:8765", "[::1]:9000", "localhost:0"}, func(c Config) any { return c.HTTP }},
		{"http-token-file", "SANDBOX_MCP_HTTP_TOKEN_FILE", `"http_token_file": "/f"`, "", "/e", "/g",
			[4]any{"", "/f", "/e", "/g"}, func(c Config) any { return c.HTTPTokenFile }},
		{"tls-cert", "SANDBOX_MCP_TLS_CERT", `"tls_cert": "/f"`, "", "/e", "/g",
			[4]any{"", "/f", "/e", "/g"}, func(c Config) any { return c.TLSCert }},
		{"tls-key", "SANDBOX_MCP_TLS_KEY", `"tls_key": "/f"`, "", "/e", "/g",
			[4]any{"", "/f", "/e", "/g"}, func(c Config) any { return c.TLSKey }},
		{"http-host", "SANDBOX_MCP_HTTP_HOSTS", `"http_hosts": ["a.example"]`, "", "b.example,c.example", "d.example",
			[4]any{[]string(nil), []string{"a.example"}, []string{"a.example", "b.example", "c.example"}, []string{"a.example", "b.example", "c.example", "d.example"}}, func(c Config) any { return c.HTTPHosts }},
		{"allow-privileged-ports", "SANDBOX_MCP_ALLOW_PRIVILEGED_PORTS", `"allow_privileged_ports": true`, "", "false", "true",
			[4]any{false, true, false, true}, func(c Config) any { return c.AllowPrivilegedPorts }},
		{"job-retention", "SANDBOX_MCP_JOB_RETENTION", `"job_retention": "30d"`, "", "forever", "90m",
			[4]any{7 * 24 * time.Hour, 30 * 24 * time.Hour, time.Duration(-1), 90 * time.Minute}, func(c Config) any { return c.JobRetention }},
	} {
		steps := []struct {
			name string
			src  sources
		}{
			{"default", sources{}},
			{"file", sources{
				env:   map[string]string{"SANDBOX_MCP_CONFIG": "/cfg.json"},
				files: map[string]string{"/cfg.json": "{" + tc.fileJSON + "}"}}},
			{"env over file", sources{
				env:   map[string]string{"SANDBOX_MCP_CONFIG": "/cfg.json", tc.env: tc.envVal},
				files: map[string]string{"/cfg.json": "{" + tc.fileJSON + "}"}}},
			{"flag over env", sources{
				flags: FlagValues{tc.flag: tc.flagVal},
				env:   map[string]string{"SANDBOX_MCP_CONFIG": "/cfg.json", tc.env: tc.envVal},
				files: map[string]string{"/cfg.json": "{" + tc.fileJSON + "}"}}},
		}
		for i, step := range steps {
			t.Run(tc.flag+"/"+step.name, func(t *testing.T) {
				c, err := step.src.resolve()
				if err != nil {
					t.Fatal(err)
				}
				if got := tc.get(c); !reflect.DeepEqual(got, tc.want[i]) {
					t.Errorf("got %#v, want %#v", got, tc.want[i])
				}
			})
		}
	}
}

// TestResolveConfigPath: --config wins over SANDBOX_MCP_CONFIG, and an
// empty --config reads no file at all.
func TestResolveConfigPath(t *testing.T) {
	files := map[string]string{"/env.json": `{"prefix": "envfile"}`, "/flag.json": `{"prefix": "flagfile"}`}
	for _, tc := range []struct {
		name       string
		src        sources
		wantFile   string
		wantPrefix string
	}{
		{"none", sources{files: files}, "", "sandbox-mcp"},
		{"env", sources{env: map[string]string{"SANDBOX_MCP_CONFIG": "/env.json"}, files: files}, "/env.json", "envfile"},
		{"flag over env", sources{flags: FlagValues{"config": "/flag.json"}, env: map[string]string{"SANDBOX_MCP_CONFIG": "/env.json"}, files: files}, "/flag.json", "flagfile"},
		{"empty flag", sources{flags: FlagValues{"config": ""}, env: map[string]string{"SANDBOX_MCP_CONFIG": "/env.json"}, files: files}, "", "sandbox-mcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.src.resolve()
			if err != nil {
				t.Fatal(err)
			}
			if c.File != tc.wantFile || c.Prefix != tc.wantPrefix {
				t.Errorf("file %q prefix %q, want %q %q", c.File, c.Prefix, tc.wantFile, tc.wantPrefix)
			}
		})
	}
}

// TestResolveProfiles: profiles merge per name, key by key, file then
// environment then flag; defaults from the file keep keys no flag sets.
func TestResolveProfiles(t *testing.T) {
	file := `{"defaults": {"network": "none", "idle_ttl": "1h"},
	  "profiles": {"big": {"image": "big-img", "cpus": 4, "memory": "4G"}, "offline": {"network": "none"}}}`
	for _, tc := range []struct {
		name string
		src  sources
		want map[string]sandbox.Profile
	}{
		{"file only", sources{}, map[string]sandbox.Profile{
			"big":     {Image: "big-img", CPUs: 4, Memory: "4G"},
			"offline": {Network: "none"},
		}},
		{"flag overrides the keys it sets", sources{flags: FlagValues{"profile": "big:memory=8G"}}, map[string]sandbox.Profile{
			"big":     {Image: "big-img", CPUs: 4, Memory: "8G"},
			"offline": {Network: "none"},
		}},
		{"env then flag", sources{
			env:   map[string]string{"SANDBOX_MCP_PROFILES": "big:cpus=6;gpu:virtualization=true"},
			flags: FlagValues{"profile": "big:memory=8G; gpu:image=gpu-img"},
		}, map[string]sandbox.Profile{
			"big":     {Image: "big-img", CPUs: 6, Memory: "8G"},
			"offline": {Network: "none"},
			"gpu":     {Image: "gpu-img", Virtualization: true},
		}},
		{"new name from flag", sources{flags: FlagValues{"profile": "tiny:cpus=0.5,memory=256M,idle_ttl=5m"}}, map[string]sandbox.Profile{
			"big":     {Image: "big-img", CPUs: 4, Memory: "4G"},
			"offline": {Network: "none"},
			"tiny":    {CPUs: 0.5, Memory: "256M", IdleTTL: "5m"},
		}},
		{"a spare for a profile's name", sources{flags: FlagValues{"profile": "big:spares=1"}}, map[string]sandbox.Profile{
			"big":     {Image: "big-img", CPUs: 4, Memory: "4G", Spares: 1},
			"offline": {Network: "none"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.src.flags = withConfig(tc.src.flags, "/cfg.json")
			tc.src.files = map[string]string{"/cfg.json": file}
			c, err := tc.src.resolve()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Profiles, tc.want) {
				t.Errorf("profiles\n got %+v\nwant %+v", c.Profiles, tc.want)
			}
			if want := (sandbox.Profile{Image: "mcp-dev", CPUs: 2, Memory: "1G", Network: "none", Presets: []string{"packages", "git"}, IdleTTL: "1h", Disk: sandbox.DefaultDisk, Pids: sandbox.DefaultPids}); !reflect.DeepEqual(c.Defaults, want) {
				t.Errorf("defaults %+v, want %+v", c.Defaults, want)
			}
		})
	}
}

func withConfig(f FlagValues, path string) FlagValues {
	out := FlagValues{"config": path}
	for k, v := range f {
		out[k] = v
	}
	return out
}

// TestResolveErrors: a bad value fails with the flag, variable or file
// that holds it.
func TestResolveErrors(t *testing.T) {
	cfg := func(body string) map[string]string { return map[string]string{"/etc/smcp.json": body} }
	withFile := map[string]string{"SANDBOX_MCP_CONFIG": "/etc/smcp.json"}
	for _, tc := range []struct {
		name string
		src  sources
		want []string // substrings of the error
	}{
		{"bad cpus flag", sources{flags: FlagValues{"cpus": "two"}}, []string{"--cpus", `"two"`}},
		{"bad cpus env", sources{env: map[string]string{"SANDBOX_MCP_CPUS": "lots"}}, []string{"SANDBOX_MCP_CPUS", `"lots"`}},
		{"cpus out of range", sources{flags: FlagValues{"cpus": "1000"}}, []string{"--cpus", "out of range"}},
		{"bad cpus file", sources{env: withFile, files: cfg(`{"defaults": {"cpus": "two"}}`)}, []string{"/etc/smcp.json", "defaults.cpus", "a number"}},
		{"bad outputs cap flag", sources{flags: FlagValues{"outputs-cap": "lots"}}, []string{"--outputs-cap", `"lots"`, "512M"}},
		{"negative outputs cap env", sources{env: map[string]string{"SANDBOX_MCP_OUTPUTS_CAP": "-1"}}, []string{"SANDBOX_MCP_OUTPUTS_CAP", `"-1"`}},
		{"bad per-call cap file", sources{env: withFile, files: cfg(`{"output_cap_per_call": "5X"}`)}, []string{"/etc/smcp.json", "output_cap_per_call", `"5X"`}},
		{"per-call cap of a wrong type", sources{env: withFile, files: cfg(`{"output_cap_per_call": true}`)}, []string{"/etc/smcp.json", "output_cap_per_call", "a size"}},
		{"unknown runtime flag", sources{flags: FlagValues{"runtime": "lxc"}}, []string{"--runtime", `"lxc"`}},
		{"unknown runtime env", sources{env: map[string]string{"SANDBOX_MCP_RUNTIME": "lxc"}}, []string{"SANDBOX_MCP_RUNTIME", `"lxc"`}},
		{"unknown runtime file", sources{env: withFile, files: cfg(`{"runtime": "lxc"}`)}, []string{"/etc/smcp.json", "runtime", `"lxc"`}},
		{"bad profile key", sources{flags: FlagValues{"profile": "big:gpus=2"}}, []string{"--profile", "big", `"gpus"`}},
		{"profile without name", sources{env: map[string]string{"SANDBOX_MCP_PROFILES": "cpus=2"}}, []string{"SANDBOX_MCP_PROFILES", "NAME:key=value"}},
		{"bad profile value", sources{flags: FlagValues{"profile": "big:memory=lots"}}, []string{"--profile", "big", "memory"}},
		{"bad profile name", sources{flags: FlagValues{"profile": "Big Box:cpus=2"}}, []string{"--profile", "Big Box"}},
		{"bad profile in file", sources{env: withFile, files: cfg(`{"profiles": {"big": {"network": "host"}}}`)}, []string{"/etc/smcp.json", "profiles.big", "network"}},
		{"two spares for a profile", sources{flags: FlagValues{"profile": "big:spares=2"}}, []string{"--profile", "big", "spares", "0 or 1"}},
		{"two spares for a profile in file", sources{env: withFile, files: cfg(`{"profiles": {"big": {"spares": 2}}}`)}, []string{"/etc/smcp.json", "profiles.big", "0 or 1"}},
		{"spares in the defaults", sources{env: withFile, files: cfg(`{"defaults": {"spares": 1}}`)}, []string{"/etc/smcp.json", "defaults", "top-level spares"}},
		{"spares=0 in a flag", sources{flags: FlagValues{"profile": "big:spares=0"}}, []string{"--profile", "turned off in the file"}},
		{"a spare that would never stop", sources{flags: FlagValues{"profile": "big:spares=1,idle_ttl=off"}}, []string{"profile \"big\"", "idle_ttl"}},
		{"a spare for default without an idle TTL", sources{flags: FlagValues{"profile": "default:spares=1"}}, []string{"profile \"default\"", "idle_ttl"}},
		{"bad memory env", sources{env: map[string]string{"SANDBOX_MCP_MEMORY": "1 G"}}, []string{"SANDBOX_MCP_MEMORY", "memory"}},
		{"empty image flag", sources{flags: FlagValues{"image": ""}}, []string{"--image", "empty"}},
		{"bad prefix", sources{flags: FlagValues{"prefix": "a-very-long-prefix-over-24-bytes"}}, []string{"--prefix"}},
		{"bad log level", sources{env: map[string]string{"SANDBOX_MCP_LOG_LEVEL": "loud"}}, []string{"SANDBOX_MCP_LOG_LEVEL", `"loud"`}},
		{"bad pool size", sources{flags: FlagValues{"pool-size": "0"}}, []string{"--pool-size", "at least 1"}},
		{"bad pool size env", sources{env: map[string]string{"SANDBOX_MCP_POOL_SIZE": "many"}}, []string{"SANDBOX_MCP_POOL_SIZE", `"many"`}},
		{"bad boot default", sources{env: map[string]string{"SANDBOX_MCP_BOOT_DEFAULT": "nope"}}, []string{"SANDBOX_MCP_BOOT_DEFAULT", `"nope"`}},
		{"missing file env", sources{env: withFile}, []string{"/etc/smcp.json", "SANDBOX_MCP_CONFIG", "file does not exist"}},
		{"missing file flag", sources{flags: FlagValues{"config": "/nope.json"}}, []string{"/nope.json", "--config", "file does not exist"}},
		{"malformed file", sources{env: withFile, files: cfg("{\n\"runtime\": \"docker\",\n}")}, []string{"/etc/smcp.json", "line 3"}},
		{"unknown key", sources{env: withFile, files: cfg(`{"runtme": "docker"}`)}, []string{"/etc/smcp.json", `"runtme"`}},
		{"trailing data", sources{env: withFile, files: cfg(`{} {}`)}, []string{"/etc/smcp.json", "after the JSON object"}},
		{"relative engine path", sources{flags: FlagValues{"engine-path": "bin/podman"}}, []string{"--engine-path", "not an absolute path"}},
		{"engine path of another program", sources{env: map[string]string{"SANDBOX_MCP_ENGINE_PATH": "/bin/sh"}}, []string{"SANDBOX_MCP_ENGINE_PATH", "container, docker or podman"}},
		{"missing engine path", sources{env: withFile, files: cfg(`{"engine_path": "/nowhere/container"}`)}, []string{"/etc/smcp.json", "engine_path", "no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.src.resolve()
			if err == nil {
				t.Fatalf("no error, want one naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestSettingsHelp: every flag's help names its environment variable, and
// the names are unique.
func TestSettingsHelp(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Settings() {
		if !strings.Contains(s.Help(), s.Env) {
			t.Errorf("--%s help %q does not name %s", s.Flag, s.Help(), s.Env)
		}
		if !strings.HasPrefix(s.Env, "SANDBOX_MCP_") {
			t.Errorf("--%s: env %s", s.Flag, s.Env)
		}
		for _, k := range []string{s.Flag, s.Env} {
			if seen[k] {
				t.Errorf("%s twice", k)
			}
			seen[k] = true
		}
	}
	if got := fmt.Sprint(len(Settings())); got != "42" {
		t.Errorf("%s settings, want 42", got)
	}
}

// TestNetworkSettings: sandboxes default to the allowlist with the
// package and forge presets; flags, the environment and the file change
// it, and a bad mode, pattern or preset is refused where it is given.
func TestNetworkSettings(t *testing.T) {
	c, err := (sources{}).resolve()
	if err != nil {
		t.Fatal(err)
	}
	if c.Defaults.Network != "allowlist" || !reflect.DeepEqual(c.Defaults.Presets, []string{"packages", "git"}) || c.Defaults.Allow != nil {
		t.Fatalf("defaults: %+v", c.Defaults)
	}
	c, err = (sources{flags: FlagValues{"network": "open", "presets": "none", "allow": "*.example.com"},
		env: map[string]string{"SANDBOX_MCP_ALLOW": "pypi.org, 10.0.0.0/8:5432"}}).resolve()
	if err != nil {
		t.Fatal(err)
	}
	if c.Defaults.Network != "open" || len(c.Defaults.Presets) != 0 || c.Defaults.Presets == nil {
		t.Fatalf("flags: %+v", c.Defaults)
	}
	if got := c.Defaults.Allow; !reflect.DeepEqual(got, []string{"pypi.org", "10.0.0.0/8:5432", "*.example.com"}) {
		t.Fatalf("--allow and the variable each add patterns: %v", got)
	}
	for _, tc := range []struct {
		src  sources
		want string
	}{
		{sources{flags: FlagValues{"network": "wide"}}, "--network"},
		{sources{flags: FlagValues{"allow": "a b"}}, "--allow"},
		{sources{flags: FlagValues{"presets": "everything"}}, "--presets"},
		{sources{flags: FlagValues{"intercept": "10.0.0.1"}}, "--intercept"},
		{sources{env: map[string]string{"SANDBOX_MCP_ALLOW": "host:0"}}, "SANDBOX_MCP_ALLOW"},
		{sources{flags: FlagValues{"egress-hosts": "/nonexistent/hosts"}}, "--egress-hosts"},
	} {
		if _, err := tc.src.resolve(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.src, err, tc.want)
		}
	}
}

// TestEnginePathMatchesRuntime: an engine_path names the CLI of the runtime
// asked for, or the runtime is auto.
func TestEnginePathMatchesRuntime(t *testing.T) {
	dir := fakeEngines(t, "docker")
	docker := filepath.Join(dir, "docker")
	if _, err := (sources{flags: FlagValues{"engine-path": docker, "runtime": "podman"}}).resolve(); err == nil ||
		!strings.Contains(err.Error(), "is not the CLI of runtime podman") {
		t.Errorf("docker's CLI for podman: %v", err)
	}
	for _, rt := range []string{"docker", "auto"} {
		if c, err := (sources{flags: FlagValues{"engine-path": docker, "runtime": rt}}).resolve(); err != nil || c.EnginePath != docker {
			t.Errorf("runtime %s: %+v %v", rt, c.EnginePath, err)
		}
	}
}

// TestPortsBindMustBeAnAddress: a host name or garbage is refused where
// it is given, since a listener on the wrong interface is a security
// matter.
func TestPortsBindMustBeAnAddress(t *testing.T) {
	for _, tc := range []struct {
		src  sources
		want string
	}{
		{sources{flags: FlagValues{"ports-bind": "localhost"}}, "--ports-bind"},
		{sources{env: map[string]string{"SANDBOX_MCP_PORTS_BIND": "127.0.0.1:80"}}, "SANDBOX_MCP_PORTS_BIND"},
		{sources{env: map[string]string{"SANDBOX_MCP_CONFIG": "/c.json"}, files: map[string]string{"/c.json": `{"ports_bind": ""}`}}, "ports_bind"},
	} {
		if _, err := tc.src.resolve(); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "not an IP address") {
			t.Errorf("%+v: %v", tc.src, err)
		}
	}
}

// TestAllowDirs: allowed directories add up across the file, the
// environment (a list) and repeated flags; / and missing ones are refused.
func TestAllowDirs(t *testing.T) {
	a, b, c, d := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	cfg, err := sources{
		files: map[string]string{"/cfg.json": `{"allow_dirs": ["` + a + `"]}`},
		env:   map[string]string{"SANDBOX_MCP_CONFIG": "/cfg.json", "SANDBOX_MCP_ALLOW_DIRS": b + string(os.PathListSeparator) + c},
		flags: FlagValues{"allow-dir": d},
	}.resolve()
	if err != nil || strings.Join(cfg.AllowDirs, ",") != strings.Join([]string{a, b, c, d}, ",") {
		t.Fatalf("allow dirs %v, %v", cfg.AllowDirs, err)
	}
	for _, bad := range []string{"/", filepath.Join(a, "missing")} {
		_, err := sources{flags: FlagValues{"allow-dir": bad}}.resolve()
		if err == nil || !strings.Contains(err.Error(), "--allow-dir") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// TestChildPolicies: default may spawn under the default policy unless
// the file says otherwise; the file's keys change the default policy's;
// flags add names; bad policies are refused where they are given.
func TestChildPolicies(t *testing.T) {
	cfg, err := sources{}.resolve()
	if err != nil || len(cfg.ChildPolicies) != 1 || cfg.ChildPolicies["default"].MaxConcurrent != 3 {
		t.Fatalf("default: %+v %v", cfg.ChildPolicies, err)
	}
	cfg, err = sources{env: map[string]string{"SANDBOX_MCP_CONFIG": "/c.json"}, files: map[string]string{"/c.json": `{"child_policies": {}}`}}.resolve()
	if err != nil || len(cfg.ChildPolicies) != 0 {
		t.Fatalf("none: %+v %v", cfg.ChildPolicies, err)
	}
	cfg, err = sources{
		env:   map[string]string{"SANDBOX_MCP_CONFIG": "/c.json", "SANDBOX_MCP_CHILD_POLICIES": "e1;e2:{\"max_total\":4}"},
		files: map[string]string{"/c.json": `{"child_policies": {"w": {"max_concurrent": 1, "max_total": 2, "child_ttl": "1m"}}}`},
		flags: FlagValues{"child-policy": `f:{"allowed_images":["alpine"]}`},
	}.resolve()
	if err != nil || len(cfg.ChildPolicies) != 4 || cfg.ChildPolicies["w"].MaxTotal != 2 || cfg.ChildPolicies["w"].TotalChildCPUs != 6 ||
		cfg.ChildPolicies["e2"].MaxTotal != 4 || cfg.ChildPolicies["f"].AllowedImages[0] != "alpine" {
		t.Fatalf("merged: %+v %v", cfg.ChildPolicies, err)
	}
	for _, tc := range []struct {
		src  sources
		want string
	}{
		{sources{flags: FlagValues{"child-policy": `x:{"max_concurrent":0}`}}, "--child-policy"},
		{sources{flags: FlagValues{"child-policy": `x:{"nonsense":1}`}}, "unknown field"},
		{sources{flags: FlagValues{"child-policy": `bad name:`}}, "--child-policy"},
		{sources{flags: FlagValues{"child-policy": `x:{"max_total":2}:y:{}`}}, "more than one JSON object"},
		{sources{env: map[string]string{"SANDBOX_MCP_CONFIG": "/c.json"}, files: map[string]string{"/c.json": `{"child_policies": {"w": {"child_network_peers": "friends"}}}`}}, "child_policies.w"},
	} {
		if _, err := tc.src.resolve(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v", tc.src, err)
		}
	}
}

// TestJobRetentionRefusesNonsense: zero, negative and unreadable
// retentions are refused where they are given.
func TestJobRetentionRefusesNonsense(t *testing.T) {
	for _, v := range []string{"0", "0s", "-1h", "soon", "7x", "-3d"} {
		if _, err := (sources{flags: FlagValues{"job-retention": v}}).resolve(); err == nil || !strings.Contains(err.Error(), "job-retention") {
			t.Errorf("--job-retention %s: %v", v, err)
		}
	}
}

// TestWarmPoolsNeedSandboxes: --kube-warm-pools is refused without
// --kube-sandbox-crd (a pool keeps Sandboxes), from a flag or the file,
// and taken with it.
func TestWarmPoolsNeedSandboxes(t *testing.T) {
	for _, s := range []sources{
		{flags: FlagValues{"runtime": "kubernetes", "kube-warm-pools": "true"}},
		{files: map[string]string{}, env: map[string]string{"SANDBOX_MCP_KUBE_WARM_POOLS": "1", "SANDBOX_MCP_RUNTIME": "kubernetes"}},
	} {
		if _, err := s.resolve(); err == nil || !strings.Contains(err.Error(), "--kube-sandbox-crd") {
			t.Errorf("%+v: %v", s, err)
		}
	}
	// With sandbox mode, from whichever source each comes, in any
	// order of their settings.
	for _, s := range []sources{
		{flags: FlagValues{"runtime": "kubernetes", "kube-sandbox-crd": "true", "kube-warm-pools": "true"}},
		{flags: FlagValues{"runtime": "kubernetes", "kube-sandbox-crd": "true", "kube-namespace": "sandboxes"},
			env: map[string]string{"SANDBOX_MCP_KUBE_WARM_POOLS": "true"}},
		{flags: FlagValues{"runtime": "kubernetes", "kube-sandbox-crd": "true"},
			env:   map[string]string{"SANDBOX_MCP_CONFIG": "/cfg.json"},
			files: map[string]string{"/cfg.json": `{"kubernetes": {"warm_pools": true, "namespace": "sandboxes"}}`}},
	} {
		cfg, err := s.resolve()
		if err != nil || !cfg.Kube.WarmPools || !cfg.Kube.SandboxCRD {
			t.Errorf("with sandbox mode, %+v: %+v %v", s, cfg.Kube, err)
		}
	}
}
