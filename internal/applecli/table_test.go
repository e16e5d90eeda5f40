package applecli

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/tables from the tables")

// goodValue is a value row a takes (its type and format rule accept it).
func goodValue(a *Arg) string {
	if a.Type != nil && len(a.Type.Cases) > 0 {
		return a.Type.Cases[0]
	}
	if a.Type != nil {
		return "2"
	}
	if a.Format != nil {
		switch a.Format.Name {
		case "label":
			return "k=v"
		case "memory", "size", "volume size":
			return "512M"
		case "container name", "volume name":
			return "web1"
		case "volume":
			return "vol1:/data"
		case "network":
			return "default"
		case "mount":
			return "type=tmpfs,target=/tmp/t"
		case "publish":
			return "8080:80"
		}
	}
	if a.Key() == "tag" {
		return "img:1"
	}
	return "x1"
}

// baseLine is a line the command takes: its words, then a value for
// each required positional (and an id where a rule wants ids).
func baseLine(t *Table) (words, positionals []string) {
	words = strings.Fields(t.Command.Path)
	for _, a := range t.Args {
		if a.Kind != Positional {
			continue
		}
		if a.Required || a.Key() == "container-ids" || a.Key() == "images" || a.Key() == "names" || a.Key() == "network-names" {
			positionals = append(positionals, goodValue(a))
		}
	}
	return words, positionals
}

func line(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func refusal(t *testing.T, err error) *Refusal {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("want a refusal, got %v", err)
	}
	return r
}

// TestEveryRowEveryRelease: for every release and command, each row is
// taken with a good value (and a flag as a flag), an unknown option is
// refused with the parser's text and exit 64, a value-taking option
// without its value is refused, and a flag given a value is refused.
func TestEveryRowEveryRelease(t *testing.T) {
	for _, v := range Releases {
		for _, c := range Commands(v) {
			tb := tableOf(v, c)
			if c.Group || c.Path == "help" {
				continue
			}
			words, pos := baseLine(tb)
			if err := Check(v, line(words, pos)); err != nil {
				t.Errorf("%s %q: the base line is refused: %v", v, line(words, pos), err)
				continue
			}
			for _, a := range tb.Args {
				if a.Kind == Positional {
					continue
				}
				for _, name := range a.Names {
					opt := []string{name}
					if a.Kind == Option {
						opt = append(opt, goodValue(a))
					}
					withPos := pos
					if a.Key() == "all" {
						withPos = nil // --all and ids are exclusive
					}
					if err := Check(v, line(words, opt, withPos)); err != nil {
						t.Errorf("%s: %q is refused: %v", v, line(words, opt, withPos), err)
					}
					if a.Kind == Option {
						argv := line(words, pos, []string{name})
						if tb.Passthrough() {
							argv = line(words, []string{name})
						}
						r := refusal(t, Check(v, argv))
						want := "Error: Missing value for '" + name + " <" + a.valueName() + ">'"
						if !strings.HasPrefix(r.Text, want+"\n") || r.Code != ExitUsage || r.Row != a {
							t.Errorf("%s %q: %d %q, want %q", v, argv, r.Code, r.Text, want)
						}
					}
					if a.Kind == Flag && strings.HasPrefix(name, "--") {
						argv := line(words, []string{name + "=yes"}, pos)
						r := refusal(t, Check(v, argv))
						want := "Error: The option '" + name + "' does not take any value, but 'yes' was specified."
						if !strings.HasPrefix(r.Text, want+"\n") || r.Code != ExitUsage {
							t.Errorf("%s %q: %q", v, argv, r.Text)
						}
					}
				}
			}
			argv := line(words, []string{"--zzzzzzzzzz"}, pos)
			r := refusal(t, Check(v, argv))
			usage := "Usage: " + tb.Usage() + "\n  See 'container " + c.Path + " --help' for more information."
			if want := "Error: Unknown option '--zzzzzzzzzz'\n" + usage; r.Text != want || r.Code != ExitUsage {
				t.Errorf("%s %q: %d %q, want %q", v, argv, r.Code, r.Text, want)
			}
		}
	}
}

