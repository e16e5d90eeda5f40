package apple

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The files in testdata/ are real outputs of Apple's CLI from 0.x to 1.5.0
// (provenance in testdata/README.md).

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseContainersAllShapes(t *testing.T) {
	type want struct {
		name, image, ip string
		state           sandbox.State
		cpus            float64
		memory          int64
		started         time.Time
		created         time.Time
		labels          map[string]string
	}
	gib := int64(1 << 30)
	cases := map[string][]want{
		// 1.x, sorted keys, `\/` escapes, Foundation pretty print
		"container-inspect-1.0.0.json": {{"web-demo", "docker.io/library/alpine:latest", "192.168.64.4", sandbox.StateRunning, 4, gib,
			ts("2026-07-28T15:38:37Z"), ts("2026-07-28T15:38:36Z"), map[string]string{}}},
		"container-inspect-1.2.0.json": {{"bushel-smoke", "docker.io/library/alpine:latest", "192.168.64.2", sandbox.StateRunning, 4, gib,
			ts("2026-08-20T08:07:27Z"), ts("2026-08-20T08:07:26Z"), map[string]string{}}},
		"container-inspect-1.4.1.json": {{"busy", "docker.io/library/alpine:latest", "192.168.67.7", sandbox.StateRunning, 4, gib,
			ts("2026-09-11T23:03:42Z"), ts("2026-07-30T21:11:54Z"), map[string]string{}}},
		"container-ls-1.0.0.json": {{"flotilla-probe-test", "docker.io/library/alpine:latest", "192.168.64.2", sandbox.StateRunning, 4, gib,
			ts("2026-06-30T09:05:25Z"), ts("2026-06-30T09:05:20Z"), map[string]string{}}},
		"container-ls-1.2.0.json": {{"bushel-smoke", "docker.io/library/alpine:latest", "192.168.64.2", sandbox.StateRunning, 4, gib,
			ts("2026-08-20T08:07:27Z"), ts("2026-08-20T08:07:26Z"), map[string]string{}}},
		// stopped entries: empty networks, no startedDate
		"container-ls-1.4.1.json": {
			{"test1", "docker.io/library/alpine:latest", "", sandbox.StateStopped, 4, gib, time.Time{}, ts("2026-09-11T10:22:15Z"), map[string]string{}},
			{"web", "docker.io/library/nginx:alpine", "192.168.67.5", sandbox.StateRunning, 4, gib, ts("2026-09-11T23:03:40Z"), ts("2026-08-02T11:08:11Z"), map[string]string{}},
			{"buildkit", "ghcr.io/apple/container-builder-shim/builder:0.12.0", "", sandbox.StateStopped, 2, 2 * gib, time.Time{}, ts("2026-08-09T13:44:21Z"),
				map[string]string{"com.apple.container.plugin": "builder", "com.apple.container.resource.role": "builder"}},
		},
		"container-ls-1.5.0.json": {{"fx-ports", "docker.io/library/alpine:3.22", "192.168.65.3", sandbox.StateRunning, 4, gib,
			ts("2026-10-05T11:41:38Z"), ts("2026-10-05T10:39:56Z"), map[string]string{}}},
		"container-ls-mounts-1.2.0.json": {
			{"comicarr", "comicarr:latest", "192.168.64.5", sandbox.StateRunning, 4, gib, ts("2026-08-25T01:01:04Z"), ts("2026-08-25T01:01:03Z"), map[string]string{}},
			{"bushel-fixture", "comicarr:latest", "", sandbox.StateStopped, 4, gib, time.Time{}, ts("2026-08-25T01:07:21Z"), map[string]string{}},
		},
		// 0.x: status a string, networks and an Apple-epoch startedDate at
		// the top, unsorted keys, no creationDate
		"container-ls-0.12.3.json": {{"gantry-smoke", "docker.io/library/alpine:latest", "192.168.64.2", sandbox.StateRunning, 4, gib,
			ts("2026-06-06T14:48:34.597753Z"), time.Time{}, map[string]string{"com.example.role": "smoke"}}},
		// 0.x inspect of a missing id: [] with exit 0
		"container-inspect-0.12.3-missing.json": {},
	}
	for file, wants := range cases {
		got, err := ParseContainers(readTestdata(t, file))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if len(got) != len(wants) {
			t.Errorf("%s: %d containers, want %d", file, len(got), len(wants))
			continue
		}
		for i, w := range wants {
			c := got[i]
			if c.Name != w.name || c.ID != w.name || c.Image != w.image || c.IP != w.ip || c.State != w.state ||
				c.CPUs != w.cpus || c.Memory != w.memory || !reflect.DeepEqual(c.Labels, w.labels) {
				t.Errorf("%s[%d] = %+v\nwant %+v", file, i, c, w)
			}
			if d := c.Started.Sub(w.started); d > time.Millisecond || d < -time.Millisecond || !c.Created.Equal(w.created) {
				t.Errorf("%s[%d]: started %v created %v, want %v %v", file, i, c.Started, c.Created, w.started, w.created)
			}
		}
	}
}

