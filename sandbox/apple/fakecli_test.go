package apple

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// fakeReply is what the fake CLI answers to one command line.
type fakeReply struct {
	stdout, stderr string
	code           int
}

// fakeCLI returns a dialect on a fake `container` program of the given
// version that answers the command lines in replies (arguments joined by
// spaces) and fails any other with exit 99, and a function returning the
// command lines it was given.
func fakeCLI(t *testing.T, version string, replies map[string]fakeReply) (*Dialect, func() []string) {
	t.Helper()
	dir := t.TempDir()
	var script strings.Builder
	fmt.Fprintf(&script, "#!/bin/sh\nprintf '%%s\\n' \"$*\" >> '%s/log'\ncase \"$*\" in\n", dir)
	fmt.Fprintf(&script, "'--version') echo 'container CLI version %s (build: release, commit: 0000000)';;\n", version)
	i := 0
	for line, r := range replies {
		i++
		out, errf := filepath.Join(dir, fmt.Sprint(i, ".out")), filepath.Join(dir, fmt.Sprint(i, ".err"))
		if err := os.WriteFile(out, []byte(r.stdout), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(errf, []byte(r.stderr), 0o600); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&script, "'%s') cat '%s'; cat '%s' >&2; exit %d;;\n", line, out, errf, r.code)
	}
	script.WriteString("*) echo \"Error: fake: unexpected command line: $*\" >&2; exit 99;;\nesac\n")
	bin := filepath.Join(dir, "container")
	if err := os.WriteFile(bin, []byte(script.String()), 0o700); err != nil {
		t.Fatal(err)
	}
	return New(Options{Binary: bin}), func() []string {
		b, _ := os.ReadFile(filepath.Join(dir, "log"))
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
}

// sample is a testdata file as a string.
func sample(t *testing.T, name string) string { return string(readTestdata(t, name)) }

// errForm picks the testdata file of an error in the form version v prints.
func errForm(v, pre010, from010 string) string {
	if ver, _ := ParseVersion(v); ver.AtLeast(v0_10) {
		return from010
	}
	return pre010
}

var allVersions = []string{"0.8.0", "0.9.0", "0.10.0", "0.11.0", "0.12.3", "1.0.0", "1.2.2", "1.5.0"}

// TestVolumeRemoveMissing: destroying a sandbox whose workspace volume was
// removed outside the server must not fail, whatever the version says.
func TestVolumeRemoveMissing(t *testing.T) {
	for _, v := range allVersions {
		text := sample(t, errForm(v, "stderr-volume-delete-missing-pre-0.10.txt", "stderr-volume-delete-missing-0.10-1.x.txt"))
		d, _ := fakeCLI(t, v, map[string]fakeReply{"volume delete nope": {stderr: text, code: 1}})
		if err := d.VolumeRemove(tctx(t), "nope"); err != nil {
			t.Errorf("%s: VolumeRemove(missing) = %v", v, err)
		}
	}
}

// TestVolumeRemoveInUse: the CLI's last line does not say why a delete
// failed; a container that mounts the volume makes it ErrInUse, which the
// Manager waits out, and any other failure stays what it is.
func TestVolumeRemoveInUse(t *testing.T) {
	const mounted = `[{"id":"user1","configuration":{"id":"user1","labels":{},"mounts":[{"destination":"/w","options":[],"source":"/v/busy/volume.img","type":{"volume":{"cache":{"on":{}},"format":"ext4","name":"busy","sync":{"fsync":{}}}}}]},"status":{"networks":[],"state":"stopped"}}]`
	const unmounted = `[{"id":"user1","configuration":{"id":"user1","labels":{},"mounts":[]},"status":{"networks":[],"state":"stopped"}}]`
	for _, v := range allVersions {
		full := sample(t, errForm(v, "stderr-volume-delete-in-use-pre-0.10.txt", "stderr-volume-delete-in-use-0.10-1.x.txt"))
		lastLine := full[strings.Index(full, "Error: "):]
		for _, c := range []struct {
			name, stderr, list string
			inUse              bool
		}{
			{"with the log line", full, mounted, true},
			{"last line only, mounted", lastLine, mounted, true},
			{"last line only, not mounted", lastLine, unmounted, false},
		} {
			d, lines := fakeCLI(t, v, map[string]fakeReply{
				"volume delete busy":       {stderr: c.stderr, code: 1},
				"list --all --format json": {stdout: c.list},
			})
			err := d.VolumeRemove(tctx(t), "busy")
			if err == nil || errors.Is(err, sandbox.ErrInUse) != c.inUse {
				t.Errorf("%s %s: %v (calls %q)", v, c.name, err, lines())
			}
		}
	}
	d, _ := fakeCLI(t, "1.2.2", nil)
	if err := d.VolumeRemove(tctx(t), "bad name"); err == nil || !strings.Contains(err.Error(), "volume name") {
		t.Errorf("invalid name: %v", err)
	}
}

// TestVolumeRemoveRemovedMeanwhile: a delete that fails because another
// client removed the volume between the CLI's list and its delete says
// only that the delete failed; the volume is gone, which is what was
// asked. One still listed keeps the error.
func TestVolumeRemoveRemovedMeanwhile(t *testing.T) {
	const unmounted = `[{"id":"user1","configuration":{"id":"user1","labels":{},"mounts":[]},"status":{"networks":[],"state":"stopped"}}]`
	for _, v := range allVersions {
		full := sample(t, errForm(v, "stderr-volume-delete-in-use-pre-0.10.txt", "stderr-volume-delete-in-use-0.10-1.x.txt"))
		lastLine := full[strings.Index(full, "Error: "):]
		for _, c := range []struct {
			name, vols string
			gone       bool
		}{
			{"gone", "[]", true},
			{"still there", sample(t, "volume-ls-1.2.0.json"), false},
		} {
			vol := "bushel-smoke-vol" // the volume volume-ls-1.2.0.json lists
			d, lines := fakeCLI(t, v, map[string]fakeReply{
				"volume delete " + vol:      {stderr: strings.ReplaceAll(lastLine, "busy", vol), code: 1},
				"list --all --format json":  {stdout: unmounted},
				"volume list --format json": {stdout: c.vols},
			})
			if err := d.VolumeRemove(tctx(t), vol); (err == nil) != c.gone {
				t.Errorf("%s %s: VolumeRemove = %v (calls %q)", v, c.name, err, lines())
			}
		}
	}
}

// TestRemoveImageMissing: an image removed outside the server is no error:
// --force from 0.9.0, the image list before.
func TestRemoveImageMissing(t *testing.T) {
	for _, v := range allVersions {
		replies := map[string]fakeReply{"image delete --force nope": {}}
		if v == "0.8.0" {
			replies = map[string]fakeReply{
				"image delete nope":        {stderr: sample(t, "stderr-image-delete-missing-pre-0.10.txt"), code: 1},
				"image list --format json": {stdout: "[]\n"},
			}
		}
		d, lines := fakeCLI(t, v, replies)
		if err := d.RemoveImage(tctx(t), "nope"); err != nil {
			t.Errorf("%s: RemoveImage(missing) = %v (calls %q)", v, err, lines())
		}
	}
	// 0.8: an image that is there and failed to go is an error.
	d, _ := fakeCLI(t, "0.8.0", map[string]fakeReply{
		"image delete nope":        {stderr: sample(t, "stderr-image-delete-missing-pre-0.10.txt"), code: 1},
		"image list --format json": {stdout: `[{"reference":"docker.io/library/nope:latest","descriptor":{"digest":"sha256:aa"}}]`},
	})
	if err := d.RemoveImage(tctx(t), "nope"); err == nil {
		t.Error("0.8.0 failed delete of a present image: want an error")
	}
}

// TestRemoveMissingContainer: a missing container is ErrNotFound in each
// version's words.
func TestRemoveMissingContainer(t *testing.T) {
	for v, file := range map[string]string{
		"0.9.0":  "stderr-delete-missing-0.1-0.9.txt",
		"0.10.0": "stderr-delete-missing-0.10.txt",
		"1.2.2":  "stderr-delete-missing-1.x.txt",
	} {
		d, _ := fakeCLI(t, v, map[string]fakeReply{"delete --force nosuch": {stderr: sample(t, file), code: 1}})
		if err := d.Remove(tctx(t), "nosuch"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("%s: Remove(missing) = %v", v, err)
		}
	}
}

// tctx bounds one call to the fake CLI; a hung one ends the test.
func tctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// TestVolumeCreateSizedExisting: a workspace volume that exists already
// is sized only if it was made with -s; one made without is the CLI's
// 512 GiB default and must not be reported as bounded.
func TestVolumeCreateSizedExisting(t *testing.T) {
	for _, c := range []struct {
		version, list, name string
		sized               bool
	}{
		{"1.4.1", "volume-ls-1.4.1.json", "probe-shortform", true},
		{"1.4.1", "volume-ls-1.4.1.json", "web", false},
		{"1.2.2", "volume-ls-1.2.0.json", "bushel-smoke-vol", false},
		{"0.12.3", "volume-ls-0.12.3.json", "gantry-test-vol", false},
	} {
		exists := "Error: volume '" + c.name + "' already exists\n"
		if v, _ := ParseVersion(c.version); !v.AtLeast(v0_10) {
			exists = `Error: invalidArgument: "volume '` + c.name + `' already exists"` + "\n"
		}
		d, lines := fakeCLI(t, c.version, map[string]fakeReply{
			"volume create -s 20480M " + c.name: {stderr: exists, code: 1},
			"volume list --format json":         {stdout: sample(t, c.list)},
		})
		sized, err := d.VolumeCreateSized(tctx(t), c.name, nil, 20<<30, false)
		if err != nil || sized != c.sized {
			t.Errorf("%s %s: sized %v, %v; want %v (calls %q)", c.version, c.name, sized, err, c.sized, lines())
		}
	}
	d, _ := fakeCLI(t, "1.5.0", map[string]fakeReply{"volume create -s 20480M ws": {stdout: "ws\n"}})
	if sized, err := d.VolumeCreateSized(tctx(t), "ws", nil, 20<<30, true); err != nil || !sized {
		t.Errorf("new volume: %v %v", sized, err)
	}
}

// TestMemoryArg: -m always carries a unit and whole MiB, since Apple reads
// a bare number as bytes and drops a fraction of a MiB.
func TestMemoryArg(t *testing.T) {
	for in, want := range map[string]string{"512M": "512M", "512m": "512M", "2G": "2048M", "1g": "1024M",
		"512k": "1M", "1048576": "1M", "1073741825": "1025M", "1T": "1048576M"} {
		if got, err := memoryArg(in); err != nil || got != want {
			t.Errorf("memoryArg(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "0M", "1.5G", "-1G", "1GB", "x", "99999999999999999999G"} {
		if got, err := memoryArg(bad); err == nil {
			t.Errorf("memoryArg(%q) = %q, want an error", bad, got)
		}
	}
}