// TestOptionsOfOtherReleases: an option is refused by the releases that
// do not have it, as unknown.
func TestOptionsOfOtherReleases(t *testing.T) {
	for _, c := range []struct {
		argv        []string
		first, last string // first release that takes it, last one ("" open)
	}{
		{[]string{"run", "--init", "img"}, "0.10.0", ""},
		{[]string{"run", "--ulimit", "nofile=1", "img"}, "0.9.0", ""},
		{[]string{"run", "--cap-add", "NET_RAW", "img"}, "0.12.0", ""},
		{[]string{"run", "--shm-size", "64M", "img"}, "1.0.0", ""},
		{[]string{"run", "--kernel-arg", "quiet", "img"}, "1.2.0", ""},
		{[]string{"run", "--read-only-path", "NONE", "img"}, "1.2.1", ""},
		{[]string{"system", "status", "--format", "json"}, "0.10.0", ""},
		{[]string{"image", "delete", "--force", "img"}, "0.9.0", ""},
		{[]string{"export", "-o", "f.tar", "web1"}, "0.11.0", ""},
		{[]string{"export", "--image", "img", "web1"}, "0.10.0", "0.10.0"},
		{[]string{"cp", "web1:/a", "/tmp/a"}, "1.0.0", ""},
		{[]string{"prune"}, "0.9.0", ""},
		{[]string{"system", "property", "get", "registry.domain"}, "0.8.0", "0.12.3"},
		{[]string{"system", "property", "list", "--format", "json"}, "0.8.0", ""},
		{[]string{"system", "property", "list", "--format", "toml"}, "1.0.0", ""},
		{[]string{"list", "--format", "yaml"}, "0.12.0", ""},
		{[]string{"build", "--pull", "-t", "img", "."}, "0.10.0", ""},
	} {
		for _, v := range Releases {
			want := v.AtLeast(c.first) && (c.last == "" || v.Cmp(MustVersion(c.last)) <= 0)
			err := Check(v, c.argv)
			if want && err != nil {
				t.Errorf("%s %q: %v", v, c.argv, err)
			}
			if !want {
				r := refusal(t, err)
				if r.Code != ExitUsage && r.Code != ExitFailure {
					t.Errorf("%s %q: exit %d", v, c.argv, r.Code)
				}
			}
		}
	}
}

