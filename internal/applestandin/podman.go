package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"time"
)

// engine runs the backend CLI (podman) with argv only, never through a shell.
type engine struct {
	bin string
}

// result is a finished backend invocation.
type result struct {
	stdout, stderr []byte
	code           int
}

// ok reports a zero exit status.
func (r result) ok() bool { return r.code == 0 }

// message is the backend's error text without its "Error: " prefix (the
// last line that has that prefix, else the last non-empty stderr line), or
// a generic text.
func (r result) message() string {
	lines := strings.Split(strings.TrimSpace(string(r.stderr)), "\n")
	last := ""
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "Error: ") {
			// podman's own error line, not the usage hint that may follow it.
			return strings.TrimPrefix(l, "Error: ")
		}
		if last == "" {
			last = l
		}
	}
	if last != "" {
		return last
	}
	return "exit status " + itoa(r.code)
}

// contains reports whether stderr mentions s (case-insensitive).
func (r result) contains(s string) bool {
	return strings.Contains(strings.ToLower(string(r.stderr)), strings.ToLower(s))
}

// command builds an exec.Cmd for the backend.
func (e *engine) command(args ...string) *exec.Cmd {
	return exec.Command(e.bin, args...)
}

// run executes the backend and captures its output.
func (e *engine) run(args ...string) result {
	cmd := e.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	err := cmd.Run()
	return result{out.Bytes(), errb.Bytes(), exitStatus(err)}
}

// exitStatus maps a Wait error to an exit code (127 when it did not start).
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ee.ExitCode() >= 0 {
			return ee.ExitCode()
		}
		return 128 + 9 // killed by a signal
	}
	return 127
}