func TestParseContainersOlderAndOddShapes(t *testing.T) {
	// ≤0.7: attachment with address/gateway instead of ipv4Address.
	old := `[{"status":"running","networks":[{"address":"192.168.64.3/24","gateway":"192.168.64.1","hostname":"my-web-server.test.","network":"default"}],
	  "configuration":{"id":"my-web-server","hostname":"my-web-server","networks":["default"],"resources":{"cpus":4,"memoryInBytes":1073741824}}}]`
	cs, err := ParseContainers([]byte(old))
	if err != nil || len(cs) != 1 || cs[0].Name != "my-web-server" || cs[0].IP != "192.168.64.3" || !cs[0].Running() {
		t.Fatalf("≤0.7 shape: %+v %v", cs, err)
	}
	// An older CLI whose JSON lacks most fields still yields a usable entry.
	cs, err = ParseContainers([]byte(`[{"configuration":{"id":"bare"},"status":"stopped"}]`))
	if err != nil || len(cs) != 1 || cs[0].Name != "bare" || cs[0].State != sandbox.StateStopped || cs[0].Labels == nil {
		t.Fatalf("sparse entry: %+v %v", cs, err)
	}
	// Unknown states and unknown fields are tolerated.
	cs, err = ParseContainers([]byte(`[{"id":"x","newField":{"a":[1,2]},"status":{"state":"hibernating","futureThing":true}}]`))
	if err != nil || cs[0].State != sandbox.StateUnknown {
		t.Fatalf("unknown state: %+v %v", cs, err)
	}
	// Truncated output (a CLI killed mid-print) and entries without an id fail cleanly.
	for _, bad := range [][]byte{readTestdata(t, "container-inspect-0.12-truncated.txt"), []byte(`[{"status":"running"}]`), []byte(`{}`), nil} {
		if _, err := ParseContainers(bad); err == nil {
			t.Errorf("ParseContainers(%.40q): want an error", bad)
		}
	}
}

func TestParseImages(t *testing.T) {
	cases := map[string][]Image{
		"image-ls-1.2.0.json": {{"docker.io/library/alpine:latest", "sha256:28bd5fe8b56d1bd048e5babf5b10710ebe0bae67db86916198a6eec434943f8b"}},
		"image-ls-1.4.1.json": {
			{"docker.io/library/alpine:latest", "sha256:28bd5fe8b56d1bd048e5babf5b10710ebe0bae67db86916198a6eec434943f8b"},
			{"docker.io/library/busybox:latest", "sha256:dc2d74b28e4cf8984fa52af1f39bc7c3d9c73760b41a74d629f5d11b1ab28616"},
		},
		"image-ls-0.12.3.json": {
			{"docker.io/library/alpine:latest", "sha256:5b10f432ef3da1b8d4c7eb6c487f2f5a8f096bc91145e68878dd4a5019afde11"},
			{"docker.io/library/alpine:3.19", "sha256:6baf43584bcb78f2e5847d1de515f23499913ac9f12bdf834811a3145eb11ca1"},
		},
		"image-inspect-1.4.1.json": nil, // checked below: same shape as the list
	}
	for file, want := range cases {
		got, err := ParseImages(readTestdata(t, file))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if want == nil {
			if len(got) != 1 || got[0].Reference != "docker.io/library/alpine:3.22" {
				t.Errorf("%s: %+v", file, got)
			}
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", file, got, want)
		}
	}
}

func TestParseStats(t *testing.T) {
	for file, want := range map[string]ContainerStats{
		"stats-1.0.0.json":  {"flotilla-probe-test", 2002944, 1073741824, 3697, 24628, 602, 1744896, 0, 1},
		"stats-1.2.0.json":  {"bushel-smoke", 5238784, 1073741824, 18093, 29236, 602, 4243456, 0, 2},
		"stats-0.12.3.json": {"gantry-smoke", 7499776, 1073741824, 4238, 40960, 602, 7139328, 0, 1},
	} {
		got, err := ParseStats(readTestdata(t, file))
		if err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("%s: %+v %v", file, got, err)
		}
	}
	got, err := ParseStats(readTestdata(t, "stats-1.4.1.json"))
	if err != nil || len(got) != 5 || got[0].ID != "busy" || got[0].CPUUsageUsec != 205422601 || got[4].NumProcesses != 7 {
		t.Errorf("stats-1.4.1.json: %+v %v", got, err)
	}
	// Fields are optional since 0.9.
	got, err = ParseStats([]byte(`[{"id":"a"}]`))
	if err != nil || got[0] != (ContainerStats{ID: "a"}) {
		t.Errorf("sparse stats: %+v %v", got, err)
	}
}