// TestKnownBad: lines the real CLI refuses, with its texts.
func TestKnownBad(t *testing.T) {
	for _, c := range []struct {
		version string
		argv    []string
		code    int
		text    string // the first line
		row     string // the broken row's key, "" for none
	}{
		// A label value may not hold '=' (Parser.labels: at most two splits).
		{"1.2.2", []string{"run", "-d", "--name", "web1", "-l", "io.sandbox-mcp.limits=disk=20G", "img"}, 1, "Error: invalid label format io.sandbox-mcp.limits=disk=20G", "label"},
		{"0.9.0", []string{"run", "-l", "a=b=c", "img"}, 1, `Error: invalidArgument: "invalid label format a=b=c"`, "label"},
		{"1.0.0", []string{"create", "-l", "", "img"}, 1, "Error: label cannot be an empty string", "label"},
		// Options from later releases.
		{"0.9.0", []string{"run", "--init", "img"}, 64, "Error: Unknown option '--init'. Did you mean '--env'?", ""},
		{"0.12.3", []string{"cp", "a:/x", "/y"}, 64, "Error: Plugin 'container-cp' not found.", ""},
		{"1.1.0", []string{"run", "--kernel-arg", "quiet", "img"}, 64, "Error: Unknown option '--kernel-arg'", ""},
		// create has no progress options.
		{"1.2.2", []string{"create", "--progress", "none", "img"}, 64, "Error: Unknown option '--progress'", ""},
		// Names: the id rule, 63 characters from 1.2.0.
		{"1.2.2", []string{"run", "--name", "x", "img"}, 1, "Error: container ID x is not a valid container ID", "name"},
		{"1.1.0", []string{"run", "--name", ".x", "img"}, 1, "Error: invalid entity name .x", "name"},
		{"0.8.0", []string{"run", "--name", ".x", "img"}, 1, `Error: invalidArgument: "invalid entity name .x"`, "name"},
		{"1.2.2", []string{"run", "--name", strings.Repeat("a", 64), "img"}, 1, "Error: container ID " + strings.Repeat("a", 64) + " is not a valid container ID", "name"},
		// Sizes: a bare number is bytes; a unit it does not know.
		{"1.2.2", []string{"run", "-m", "1X", "img"}, 1, "Error: invalid symbol: x", "memory"},
		{"1.2.2", []string{"volume", "create", "-s", "100", "v1"}, 1, "Error: storage error: volume size too small: minimum 1MiB", "s"},
		{"1.2.2", []string{"volume", "create", "-s", "12Q", "v1"}, 1, "Error: invalid symbol: q", "s"},
		// Volume names and -v.
		// A missing positional is reported before an unknown option.
		{"1.2.2", []string{"volume", "create", "-bad"}, 64, "Error: Missing expected argument '<name>'", "name"},
		{"1.2.2", []string{"volume", "create", "_bad"}, 1, "Error: invalid volume name 'invalid volume name '_bad': must match ^[A-Za-z0-9][A-Za-z0-9_.-]*$'", "name"},
		{"1.2.2", []string{"run", "-v", "_v:/data", "img"}, 1, "Error: invalid volume name '_v': must match ^[A-Za-z0-9][A-Za-z0-9_.-]*$", "volume"},
		{"1.2.2", []string{"run", "-v", "a:b:c:d", "img"}, 1, "Error: invalid volume format a:b:c:d", "volume"},
		// Networks: mtu from 0.11.0.
		{"0.10.0", []string{"run", "--network", "default,mtu=1500", "img"}, 1, "Error: unknown network property 'mtu'. Available properties: mac", "network"},
		{"1.2.2", []string{"run", "--network", "default,mtu=100", "img"}, 1, "Error: invalid mtu value '100': must be between 1280 and 65535", "network"},
		// Ports.
		{"1.2.2", []string{"run", "-p", "1:1", "img"}, 1, "Error: invalid publish host port range: 1", "publish"},
		{"1.2.2", []string{"run", "-p", "8080:80/sctp", "img"}, 1, "Error: invalid publish protocol: sctp", "publish"},
		{"1.2.2", []string{"run", "-p", "8080-8081:80", "img"}, 1, "Error: publish host and container port counts are not equal: 8080-8081:80", "publish"},
		// Parser errors.
		{"1.2.2", []string{"stop", "-t", "soon", "web1"}, 64, "Error: The value 'soon' is invalid for '-t <time>'", "time"},
		{"1.2.2", []string{"list", "--format", "xml"}, 64, "Error: The value 'xml' is invalid for '--format <format>'. Please provide one of 'json', 'table', 'yaml' or 'toml'.", "format"},
		{"0.8.0", []string{"list", "--format", "yaml"}, 64, "Error: The value 'yaml' is invalid for '--format <format>'. Please provide one of 'json' and 'table'.", "format"},
		{"1.2.2", []string{"run", "-d"}, 64, "Error: Missing expected argument '<image>'", "image"},
		{"1.2.2", []string{"exec", "web1"}, 64, "Error: Missing expected argument '<arguments> ...'", "arguments"},
		{"1.2.2", []string{"run", "--name", "-x", "img"}, 64, "Error: Missing value for '--name <name>'", "name"},
		{"1.2.2", []string{"run", "-l", "-x", "img"}, 64, "Error: Missing value for '-l <label>'", "label"},
		{"1.2.2", []string{"exec", "web1", "echo", "---"}, 64, "Error: Invalid option: ---", ""},
		{"1.2.2", []string{"list", "extra"}, 64, "Error: Unexpected argument 'extra'", ""},
		{"1.2.2", []string{"exec", "-dz", "web1", "ls"}, 64, "Error: Unknown option '-z'", ""},
		{"1.2.2", []string{"stop"}, 1, "Error: no containers specified and --all not supplied", ""},
		{"0.9.0", []string{"delete", "--all", "web1"}, 1, `Error: invalidArgument: "explicitly supplied container ID(s) conflict with the --all flag"`, ""},
		{"1.0.0", []string{"run", "--no-dns", "--dns", "1.1.1.1", "img"}, 64, "Error: `--no-dns` cannot be used with DNS configuration flags (`--dns`, `--dns-domain`, `--dns-option`, `--dns-search`)", ""},
		{"1.2.2", []string{"build", "-t", "Snap:1", "."}, 64, "Error: invalid reference Snap:1", ""},
		{"1.2.2", []string{"images"}, 64, "Error: Plugin 'container-images' not found.", ""},
		{"1.2.2", []string{"image", "list", "-q", "-v"}, 1, "Error: cannot use flag --quiet and --verbose together", ""},
		{"0.12.3", []string{"image", "list", "-q", "--format", "json"}, 1, `Error: cannot use flag --quiet or --verbose along with --format json`, ""},
	} {
		r := refusal(t, Check(MustVersion(c.version), c.argv))
		first, _, _ := strings.Cut(r.Text, "\n")
		if r.Code != c.code || first != c.text {
			t.Errorf("%s %q: %d %q, want %d %q", c.version, c.argv, r.Code, first, c.code, c.text)
		}
		if c.row != "" && (r.Row == nil || r.Row.Key() != c.row) {
			t.Errorf("%s %q: row %v, want %s", c.version, c.argv, r.Row, c.row)
		}
		if !strings.Contains(r.Error(), first) {
			t.Errorf("%s %q: %v", c.version, c.argv, r)
		}
	}
}