// podContainer is the part of `podman container inspect` used here.
type podContainer struct {
	ID      string    `json:"Id"`
	Name    string    `json:"Name"`
	Created time.Time `json:"Created"`
	Path    string    `json:"Path"`
	Args    []string  `json:"Args"`
	State   struct {
		Status    string    `json:"Status"`
		Running   bool      `json:"Running"`
		StartedAt time.Time `json:"StartedAt"`
	} `json:"State"`
	Image           string     `json:"Image"`
	ImageDigest     string     `json:"ImageDigest"`
	ImageName       string     `json:"ImageName"`
	Mounts          []podMount `json:"Mounts"`
	NetworkSettings struct {
		podNetwork
		Networks map[string]podNetwork `json:"Networks"`
	} `json:"NetworkSettings"`
	Config struct {
		User       string            `json:"User"`
		Env        []string          `json:"Env"`
		Cmd        []string          `json:"Cmd"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
		Tty        bool              `json:"Tty"`
	} `json:"Config"`
	HostConfig struct {
		NanoCpus       int64                                          `json:"NanoCpus"`
		Memory         int64                                          `json:"Memory"`
		PortBindings   map[string][]struct{ HostIp, HostPort string } `json:"PortBindings"`
		Tmpfs          map[string]string                              `json:"Tmpfs"`
		NetworkMode    string                                         `json:"NetworkMode"`
		ReadonlyRootfs bool                                           `json:"ReadonlyRootfs"`
		CapAdd         []string                                       `json:"CapAdd"`
		CapDrop        []string                                       `json:"CapDrop"`
		Init           bool                                           `json:"Init"`
		DNS            []string                                       `json:"Dns"`
		DNSSearch      []string                                       `json:"DnsSearch"`
		DNSOptions     []string                                       `json:"DnsOptions"`
	} `json:"HostConfig"`
}

// podMount is one mount in podman's inspect output.
type podMount struct {
	Type        string   `json:"Type"`
	Name        string   `json:"Name"`
	Source      string   `json:"Source"`
	Destination string   `json:"Destination"`
	RW          bool     `json:"RW"`
	Options     []string `json:"Options"`
}

// podNetwork is one network attachment in podman's inspect output.
type podNetwork struct {
	IPAddress           string `json:"IPAddress"`
	IPPrefixLen         int    `json:"IPPrefixLen"`
	Gateway             string `json:"Gateway"`
	MacAddress          string `json:"MacAddress"`
	GlobalIPv6Address   string `json:"GlobalIPv6Address"`
	GlobalIPv6PrefixLen int    `json:"GlobalIPv6PrefixLen"`
}

// inspectContainers inspects ids and returns those found, matched by exact
// name (Apple ids are names). Containers that vanish meanwhile are missing.
func (e *engine) inspectContainers(ids ...string) ([]podContainer, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	r := e.run(append([]string{"container", "inspect"}, ids...)...)
	if !r.ok() && r.contains("container not known") && len(ids) > 1 {
		// podman lists a container it is still removing, then fails the
		// whole inspect on it; Apple's list never shows such a one.
		var all []podContainer
		for _, id := range ids {
			cs, err := e.inspectContainers(id)
			if err != nil {
				return nil, err
			}
			all = append(all, cs...)
		}
		return all, nil
	}
	var all []podContainer
	if out := bytes.TrimSpace(r.stdout); len(out) > 0 {
		if err := json.Unmarshal(out, &all); err != nil {
			return nil, err
		}
	} else if !r.ok() && !r.contains("no such container") && !r.contains("no such object") && !r.contains("container not known") {
		return nil, failPlain(r.message())
	}
	return all, nil
}

// inspectOne returns the container named id, or nil when it does not exist.
func (e *engine) inspectOne(id string) (*podContainer, error) {
	cs, err := e.inspectContainers(id)
	if err != nil {
		return nil, err
	}
	for i := range cs {
		if cs[i].Name == id || cs[i].ID == id {
			return &cs[i], nil
		}
	}
	return nil, nil
}

// listContainers inspects every container (running only unless all),
// tolerating containers removed between the two backend calls.
func (e *engine) listContainers(all bool) ([]podContainer, error) {
	args := []string{"ps", "-q", "--no-trunc"}
	if all {
		args = append(args, "-a")
	}
	// Like `volume ls`, podman's ps can fail on a container another
	// client removes while it lists: list again.
	var r result
	for try := 0; try < 10; try++ {
		if try > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		if r = e.run(args...); r.ok() || !(r.contains("no such container") || r.contains("container not known")) {
			break
		}
	}
	if !r.ok() {
		return nil, failPlain(r.message())
	}
	ids := strings.Fields(string(r.stdout))
	cs, err := e.inspectContainers(ids...)
	if err != nil {
		return nil, err
	}
	out := cs[:0]
	for _, c := range cs {
		if all || c.State.Running {
			out = append(out, c)
		}
	}
	return out, nil
}

// podImage is the part of `podman image inspect` used here.
type podImage struct {
	ID           string          `json:"Id"`
	Digest       string          `json:"Digest"`
	RepoTags     []string        `json:"RepoTags"`
	Created      time.Time       `json:"Created"`
	Config       json.RawMessage `json:"Config"`
	Architecture string          `json:"Architecture"`
	Variant      string          `json:"Variant"`
	Os           string          `json:"Os"`
	Author       string          `json:"Author"`
	Size         int64           `json:"Size"`
	RootFS       struct {
		Type   string   `json:"Type"`
		Layers []string `json:"Layers"`
	} `json:"RootFS"`
	History      json.RawMessage `json:"History"`
	ManifestType string          `json:"ManifestType"`
}

// imageConfig is the runtime part of an image config.
type imageConfig struct {
	Env        []string `json:"Env"`
	Cmd        []string `json:"Cmd"`
	Entrypoint []string `json:"Entrypoint"`
	WorkingDir string   `json:"WorkingDir"`
	User       string   `json:"User"`
	StopSignal string   `json:"StopSignal"`
}

func (im *podImage) config() imageConfig {
	var c imageConfig
	_ = json.Unmarshal(im.Config, &c)
	return c
}

// inspectImages inspects refs and returns the images found (missing refs
// are skipped; podman still prints the others).
func (e *engine) inspectImages(refs ...string) ([]podImage, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	r := e.run(append([]string{"image", "inspect"}, refs...)...)
	var out []podImage
	if b := bytes.TrimSpace(r.stdout); len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, err
		}
	} else if !r.ok() && !r.contains("image not known") && !r.contains("no such") {
		return nil, failPlain(r.message())
	}
	return out, nil
}

// podVolume is the part of `podman volume inspect` used here.
type podVolume struct {
	Name       string            `json:"Name"`
	Driver     string            `json:"Driver"`
	Mountpoint string            `json:"Mountpoint"`
	CreatedAt  time.Time         `json:"CreatedAt"`
	Labels     map[string]string `json:"Labels"`
	Options    map[string]string `json:"Options"`
}

// inspectVolumes returns the named volumes that exist. podman looks every
// name up before it reads any of them, and fails the whole inspect,
// printing none, when one is removed between the two; a name it cannot
// find at the lookup it only reports. So an inspect of several names that
// prints nothing is taken again a name at a time: each then either prints
// its volume or says it has none, and the volumes that stay are never
// reported missing.
func (e *engine) inspectVolumes(names ...string) ([]podVolume, error) {
	if len(names) == 0 {
		return nil, nil
	}
	r := e.run(append([]string{"volume", "inspect"}, names...)...)
	var out []podVolume
	if b := bytes.TrimSpace(r.stdout); len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, err
		}
	} else if !r.ok() && !r.contains("no such volume") && !r.contains("no volume with name") {
		return nil, failPlain(r.message())
	} else if !r.ok() && len(names) > 1 {
		for _, n := range names {
			one, err := e.inspectVolumes(n)
			if err != nil {
				return nil, err
			}
			out = append(out, one...)
		}
	}
	return out, nil
}

// listVolumes inspects every volume. podman's `volume ls` fails ("no
// volume with name … found in database") when another client removes a
// volume while it lists: the listing is taken again. Apple's own list
// neither fails so nor leaves out a volume that stays: VolumesService is
// an actor whose list() reads the store in one call, so a delete runs
// before or after it, whole (VolumesService.swift, 0.5.0–1.2.2).
func (e *engine) listVolumes() ([]podVolume, error) {
	var r result
	for try := 0; try < 10; try++ {
		if try > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		r = e.run("volume", "ls", "-q")
		if r.ok() {
			return e.inspectVolumes(strings.Fields(string(r.stdout))...)
		}
		if !r.contains("no such volume") && !r.contains("no volume with name") {
			break
		}
	}
	return nil, failPlain(r.message())
}

// hostCPUs is the number of CPUs podman may hand out (limits above fail).
func hostCPUs() int {
	n := numCPU()
	if n < 1 {
		return 1
	}
	return n
}

// homeDir is $HOME or "/".
func homeDir() string {
	if h := os.Getenv("HOME"); h != "" {
		return h
	}
	return "/"
}