func TestParseSystemStatus(t *testing.T) {
	for file, want := range map[string]SystemStatus{
		// flat, before 1.4
		"system-status-1.0.0.json": {"running", "container-apiserver version 1.0.0 (build: release, commit: ee848e3)",
			"/Users/user/Library/Application Support/com.apple.container/"},
		"system-status-1.2.0.json": {"running", "container-apiserver version 1.2.0 (build: release, commit: 6e65319)",
			"/Users/f/Library/Application Support/com.apple.container/"},
		"system-status-1.2.2-homebrew.json": {"running", "container-apiserver version 1.2.2 (build: release, commit: unspeci)",
			"/Users/test/Library/Application Support/com.apple.container/"},
		// nested, from 1.4
		"system-status-1.4.1.json": {"running", "1.4.1", "/Users/example/Library/Application Support/com.apple.container/"},
		"system-status-1.4.1-skew.json": {"running", "container-apiserver version 1.0.0 (build: release, commit: ee848e3)",
			"/Users/example/Library/Application Support/com.apple.container/"},
		"system-status-1.5.0.json": {"running", "1.5.0", "/Users/example/Library/Application Support/com.apple.container/"},
		// down: every field empty (1.0–1.3)
		"system-status-down-1.3.1.json": {"unregistered", "", ""},
	} {
		got, err := ParseSystemStatus(readTestdata(t, file))
		if err != nil || got != want {
			t.Errorf("%s: %+v %v\nwant %+v", file, got, err, want)
		}
		if got.Running() != (want.Status == "running") {
			t.Errorf("%s: Running() = %v", file, got.Running())
		}
	}
	// 1.4+ down: only the status.
	got, err := ParseSystemStatus([]byte(`{"status":"not running"}`))
	if err != nil || got.Running() || got.Status != "not running" {
		t.Errorf("minimal down: %+v %v", got, err)
	}
	if _, err := ParseSystemStatus(readTestdata(t, "system-status-down.txt")); err == nil {
		t.Error("the text form is not JSON: want an error")
	}
}

func TestParseVolumes(t *testing.T) {
	got, err := ParseVolumes(readTestdata(t, "volume-ls-1.2.0.json"))
	if err != nil || len(got) != 1 || got[0].Name != "bushel-smoke-vol" || got[0].Size != 549755813888 ||
		!got[0].Created.Equal(ts("2026-08-20T08:07:27Z")) || !strings.HasSuffix(got[0].Source, "/bushel-smoke-vol/volume.img") {
		t.Errorf("volume-ls-1.2.0: %+v %v", got, err)
	}
	got, err = ParseVolumes(readTestdata(t, "volume-ls-1.4.1.json"))
	if err != nil || len(got) != 3 || got[2].Name != "probe-shortform" || got[2].Size != 64<<20 {
		t.Errorf("volume-ls-1.4.1: %+v %v", got, err)
	}
	got, err = ParseVolumes(readTestdata(t, "volume-inspect-1.0.0.json"))
	if err != nil || len(got) != 1 || got[0].Name != "probe-shortform" {
		t.Errorf("volume-inspect-1.0.0: %+v %v", got, err)
	}
	// 0.x: flat, createdAt in Apple-epoch seconds
	got, err = ParseVolumes(readTestdata(t, "volume-ls-0.12.3.json"))
	if err != nil || len(got) != 1 || got[0].Name != "gantry-test-vol" || got[0].Labels["a"] != "b" ||
		got[0].Created.Year() != 2026 {
		t.Errorf("volume-ls-0.12.3: %+v %v", got, err)
	}
}

func TestVersionFiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/version-*.txt")
	if len(files) < 10 {
		t.Fatalf("only %d version files", len(files))
	}
	for _, f := range files {
		want := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "version-"), ".txt")
		want, _, _ = strings.Cut(want, "-")
		b, _ := os.ReadFile(f)
		v, err := ParseVersion(string(b))
		if err != nil || v.String() != want {
			t.Errorf("%s: %v %v, want %s", f, v, err, want)
		}
	}
}

