package apple

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// swiftSplit models Swift's Collection.split(separator: "=", maxSplits:)
// with omittingEmptySubsequences (the default): empty pieces are dropped
// and do not count towards maxSplits, and the rest after the last split
// is kept whole. It works on runes, which is what Swift's Characters are
// for the strings the dialect lets through (see standsAlone).
func swiftSplit(s string, maxSplits int) []string {
	var out []string
	start := 0
	for end := 0; end < len(s); end++ {
		if s[end] != '=' {
			continue
		}
		appended := end > start
		if appended {
			out = append(out, s[start:end])
		}
		start = end + 1
		if appended && len(out) == maxSplits {
			break
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// runLabelModel is Parser.labels (Parser.swift, 0.1.0–1.2.2) for one label.
func runLabelModel(l string) (k, v string, err error) {
	if l == "" {
		return "", "", errors.New("label cannot be an empty string")
	}
	switch p := swiftSplit(l, 2); len(p) {
	case 1:
		return p[0], "", nil
	case 2:
		return p[0], p[1], nil
	}
	return "", "", errors.New("invalid label format " + l)
}

// volumeLabelModel is Utility.parseKeyValuePairs (0.4.0–1.2.2) for one label.
func volumeLabelModel(l string) (k, v string) {
	if p := swiftSplit(l, 1); len(p) == 2 {
		return p[0], p[1]
	}
	return l, ""
}

func TestSwiftSplitModel(t *testing.T) {
	for in, want := range map[string]string{
		"k=v": "k|v", "k": "k", "k=": "k", "=v": "v", "k==v": "k|v", "k=a=b": "k|a|b",
		"k=a=": "k|a", "k=a==": "k|a|=", "=": "", "==": "", "k==": "k",
	} {
		if got := strings.Join(swiftSplit(in, 2), "|"); got != want {
			t.Errorf("split(%q, 2) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"k=a=b": "k|a=b", "k==v": "k|=v", "=v": "v", "k=": "k", "k==": "k|="} {
		if got := strings.Join(swiftSplit(in, 1), "|"); got != want {
			t.Errorf("split(%q, 1) = %q, want %q", in, got, want)
		}
	}
}

// TestLabelArgs: every label the dialect passes is read back by the CLI's
// parser as the same key and value; every other one is refused before
// any CLI runs.
func TestLabelArgs(t *testing.T) {
	for _, c := range []struct {
		k, v      string
		run, vol  bool // accepted for run -l, for volume create --label
		runArg    string
		volumeArg string
	}{
		{k: sandbox.LabelLimits, v: "disk:20G,pids:1024,workspace:volume-size,rootfs:watcher", run: true, vol: true},
		{k: sandbox.LabelLimits, v: "disk=20G,pids=1024", vol: true},
		{k: "k", v: "", run: true, vol: true, runArg: "k=", volumeArg: "k"},
		{k: "k", v: "a=b", vol: true, volumeArg: "k=a=b"},
		{k: "k", v: "=v", vol: true, volumeArg: "k==v"},
		{k: "k", v: "v=", vol: true},
		{k: "", v: "v"},
		{k: "", v: ""},
		{k: "a=b", v: "v"},
		{k: "k", v: `with spaces, "double" and 'single' quotes, $HOME \ back`, run: true, vol: true},
		{k: "k", v: "naïve ünïcode — ok", run: true, vol: true},
		{k: "ключ", v: "значение", run: true, vol: true},
		{k: "k", v: "é", run: true, vol: true},
		{k: "k", v: "日本", run: true, vol: true},
		{k: "k", v: "\u0301x"}, // a combining mark joins the '=' before it
		{k: "k\u0600", v: "v"}, // a prepended mark joins the '=' after it
		{k: "k", v: "\u200dx"}, // so does a zero-width joiner
		{k: "k", v: "\u0e33x"}, // a Thai letter that is a spacing mark
		{k: "k", v: "x\u0301"}, // not next to the '=': fine
		{k: "k", v: "a\x00b"},  // no NUL in an argument
		{k: "k", v: "\xffbad"}, // not UTF-8
	} {
		if c.k == "k" && c.v == "x\u0301" {
			c.run, c.vol = true, true
		}
		arg, err := runLabelArg(c.k, c.v)
		if (err == nil) != c.run {
			t.Errorf("run label %q=%q: %q, %v; want accepted=%v", c.k, c.v, arg, err, c.run)
		} else if err == nil {
			if c.runArg != "" && arg != c.runArg {
				t.Errorf("run label %q=%q: arg %q, want %q", c.k, c.v, arg, c.runArg)
			}
			if k, v, perr := runLabelModel(arg); perr != nil || k != c.k || v != c.v {
				t.Errorf("run label %q=%q: the CLI reads %q as %q=%q (%v)", c.k, c.v, arg, k, v, perr)
			}
		} else if !strings.Contains(err.Error(), "label") {
			t.Errorf("run label %q=%q: unclear error %v", c.k, c.v, err)
		}
		arg, err = volumeLabelArg(c.k, c.v)
		if (err == nil) != c.vol {
			t.Errorf("volume label %q=%q: %q, %v; want accepted=%v", c.k, c.v, arg, err, c.vol)
		} else if err == nil {
			if c.volumeArg != "" && arg != c.volumeArg {
				t.Errorf("volume label %q=%q: arg %q, want %q", c.k, c.v, arg, c.volumeArg)
			}
			if k, v := volumeLabelModel(arg); k != c.k || v != c.v {
				t.Errorf("volume label %q=%q: the CLI reads %q as %q=%q", c.k, c.v, arg, k, v)
			}
		}
	}
}

func TestRunArgsRefusesLabelsTheCLIWouldNotKeep(t *testing.T) {
	f := FeaturesOf(Version{1, 2, 2})
	for _, v := range []string{"disk=20G", "a=b=c", "=x"} {
		spec := sandbox.RunSpec{Name: "box", Image: "img", Labels: map[string]string{sandbox.LabelLimits: v}}
		if args, err := RunArgs(f, spec); err == nil || !strings.Contains(err.Error(), "'='") {
			t.Errorf("label value %q: %q, %v", v, args, err)
		}
	}
	env := map[string]string{"V": `a=b "quoted" with spaces, é 日本 $HOME`}
	if args, err := RunArgs(f, sandbox.RunSpec{Name: "box", Image: "img", Env: env}); err != nil || !slices.Contains(args, "V="+env["V"]) {
		t.Errorf("env value with '=', quotes, spaces and non-ASCII: %q %v", args, err)
	}
	for _, k := range []string{"", "A=B"} {
		if _, err := RunArgs(f, sandbox.RunSpec{Name: "box", Image: "img", Env: map[string]string{k: "v"}}); err == nil {
			t.Errorf("env name %q: want an error", k)
		}
	}
	if _, err := VolumeCreateArgs("ws", map[string]string{"": "v"}, 0); err == nil {
		t.Error("volume label with an empty key: want an error")
	}
}

func TestValidVolumeName(t *testing.T) {
	for _, ok := range []string{"smt-ws-box", "a", "A.b_c-1", "0", strings.Repeat("a", 255)} {
		if err := ValidVolumeName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-x", ".x", "_x", "a/b", "a b", "a=b", `a"b`, "a'b", "é", "a:b", strings.Repeat("a", 256)} {
		if err := ValidVolumeName(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
		if _, err := VolumeCreateArgs(bad, nil, 0); err == nil {
			t.Errorf("VolumeCreateArgs(%q): want an error", bad)
		}
		spec := sandbox.RunSpec{Name: "box", Image: "img", Mounts: []sandbox.Mount{{Volume: bad, Target: "/w"}}}
		if _, err := RunArgs(FeaturesOf(Version{1, 2, 2}), spec); err == nil {
			t.Errorf("RunArgs with volume %q: want an error", bad)
		}
	}
}

// TestVolumeArgsReadAsMeant: each -v the dialect builds is read by the
// CLI (Parser.volume: ':' split with empty pieces dropped, a source with
// '/' is a host path, any other a volume name) as the mount it stands for.
func TestVolumeArgsReadAsMeant(t *testing.T) {
	for _, m := range []sandbox.Mount{
		{Volume: "smt-ws-box", Target: "/workspace"},
		{Volume: "v1.2_x", Target: "/w", ReadOnly: true},
		{Source: "/Users/me/src", Target: "/src", ReadOnly: true},
		{Source: "/", Target: "/host"},
		{Source: "/Users/me/with space/é", Target: "/x y"},
	} {
		arg, err := volumeArg(m)
		if err != nil {
			t.Errorf("%+v: %v", m, err)
			continue
		}
		var parts []string
		for _, p := range strings.Split(strings.TrimLeft(arg, ":"), ":") {
			if p != "" {
				parts = append(parts, p)
			}
		}
		if len(parts) < 2 || len(parts) > 3 {
			t.Errorf("%+v: %q has %d pieces", m, arg, len(parts))
			continue
		}
		isPath := strings.Contains(parts[0], "/")
		ro := len(parts) == 3 && parts[2] == "ro"
		if isPath != (m.Volume == "") || parts[1] != m.Target || ro != m.ReadOnly ||
			(isPath && parts[0] != m.Source) || (!isPath && parts[0] != m.Volume) {
			t.Errorf("%+v: the CLI reads %q as %q", m, arg, parts)
		}
	}
	for _, bad := range []sandbox.Mount{
		{Source: "rel/dir", Target: "/x"}, {Source: "~/x", Target: "/x"}, {Source: "/a:b", Target: "/x"},
		{Volume: "v", Target: "rel"}, {Volume: "v", Target: "/a:b"}, {Volume: "./v", Target: "/x"}, {Target: "/x"},
	} {
		if arg, err := volumeArg(bad); err == nil {
			t.Errorf("%+v: %q, want an error", bad, arg)
		}
	}
}
