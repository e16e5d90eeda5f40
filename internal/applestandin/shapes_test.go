package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/applecli"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// withMac makes the stand-in report like the Macs of the captures.
func withMac(t *testing.T) {
	t.Helper()
	old := hostArch
	hostArch = "arm64"
	t.Cleanup(func() { hostArch = old })
	t.Setenv("HOME", "/Users/example")
}

// busy is the podman side of the container captured in samples §1.7.
func busy(t *testing.T) *podContainer {
	c := &podContainer{Name: "busy", Path: "sh",
		Args:        []string{"-c", "while true; do i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; done"},
		ImageDigest: "sha256:28bd5fe8b56d1bd048e5babf5b10710ebe0bae67db86916198a6eec434943f8b",
		ImageName:   "docker.io/library/alpine:latest",
		Created:     mustTime(t, "2026-07-30T21:11:54.123Z"),
	}
	c.State.Status, c.State.Running = "running", true
	c.State.StartedAt = mustTime(t, "2026-09-11T23:03:42.5Z")
	c.Config.WorkingDir = "/"
	c.Config.Labels = map[string]string{
		labelRef: "docker.io/library/alpine:latest",
		labelEnv: `["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]`,
	}
	c.HostConfig.Memory = 1 << 30
	c.NetworkSettings.Networks = map[string]podNetwork{"podman": {
		IPAddress: "192.168.67.7", IPPrefixLen: 24, Gateway: "192.168.67.1", MacAddress: "f2:59:6c:5a:fb:c6",
		GlobalIPv6Address: "fdac:60fc:e4eb:986e:f059:6cff:fe5a:fbc6", GlobalIPv6PrefixLen: 64,
	}}
	return c
}

// TestContainerInspect141 renders a podman container as 1.4.1 `inspect`
// and compares it with the capture (samples §1.7). The only expected
// difference is the reconstructed index descriptor size.
func TestContainerInspect141(t *testing.T) {
	withMac(t)
	a := &app{v: MustVersion("1.4.1")}
	got := string(encodingFor(a.v).Pretty([]any{a.containerJSON(view(busy(t)))}))
	want := strings.Replace(readTestdata(t, "container-inspect-1.4.1.json"), `"size" : 9218`, `"size" : 375`, 1)
	if got != want {
		t.Errorf("differs from capture\n%s", firstDiff(got, want))
	}
}

// TestContainerList0123 renders the 0.12.3 shape (samples §1.9): status a
// string, top-level networks, Apple-epoch startedDate, unsorted keys.
func TestContainerList0123(t *testing.T) {
	withMac(t)
	c := &podContainer{Name: "gantry-smoke", Path: "sleep", Args: []string{"600"},
		ImageDigest: "sha256:5b10f432ef3da1b8d4c7eb6c487f2f5a8f096bc91145e68878dd4a5019afde11",
		ImageName:   "docker.io/library/alpine:latest"}
	c.State.Status, c.State.Running = "running", true
	c.State.StartedAt = appleEpoch.Add(802450114597753 * time.Microsecond)
	c.Config.WorkingDir = "/"
	c.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "container=podman"}
	c.Config.Labels = map[string]string{"com.example.role": "smoke", labelCPUs: "4"}
	c.HostConfig.Memory = 1 << 30
	c.HostConfig.PortBindings = map[string][]struct{ HostIp, HostPort string }{"80/tcp": {{"127.0.0.1", "8088"}}}
	c.NetworkSettings.Networks = map[string]podNetwork{"podman": {
		IPAddress: "192.168.64.2", IPPrefixLen: 24, Gateway: "192.168.64.1", MacAddress: "f2:29:10:2d:aa:f5",
		GlobalIPv6Address: "fdd8:3480:c3b9:586f:f029:10ff:fe2d:aaf5", GlobalIPv6PrefixLen: 64,
	}}
	a := &app{v: MustVersion("0.12.3")}
	// The capture lost its slash escapes (Swift literal), so compare unescaped.
	got := string(Encoding{}.Compact([]any{a.containerJSON(view(c))}))
	want := strings.Replace(readTestdata(t, "container-ls-0.12.3.json"), `"size":9218`, `"size":375`, 1)
	if got != want {
		t.Errorf("differs from capture\n%s", firstDiff(got, want))
	}
}