// TestClassifyCapturedErrors maps every captured stderr text to the error
// a caller tests for.
func TestClassifyCapturedErrors(t *testing.T) {
	want := map[string]error{
		"build-no-directives-0.5.0":             nil,
		"build-unknown-tag-0.12":                sandbox.ErrNotFound,
		"delete-missing-0.1-0.9":                sandbox.ErrNotFound,
		"delete-missing-0.10":                   sandbox.ErrNotFound,
		"delete-missing-1.x":                    sandbox.ErrNotFound,
		"delete-missing-multi-0.11-debug":       sandbox.ErrNotFound,
		"delete-running-0.10":                   nil,
		"delete-running-1.2.0":                  nil,
		"exec-double-dash-1.0.0":                nil,
		"exec-missing-pre-0.10":                 sandbox.ErrNotFound,
		"exec-stopped-1.x":                      sandbox.ErrNotRunning,
		"exec-stopped-pre-0.10":                 sandbox.ErrNotRunning,
		"export-running-1.0.0":                  nil,
		"image-inspect-missing-0.12.3":          sandbox.ErrNotFound,
		"image-inspect-missing-1.2.0":           sandbox.ErrNotFound,
		"inspect-missing-1.2.0":                 sandbox.ErrNotFound,
		"kill-missing-1.2.0":                    sandbox.ErrNotFound,
		"kill-missing-multi-0.11-debug":         sandbox.ErrNotFound,
		"logs-missing-1.2.0":                    sandbox.ErrNotFound,
		"push-unauthorized-1.x":                 sandbox.ErrNotFound,
		"run-duplicate-name-1.x":                sandbox.ErrAlreadyExists,
		"run-duplicate-name-pre-0.10":           sandbox.ErrAlreadyExists,
		"run-unknown-image-0.1.0":               sandbox.ErrNotFound,
		"service-down-0.1.0":                    sandbox.ErrEngineNotStarted,
		"service-down-ls-0.6":                   sandbox.ErrEngineNotStarted,
		"service-down-ls-1.2.0":                 sandbox.ErrEngineNotStarted,
		"start-missing-1.2.0":                   sandbox.ErrNotFound,
		"stats-missing-1.x":                     sandbox.ErrNotFound,
		"stop-missing-1.3.1":                    sandbox.ErrNotFound,
		"stop-missing-multi-0.11-debug":         sandbox.ErrNotFound,
		"system-start-fail-1.x":                 sandbox.ErrEngineNotStarted,
		"unknown-flag-1.3.1":                    nil,
		"unknown-subcommand-service-down-1.2.0": sandbox.ErrEngineNotStarted,
		"unknown-tag-0.6-0.7":                   sandbox.ErrNotFound,
		"volume-inspect-missing-0.12.3":         sandbox.ErrNotFound,
		"volume-inspect-missing-1.2.0":          sandbox.ErrNotFound,
		// Deletes of missing volumes must read as not found (destroy of a
		// sandbox whose workspace is gone); an image delete says the same
		// for a missing image and a failed one, so it is no kind at all.
		"volume-delete-missing-pre-0.10": sandbox.ErrNotFound,
		"volume-delete-missing-0.10-1.x": sandbox.ErrNotFound,
		"volume-delete-in-use-pre-0.10":  sandbox.ErrInUse,
		"volume-delete-in-use-0.10-1.x":  sandbox.ErrInUse,
		"image-delete-missing-pre-0.10":  nil,
		"image-delete-missing-0.10-1.x":  nil,
	}
	files, _ := filepath.Glob("testdata/stderr-*.txt")
	if len(files) != len(want) {
		t.Errorf("%d stderr files, %d expectations: keep them in step", len(files), len(want))
	}
	for _, f := range files {
		key := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "stderr-"), ".txt")
		w, ok := want[key]
		if !ok {
			t.Errorf("%s: no expectation", f)
			continue
		}
		b, _ := os.ReadFile(f)
		code := 1
		if strings.Contains(key, "unknown-flag") || strings.Contains(key, "unknown-subcommand") {
			code = 64
		}
		kind, hint := Classify(code, string(b))
		if !errors.Is(kind, w) || (w == nil && kind != nil) {
			t.Errorf("%s: %v, want %v", key, kind, w)
		}
		if w == sandbox.ErrEngineNotStarted && !strings.Contains(hint, StartHint) {
			t.Errorf("%s: hint %q lacks %q", key, hint, StartHint)
		}
	}
}

func TestMajorOf(t *testing.T) {
	for in, want := range map[string]int{"15.6.1\n": 15, "26.0": 26, "26": 26, "": 0, "x.1": 0} {
		if got := majorOf(in); got != want {
			t.Errorf("majorOf(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestParseVolumeMounts(t *testing.T) {
	for file, want := range map[string]map[string][]string{
		"container-ls-mounts-1.2.0.json": {"bushel-fixture": {"bushel-fixture-vol"}},
		"container-ls-1.5.0.json":        {"fx-ports": {"fx-vol"}},
		"container-ls-0.12.3.json":       {},
	} {
		got, err := ParseVolumeMounts(readTestdata(t, file))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v %v, want %v", file, got, err, want)
		}
	}
}