// TestAccepted: lines the real CLI takes, in the parser's less obvious ways.
func TestAccepted(t *testing.T) {
	for _, c := range []struct {
		version string
		argv    []string
		pos     []string
	}{
		{"1.2.2", []string{"run", "-d", "--name=web1", "-l", "a=b", "--label", "c", "-it", "-c", "2", "img", "sh", "-c", "--name", "x"}, []string{"img", "sh", "-c", "--name", "x"}},
		{"1.2.2", []string{"exec", "-i", "web1", "--", "ls"}, []string{"web1", "--", "ls"}},
		{"1.2.2", []string{"exec", "-ei", "K=V", "web1", "env"}, []string{"web1", "env"}},
		{"1.2.2", []string{"stop", "web1", "-t", "3"}, []string{"web1"}},
		{"1.2.2", []string{"--debug", "list", "--debug", "-aq"}, nil},
		{"1.2.2", []string{"i", "ls", "--format", "json"}, nil},
		{"1.2.2", []string{"v", "rm", "vol1"}, []string{"vol1"}},
		{"0.8.0", []string{"system", "property", "get", "registry.domain"}, []string{"registry.domain"}},
		{"1.2.2", []string{"run", "--cpus=-1", "img"}, []string{"img"}},
		{"1.2.2", []string{"delete", "--", "-odd"}, []string{"-odd"}},
	} {
		p, err := Parse(MustVersion(c.version), c.argv)
		if err != nil {
			t.Errorf("%s %q: %v", c.version, c.argv, err)
			continue
		}
		if p.Outcome != RunCommand || !slices.Equal(p.Pos, c.pos) {
			t.Errorf("%s %q: outcome %d, positionals %q, want %q", c.version, c.argv, p.Outcome, p.Pos, c.pos)
		}
	}
	p, err := Parse(MustVersion("1.2.2"), []string{"run", "-d", "--name=web1", "-l", "a=b", "-l", "c", "-c", "1", "-c", "2", "img", "sh"})
	if err != nil || !p.Has("detach") || p.Val("name", "") != "web1" || !slices.Equal(p.Vals("label"), []string{"a=b", "c"}) || p.Val("cpus", "") != "2" {
		t.Errorf("values: %v %+v", err, p)
	}
	if got, want := p.Shape(), "run -d --name <name> -l <label> ... -c <cpus> ... <image> <arguments> ..."; got != want {
		t.Errorf("shape %q, want %q", got, want)
	}
	for _, argv := range [][]string{{"--version"}, {"run", "--version"}, {"--help"}, {"stop", "-h"}, {}, {"image"}, {"help", "run"}} {
		p, err := Parse(MustVersion("1.2.2"), argv)
		if err != nil || (p.Outcome != ShowHelp && p.Outcome != ShowVersion) {
			t.Errorf("%q: %v %+v", argv, err, p)
		}
	}
}

// TestSamples: what captures of releases past the source show is taken
// by their tables.
func TestSamples(t *testing.T) {
	for _, s := range Samples {
		if err := Check(s.Version, s.Argv); err != nil {
			t.Errorf("%s (%s): %v", s.Version, s.Source, err)
		}
	}
}

// TestDumps: testdata/tables/<release>.txt are the tables as Dump renders
// them (go test -update rewrites them).
func TestDumps(t *testing.T) {
	for _, v := range Releases {
		path := filepath.Join("testdata", "tables", v.String()+".txt")
		got := Dump(v)
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -update writes it)", err)
		}
		if string(want) != got {
			t.Errorf("%s differs from Dump(%s): run go test ./internal/applecli -update and review the diff", path, v)
		}
	}
}