// TestStoppedContainerStatus: a stopped container has no networks, and
// keeps the startedDate of its last boot until the apiserver restarts
// (ContainersService.swift: a stop resets status and networks only;
// samples §1.5 after `container stop` on 1.2.0); one never started has
// none (samples §1.6).
func TestStoppedContainerStatus(t *testing.T) {
	c := busy(t)
	c.State.Status, c.State.Running = "exited", false
	a := &app{v: MustVersion("1.5.0")}
	got := string(encodingFor(a.v).Compact(a.containerJSON(view(c))))
	if !strings.Contains(got, `"status":{"networks":[],"startedDate":"2026-09-11T23:03:42Z","state":"stopped"}`) {
		t.Errorf("stopped after a run: %s", got)
	}
	never := busy(t)
	never.State.Status, never.State.Running, never.State.StartedAt = "created", false, time.Time{}
	got = string(encodingFor(a.v).Compact(a.containerJSON(view(never))))
	if !strings.Contains(got, `"status":{"networks":[],"state":"stopped"}`) {
		t.Errorf("never started: %s", got)
	}
	a.home = t.TempDir()
	if err := os.WriteFile(filepath.Join(a.home, startedMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got = string(encodingFor(a.v).Compact(a.containerJSON(view(c))))
	if !strings.Contains(got, `"status":{"networks":[],"state":"stopped"}`) {
		t.Errorf("stopped before the apiserver restarted: %s", got)
	}
	a = &app{v: MustVersion("0.9.0")}
	got = string(encodingFor(a.v).Compact(a.containerJSON(view(never))))
	if !strings.HasPrefix(got, `{"networks":[],"status":"stopped","configuration":`) {
		t.Errorf("0.x stopped: %s", got)
	}
	if strings.Contains(got, "useInit") || strings.Contains(got, "capAdd") || strings.Contains(got, "cpuOverhead") || strings.Contains(got, "mtu") {
		t.Errorf("0.9.0 has no useInit/capAdd/cpuOverhead/mtu: %s", got)
	}
}

func TestPrivateLabelsHidden(t *testing.T) {
	c := busy(t)
	c.Config.Labels["team"] = "x"
	a := &app{v: MustVersion("1.5.0")}
	got := string(encodingFor(a.v).Compact(a.containerJSON(view(c))))
	if strings.Contains(got, labelPrefix) || !strings.Contains(got, `"labels":{"team":"x"}`) {
		t.Errorf("labels: %s", got)
	}
}

// TestVolumeInspect renders a podman volume as 1.0.0 and 1.4.1 `volume
// inspect` and compares byte for byte with samples §5.2.
func TestVolumeInspect(t *testing.T) {
	withMac(t)
	v := podVolume{Name: "probe-shortform", CreatedAt: mustTime(t, "2026-07-30T23:18:48.77Z"),
		Labels: map[string]string{labelVolSize: "67108864", labelVolOpts: `{"size":"64M"}`}}
	for _, c := range []struct{ version, file string }{
		{"1.0.0", "volume-inspect-1.0.0.json"},
		{"1.4.1", "volume-inspect-1.4.1.json"},
	} {
		a := &app{v: MustVersion(c.version)}
		got := string(encodingFor(a.v).Pretty([]any{a.volumeJSON(v)}))
		if want := readTestdata(t, c.file); got != want {
			t.Errorf("%s differs\n%s", c.version, firstDiff(got, want))
		}
	}
}

// TestListTable reproduces the reconstructed 1.4.1 table of samples §7.1.
func TestListTable(t *testing.T) {
	withMac(t)
	mk := func(name, ref, state string, cpus string, mem int64) *podContainer {
		c := &podContainer{Name: name}
		c.State.Status = state
		c.State.Running = state == "running"
		c.Config.Labels = map[string]string{labelRef: ref, labelCPUs: cpus}
		c.HostConfig.Memory = mem
		return c
	}
	web := mk("web", "docker.io/library/nginx:alpine", "running", "4", 1<<30)
	web.State.StartedAt = mustTime(t, "2026-09-11T23:03:40Z")
	web.NetworkSettings.Networks = map[string]podNetwork{"podman": {IPAddress: "192.168.67.5", IPPrefixLen: 24}}
	a := &app{v: MustVersion("1.4.1")}
	rows := [][]string{a.listHeader()}
	for _, c := range []*podContainer{
		mk("test1", "docker.io/library/alpine:latest", "exited", "4", 1<<30),
		web,
		mk("buildkit", "ghcr.io/apple/container-builder-shim/builder:0.12.0", "exited", "2", 2<<30),
	} {
		rows = append(rows, a.listRow(view(c)))
	}
	if got, want := renderTable(rows), readTestdata(t, "table-ls-1.4.1.txt"); got != want {
		t.Errorf("table differs\n%s", firstDiff(got, want))
	}
	a.v = MustVersion("0.12.3")
	if h := strings.Join(a.listHeader(), " "); !strings.Contains(h, "ADDR") {
		t.Errorf("0.12 header: %s", h)
	}
}

func TestStatusShapes(t *testing.T) {
	a := &app{v: MustVersion("1.2.0")}
	got := string(encodingFor(a.v).Compact(a.statusJSON("unregistered")))
	want := `{"apiServerAppName":"","apiServerBuild":"","apiServerCommit":"","apiServerVersion":"","appRoot":"","installRoot":"","status":"unregistered"}`
	if got != want {
		t.Errorf("1.2 down: %s", got)
	}
	a.v = MustVersion("1.5.0")
	if got := string(encodingFor(a.v).Compact(a.statusJSON("unregistered"))); got != `{"status":"unregistered"}` {
		t.Errorf("1.5 down: %s", got)
	}
	a.v = MustVersion("1.0.0")
	got = string(encodingFor(a.v).Compact(a.statusJSON("")))
	if !strings.Contains(got, `"apiServerVersion":"container-apiserver version 1.0.0 (build: release, commit: 0000000)"`) ||
		!strings.Contains(got, `"installRoot":"\/usr\/local\/"`) {
		t.Errorf("1.0 running: %s", got)
	}
}

func TestRefs(t *testing.T) {
	for in, want := range map[string]string{
		"mcp-dev":                          "docker.io/library/mcp-dev:latest",
		"mcp-dev:1":                        "docker.io/library/mcp-dev:1",
		"docker.io/library/mcp-dev:latest": "docker.io/library/mcp-dev:latest",
		"me/app":                           "docker.io/me/app:latest",
		"ghcr.io/a/b:2":                    "ghcr.io/a/b:2",
		"localhost:5000/x":                 "localhost:5000/x:latest",
		"alpine@sha256:abc":                "docker.io/library/alpine@sha256:abc",
	} {
		if got := normalizeRef(in); got != want {
			t.Errorf("normalizeRef(%q) = %q, want %q", in, got, want)
		}
	}
	if got := podmanCandidates("docker.io/library/mcp-dev:latest"); got[0] != "localhost/mcp-dev:latest" || got[1] != "docker.io/library/mcp-dev:latest" {
		t.Errorf("candidates: %v", got)
	}
	if got := appleFromPodman("localhost/mcp-dev:latest"); got != "docker.io/library/mcp-dev:latest" {
		t.Errorf("appleFromPodman: %s", got)
	}
	if got := displayRef("docker.io/library/alpine:latest"); got != "alpine:latest" {
		t.Errorf("displayRef: %s", got)
	}
	if n, tag := refNameTag("quay.io/podman/hello"); n != "quay.io/podman/hello" || tag != "<none>" {
		t.Errorf("refNameTag: %s %s", n, tag)
	}
}

// TestContainerFieldsByRelease checks the fields each release's
// ContainerConfiguration, AttachmentConfiguration and Attachment have
// (Sources/ContainerResource at each tag), rendered from one container.
func TestContainerFieldsByRelease(t *testing.T) {
	c := busy(t)
	c.Config.Labels[labelStopSignal] = "SIGQUIT"
	c.Config.Labels[labelShmSize] = "67108864"
	cases := []struct {
		version   string
		has, lack []string
	}{
		// 0.8.0/0.9.0: no useInit, mtu, capAdd, stopSignal, variant.
		{"0.9.0", []string{`"hostname":"busy"}`}, []string{"useInit", "mtu", "capAdd", "stopSignal", "shmSize", "variant", "creationDate"}},
		// 0.10.0: useInit (ContainerConfiguration.swift@0.10.0).
		{"0.10.0", []string{`"useInit":false`}, []string{"mtu", "capAdd"}},
		// 0.11.0: mtu in the options and the attachment (Attachment.swift@0.11.0).
		{"0.11.0", []string{`"options":{"hostname":"busy","mtu":1280}`, `{"mtu":1280,"ipv4Gateway"`}, []string{"capAdd", "variant"}},
		// 0.12.0: capAdd and capDrop.
		{"0.12.3", []string{`"capAdd":[]`, `"capDrop":[]`}, []string{"stopSignal", "shmSize", "cpuOverhead"}},
		// 1.0.0: stopSignal, shmSize, creationDate, cpuOverhead; no variant (samples §1.1).
		{"1.0.0", []string{`"stopSignal":"SIGQUIT"`, `"shmSize":67108864`, `"cpuOverhead":1`, `"creationDate":"2026-07-30T21:11:54Z"`}, []string{"variant"}},
		// 1.1.0: the attachment's variant (Attachment.swift@1.1.0).
		{"1.1.0", []string{`"network":"default","variant":"reserved"}`}, nil},
	}
	for _, tc := range cases {
		a := &app{v: MustVersion(tc.version)}
		got := string(Encoding{Sorted: oneX(a.v)}.Compact(a.containerJSON(view(c))))
		for _, h := range tc.has {
			if !strings.Contains(got, h) {
				t.Errorf("%s lacks %s: %s", tc.version, h, got)
			}
		}
		for _, l := range tc.lack {
			if strings.Contains(got, `"`+l+`"`) {
				t.Errorf("%s has %s: %s", tc.version, l, got)
			}
		}
	}
}

// TestProcessUser follows Parser.user and Parser.process
// (Services/ContainerAPIService/Client/Parser.swift, 0.8.0–1.2.2).
func TestProcessUser(t *testing.T) {
	for _, tc := range []struct {
		argv       []string
		imageUser  string
		user       string
		groups     []int
		podmanUser string
	}{
		{nil, "", `{"id":{"gid":0,"uid":0}}`, nil, ""},
		{nil, "nginx", `{"raw":{"userString":"nginx"}}`, nil, ""},
		// -u is raw whatever it holds.
		{[]string{"-u", "1000:1000"}, "", `{"raw":{"userString":"1000:1000"}}`, nil, "1000:1000"},
		{[]string{"--uid", "7", "--gid", "8"}, "nginx", `{"id":{"gid":8,"uid":7}}`, nil, "7:8"},
		{[]string{"--uid", "7"}, "", `{"raw":{"userString":"7"}}`, nil, "7"},
		// --gid alone: the default user with a supplemental group.
		{[]string{"--gid", "8"}, "nginx", `{"raw":{"userString":"nginx"}}`, []int{8}, ""},
	} {
		argv := append(append([]string{"create"}, tc.argv...), "alpine")
		p, err := applecli.Parse(MustVersion("1.2.2"), argv)
		if err != nil {
			t.Fatalf("%v: %v", argv, err)
		}
		u, g, pu := appleUser(p, tc.imageUser)
		if got := string(Encoding{Sorted: true}.Compact(u)); got != tc.user || pu != tc.podmanUser || fmt.Sprint(g) != fmt.Sprint(tc.groups) {
			t.Errorf("%v image user %q: %s %v %q, want %s %v %q", tc.argv, tc.imageUser, got, g, pu, tc.user, tc.groups, tc.podmanUser)
		}
	}
}

// TestMountOrder: tmpfs first, then -v, then --mount, with the options as
// given (Utility.containerConfigFromFlags, Parser.volume/mount, 1.2.2).
func TestMountOrder(t *testing.T) {
	c := busy(t)
	c.Mounts = append(c.Mounts,
		podMount{Type: "bind", Source: "/src", Destination: "/a", RW: false},
		podMount{Type: "volume", Name: "data", Destination: "/b", RW: true})
	c.HostConfig.Tmpfs = map[string]string{"/run": ""}
	c.Config.Labels[labelMounts] = `[{"d":"/run","o":[]},{"d":"/b","o":["rw"]},{"d":"/a","o":["ro","z"]}]`
	withMac(t)
	a := &app{v: MustVersion("1.5.0")}
	got := string(encodingFor(a.v).Compact(a.mountsJSON(c)))
	want := `[{"destination":"/run","options":[],"source":"","type":{"tmpfs":{}}},` +
		`{"destination":"/b","options":["rw"],"source":"/Users/example/Library/Application Support/com.apple.container/volumes/data/volume.img","type":{"volume":{"cache":{"on":{}},"format":"ext4","name":"data","sync":{"fsync":{}}}}},` +
		`{"destination":"/a","options":["ro","z"],"source":"/src","type":{"virtiofs":{}}}]`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestCapabilities: capAdd and capDrop as Parser.capabilities records
// them (1.2.2), not as podman expands them.
func TestCapabilities(t *testing.T) {
	if got := fmt.Sprint(appleCaps([]string{"net_admin", "CAP_SYS_TIME", "all"})); got != "[CAP_NET_ADMIN CAP_SYS_TIME ALL]" {
		t.Errorf("appleCaps: %s", got)
	}
	c := busy(t)
	c.HostConfig.CapAdd = []string{"CAP_AUDIT_CONTROL", "CAP_AUDIT_READ"} // podman's expansion of ALL
	c.Config.Labels[labelCaps] = `{"add":["ALL"],"drop":["CAP_NET_RAW"]}`
	a := &app{v: MustVersion("1.4.1")}
	got := string(encodingFor(a.v).Compact(a.containerJSON(view(c))))
	if !strings.Contains(got, `"capAdd":["ALL"],"capDrop":["CAP_NET_RAW"]`) {
		t.Errorf("caps: %s", got)
	}
}