// TestSourceReferences: every row's source file exists at the tag that
// describes each release having it, and declares the property. Needs a
// clone of apple/container (APPLE_CONTAINER_REPO, a git directory).
func TestSourceReferences(t *testing.T) {
	repo := os.Getenv("APPLE_CONTAINER_REPO")
	if repo == "" {
		t.Skip("set APPLE_CONTAINER_REPO to a git directory of apple/container to check the tables' source references")
	}
	cache := map[string]string{}
	show := func(tag, path string) (string, bool) {
		key := tag + ":" + path
		if s, ok := cache[key]; ok {
			return s, s != ""
		}
		out, err := exec.Command("git", "--git-dir", repo, "show", key).Output()
		cache[key] = string(out)
		return string(out), err == nil
	}
	check := func(v Version, what, src string) {
		if strings.HasPrefix(src, argParserSrc) {
			return
		}
		path, prop, _ := strings.Cut(src, "#")
		tag := SourceTag(v)
		text, ok := show(tag, "Sources/"+path)
		if !ok {
			t.Errorf("%s: %s: no Sources/%s at %s", v, what, path, tag)
			return
		}
		if prop != "" && !regexp.MustCompile(`\b(var|func) `+regexp.QuoteMeta(prop)+`\b`).MatchString(text) {
			t.Errorf("%s: %s: Sources/%s@%s declares no %s", v, what, path, tag, prop)
		}
	}
	for _, v := range Releases {
		if v.Cmp(NewestSource) > 0 {
			continue
		}
		for _, c := range Commands(v) {
			check(v, "command "+c.Path, c.Src)
			tb := tableOf(v, c)
			for _, a := range tb.Args {
				check(v, c.Path+" "+a.Describe(), a.Src)
			}
			for _, r := range tb.Rules {
				check(v, c.Path+" rule "+r.Name, r.Src)
			}
		}
	}
}

// TestMeasurement: sizes are read as Measurement.parse does
// (Measurement+Parse.swift, 0.8.0–1.2.2): a bare number is bytes.
func TestMeasurement(t *testing.T) {
	for in, want := range map[string]int64{
		"1G": 1 << 30, "512M": 512 << 20, "512m": 512 << 20, "1024": 1024, "2GiB": 2 << 30, "2gb": 2 << 30,
		"64K": 64 << 10, "1.5G": 3 << 29, " 1 g ": 1 << 30, "1.": 1, ".5k": 512, "0": 0, "7b": 7, "7B": 7,
		"1p": 1 << 50, "1\tt": 1 << 40,
	} {
		if got, err := SizeBytes(in); err != nil || got != want {
			t.Errorf("SizeBytes(%q) = %d %v, want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"": "invalid size", "  ": "invalid size", "x": "invalid size", "-1G": "invalid size", "G": "invalid size",
		".": "invalid size", "1.2.3": "invalid size", "1e3": "invalid symbol: e3", "1x": "invalid symbol: x",
		"1 Mi": "invalid symbol: mi", "1kk": "invalid symbol: kk", "1 mbb": "invalid symbol: mbb",
	} {
		if got, err := SizeBytes(in); err == nil || err.Error() != want {
			t.Errorf("SizeBytes(%q) = %d %v, want %q", in, got, err, want)
		}
	}
	// -m is whole MiB, the fraction dropped.
	for in, want := range map[string]int64{"1048576": 1, "1048575": 0, "1.9m": 1, "1g": 1024, "512k": 0} {
		if got, err := MemoryMiB(in); err != nil || got != want {
			t.Errorf("MemoryMiB(%q) = %d %v, want %d", in, got, err, want)
		}
	}
}

// TestContainerName: the id rule of run and create, per release.
func TestContainerName(t *testing.T) {
	for name, ok := range map[string]bool{"web": true, "a": false, "a.b_c-d": true, "-x": false, "bad name": false,
		strings.Repeat("a", 63): true, strings.Repeat("a", 64): false} {
		if (ContainerName(MustVersion("1.2.0"), name) == nil) != ok {
			t.Errorf("1.2.0 %q: want ok=%v", name, ok)
		}
	}
	if ContainerName(MustVersion("1.1.0"), strings.Repeat("a", 64)) != nil {
		t.Error("1.1.0 has no length limit (Utility.validEntityName)")
	}
}

// TestReferences: build tags as Reference.parse takes them.
func TestReferences(t *testing.T) {
	for ref, ok := range map[string]bool{
		"mcp-dev": true, "mcp-dev:latest": true, "docker.io/library/alpine:3.22": true, "localhost:5000/a/b:c": true,
		"sandbox-mcp-snap/web_1:v2": true, "a__b": true, "Snap": false, "a--b": false, "a:": false, "localhost": false,
		"x/": false, strings.Repeat("g", 64): true, strings.Repeat("a", 64): false, strings.Repeat("g", 128): false,
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef":            false,
		"img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef": true,
	} {
		if ValidReference(ref) != ok {
			t.Errorf("%q: want %v", ref, ok)
		}
	}
}
