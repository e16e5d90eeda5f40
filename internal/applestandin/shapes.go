package main

import (
	"encoding/base64"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
)

// Private podman labels in which the stand-in records what Apple keeps in
// its own container configuration. They never appear in Apple JSON.
const (
	labelPrefix     = "io.applestandin."
	labelRef        = labelPrefix + "ref"        // normalised Apple image reference
	labelCPUs       = labelPrefix + "cpus"       // requested CPU count
	labelMemory     = labelPrefix + "memory"     // requested memory in bytes
	labelEnv        = labelPrefix + "env"        // JSON array: image env + env files + -e
	labelInit       = labelPrefix + "init"       // "1" when run with --init
	labelNetwork    = labelPrefix + "network"    // Apple network name ("none" for --network none)
	labelUser       = labelPrefix + "user"       // -u / --uid / --gid as given
	labelStopSignal = labelPrefix + "stopsignal" // image STOPSIGNAL, when set
	labelNoDNS      = labelPrefix + "nodns"      // "1" with --no-dns
	labelRuntime    = labelPrefix + "runtime"    // --runtime value
	labelLabels     = labelPrefix + "labels"     // JSON object: the -l labels (podman adds image labels)
	labelCreator    = labelPrefix + "creator"    // random token of the invocation that created it
)

// Apple defaults (docs/how-to.md via the CLI reference).
const (
	defaultCPUs       = 4
	defaultMemory     = int64(1) << 30
	defaultMTU        = 1280
	defaultRuntime    = "container-runtime-linux"
	indexMediaType    = "application/vnd.oci.image.index.v1+json"
	defaultVolumeSize = int64(512) << 30
)

// appRoot is Apple's application data root; volume sources live under it.
// reconstructed: a Mac path shape under this machine's $HOME.
func appRoot() string {
	return strings.TrimSuffix(homeDir(), "/") + "/Library/Application Support/com.apple.container/"
}

// volumeSource is the image file Apple keeps for a named volume.
func volumeSource(name string) string { return appRoot() + "volumes/" + name + "/volume.img" }

// descriptorSize is the size reported for an image index descriptor.
// reconstructed: podman has no index for local images; this is the length
// of a one-manifest OCI index, the magnitude seen for local builds (375).
const descriptorSize = 375

// appleState maps podman's state to Apple's RuntimeStatus.
func appleState(podState string) string {
	switch strings.ToLower(podState) {
	case "running":
		return "running"
	case "created", "configured", "exited", "stopped", "dead", "initialized":
		return "stopped"
	case "stopping":
		return "stopping"
	}
	return "unknown"
}

// publicLabels drops the stand-in's private labels.
func publicLabels(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		if !strings.HasPrefix(k, labelPrefix) {
			out[k] = v
		}
	}
	return out
}

// containerLabels are the labels Apple shows for a container or a volume:
// the -l / --label labels when the stand-in recorded them, else the public
// podman labels.
func containerLabels(in map[string]string) map[string]string {
	if s, ok := in[labelLabels]; ok {
		var m map[string]string
		if json.Unmarshal(decodeJSONLabel(s), &m) == nil {
			if m == nil {
				m = map[string]string{}
			}
			return m
		}
	}
	return publicLabels(in)
}

// ctrView is a podman container reduced to what Apple's JSON needs.
type ctrView struct {
	c       *podContainer
	id      string
	ref     string
	state   string
	exe     string
	args    []string
	env     []string
	network string // "" when the container has no network (--network none)
	cpus    int
	memory  int64
	useInit bool
	user    string
	noDNS   bool
	stopSig string
	handler string
}

// view derives the Apple view of a podman container.
func view(c *podContainer) *ctrView {
	l := c.Config.Labels
	v := &ctrView{c: c, id: strings.TrimPrefix(c.Name, "/"), state: appleState(c.State.Status)}
	v.ref = l[labelRef]
	if v.ref == "" {
		v.ref = appleFromPodman(c.ImageName)
	}
	v.exe, v.args = c.Path, c.Args
	v.useInit = l[labelInit] == "1" || c.HostConfig.Init
	if c.HostConfig.Init && len(v.args) > 0 && strings.Contains(v.exe, "init") {
		// podman --init runs /run/podman-init -- cmd args…
		rest := v.args
		if rest[0] == "--" {
			rest = rest[1:]
		}
		if len(rest) > 0 {
			v.exe, v.args = rest[0], rest[1:]
		}
	}
	if v.args == nil {
		v.args = []string{}
	}
	if s := l[labelEnv]; s != "" {
		_ = json.Unmarshal([]byte(s), &v.env)
	}
	if v.env == nil {
		for _, e := range c.Config.Env {
			if !strings.HasPrefix(e, "container=") {
				v.env = append(v.env, e)
			}
		}
	}
	if v.env == nil {
		v.env = []string{}
	}
	switch n := l[labelNetwork]; {
	case n == "none":
	case n != "":
		v.network = n
	case c.HostConfig.NetworkMode == "none":
	default:
		v.network = "default"
	}
	v.cpus = defaultCPUs
	if n, err := strconv.Atoi(l[labelCPUs]); err == nil && n > 0 {
		v.cpus = n
	} else if c.HostConfig.NanoCpus > 0 {
		v.cpus = int((c.HostConfig.NanoCpus + 999_999_999) / 1_000_000_000)
	}
	v.memory = defaultMemory
	if n, err := strconv.ParseInt(l[labelMemory], 10, 64); err == nil && n > 0 {
		v.memory = n
	} else if c.HostConfig.Memory > 0 {
		v.memory = c.HostConfig.Memory
	}
	v.user = c.Config.User
	if u, ok := l[labelUser]; ok {
		v.user = u
	}
	v.noDNS = l[labelNoDNS] == "1"
	v.stopSig = l[labelStopSignal]
	v.handler = l[labelRuntime]
	if v.handler == "" {
		v.handler = defaultRuntime
	}
	return v
}

// ipv4 returns the container's address in CIDR form, its gateway and MAC
// ("" when it has none, e.g. stopped or --network none).
func (v *ctrView) ipv4() (cidr, gw, mac, ip6 string) {
	if v.state != "running" || v.network == "" {
		return "", "", "", ""
	}
	ns := v.c.NetworkSettings.podNetwork
	if ns.IPAddress == "" && len(v.c.NetworkSettings.Networks) > 0 {
		names := make([]string, 0, len(v.c.NetworkSettings.Networks))
		for k := range v.c.NetworkSettings.Networks {
			names = append(names, k)
		}
		sort.Strings(names)
		ns = v.c.NetworkSettings.Networks[names[0]]
	}
	if ns.IPAddress == "" {
		return "", "", "", ""
	}
	cidr = ns.IPAddress + "/" + strconv.Itoa(ns.IPPrefixLen)
	if ns.GlobalIPv6Address != "" {
		ip6 = ns.GlobalIPv6Address + "/" + strconv.Itoa(ns.GlobalIPv6PrefixLen)
	}
	return cidr, ns.Gateway, ns.MacAddress, ip6
}

// userValue renders Apple's ProcessConfiguration.User: numeric ids as
// {"id":{"gid","uid"}}, names as {"raw":{"userString"}}.
func userValue(u string) *Obj {
	if u == "" {
		return NewObj().Set("id", NewObj().Set("gid", 0).Set("uid", 0))
	}
	us, gs, hasG := strings.Cut(u, ":")
	uid, err1 := strconv.Atoi(us)
	gid, err2 := 0, error(nil)
	if hasG {
		gid, err2 = strconv.Atoi(gs)
	}
	if err1 == nil && err2 == nil {
		return NewObj().Set("id", NewObj().Set("gid", gid).Set("uid", uid))
	}
	return NewObj().Set("raw", NewObj().Set("userString", u))
}

// containerJSON renders one container in the emulated version's shape.
// Objects are built in the 0.x key order of samples §1.9; 1.x sorts keys.
func (a *app) containerJSON(v *ctrView) *Obj {
	c := v.c
	one := oneX(a.v)

	image := NewObj().Set("reference", v.ref).Set("descriptor",
		NewObj().Set("size", descriptorSize).Set("mediaType", indexMediaType).Set("digest", c.ImageDigest))

	dns := NewObj().
		Set("searchDomains", orEmpty(c.HostConfig.DNSSearch)).
		Set("options", orEmpty(c.HostConfig.DNSOptions)).
		Set("nameservers", orEmpty(c.HostConfig.DNS))

	var cfgNets []any
	if v.network != "" {
		cfgNets = append(cfgNets, NewObj().
			Set("options", NewObj().Set("hostname", v.id).Set("mtu", defaultMTU)).
			Set("network", v.network))
	}

	init := NewObj().
		Set("terminal", c.Config.Tty).
		Set("executable", v.exe).
		Set("workingDirectory", orDefault(c.Config.WorkingDir, "/")).
		Set("rlimits", []any{}).
		Set("environment", v.env).
		Set("user", userValue(v.user)).
		Set("arguments", v.args).
		Set("supplementalGroups", []any{})

	resources := NewObj().Set("cpus", v.cpus).Set("memoryInBytes", v.memory)
	if one {
		resources.Set("cpuOverhead", 1)
	}

	cfg := NewObj().
		Set("sysctls", NewObj()).
		Set("publishedPorts", portsJSON(c)).
		Set("runtimeHandler", v.handler).
		Set("image", image).
		Set("labels", containerLabels(c.Config.Labels)).
		Set("virtualization", false).
		SetIf(!v.noDNS, "dns", dns).
		Set("platform", NewObj().Set("os", "linux").Set("architecture", archName())).
		Set("ssh", false).
		Set("rosetta", false).
		SetIf(a.v.AtLeast("0.12.0"), "capAdd", orEmpty(c.HostConfig.CapAdd)).
		Set("readOnly", c.HostConfig.ReadonlyRootfs).
		Set("publishedSockets", []any{}).
		Set("networks", orEmptyAny(cfgNets)).
		Set("initProcess", init).
		Set("id", v.id).
		Set("mounts", a.mountsJSON(c)).
		SetIf(a.v.AtLeast("0.12.0"), "capDrop", orEmpty(c.HostConfig.CapDrop)).
		SetIf(a.v.AtLeast("0.10.0"), "useInit", v.useInit).
		Set("resources", resources).
		SetIf(v.stopSig != "", "stopSignal", v.stopSig)
	if one {
		cfg.Set("creationDate", isoDate(c.Created))
	}

	running := v.state == "running"
	var nets []any
	if cidr, gw, mac, ip6 := v.ipv4(); cidr != "" {
		att := NewObj().
			Set("mtu", defaultMTU).
			Set("ipv4Gateway", gw).
			Set("macAddress", mac).
			Set("hostname", v.id).
			SetIf(ip6 != "", "ipv6Address", ip6).
			Set("ipv4Address", cidr).
			Set("network", v.network)
		// reconstructed: "variant" is absent in the 1.0.0 capture and present
		// from the 1.2.0 captures on; 1.1.x is assumed to match 1.0.
		if a.v.AtLeast("1.2.0") {
			att.Set("variant", "reserved")
		}
		nets = append(nets, att)
	}

	if one {
		status := NewObj().
			Set("networks", orEmptyAny(nets)).
			SetIf(running, "startedDate", isoDate(c.State.StartedAt)).
			Set("state", v.state)
		return NewObj().Set("configuration", cfg).Set("id", v.id).Set("status", status)
	}
	return NewObj().
		Set("networks", orEmptyAny(nets)).
		SetIf(running, "startedDate", appleSeconds(c.State.StartedAt)).
		Set("status", v.state).
		Set("configuration", cfg)
}

// portsJSON renders published ports ({hostPort,count,containerPort,hostAddress,proto}).
func portsJSON(c *podContainer) []any {
	keys := make([]string, 0, len(c.HostConfig.PortBindings))
	for k := range c.HostConfig.PortBindings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := []any{}
	for _, k := range keys {
		cport, proto, _ := strings.Cut(k, "/")
		if proto == "" {
			proto = "tcp"
		}
		cp, _ := strconv.Atoi(cport)
		for _, b := range c.HostConfig.PortBindings[k] {
			hp, _ := strconv.Atoi(b.HostPort)
			addr := b.HostIp
			if addr == "" {
				addr = "0.0.0.0"
			}
			out = append(out, NewObj().Set("hostPort", hp).Set("count", 1).
				Set("containerPort", cp).Set("hostAddress", addr).Set("proto", proto))
		}
	}
	return out
}

// mountsJSON renders bind mounts as virtiofs, named volumes as ext4 volume
// images and tmpfs mounts, in Apple's Filesystem encoding.
func (a *app) mountsJSON(c *podContainer) []any {
	out := []any{}
	seen := map[string]bool{}
	for _, m := range c.Mounts {
		seen[m.Destination] = true
		opts := []any{}
		if !m.RW {
			opts = append(opts, "ro")
		}
		mo := NewObj().Set("options", opts)
		switch m.Type {
		case "volume":
			mo.Set("source", volumeSource(m.Name)).Set("destination", m.Destination).
				Set("type", NewObj().Set("volume", NewObj().
					Set("cache", NewObj().Set("on", NewObj())).
					Set("format", "ext4").
					Set("name", m.Name).
					Set("sync", NewObj().Set("fsync", NewObj()))))
		case "tmpfs":
			mo.Set("source", "").Set("destination", m.Destination).
				Set("type", NewObj().Set("tmpfs", NewObj()))
		default:
			mo.Set("source", m.Source).Set("destination", m.Destination).
				Set("type", NewObj().Set("virtiofs", NewObj()))
		}
		out = append(out, mo)
	}
	dests := make([]string, 0, len(c.HostConfig.Tmpfs))
	for d := range c.HostConfig.Tmpfs {
		dests = append(dests, d)
	}
	sort.Strings(dests)
	for _, d := range dests {
		if seen[d] {
			continue
		}
		out = append(out, NewObj().Set("options", []any{}).Set("source", "").Set("destination", d).
			Set("type", NewObj().Set("tmpfs", NewObj())))
	}
	return out
}

// listRow is one `container ls` table row for the emulated version.
func (a *app) listRow(v *ctrView) []string {
	cidr, _, _, _ := v.ipv4()
	started := ""
	if v.state == "running" {
		started = isoDate(v.c.State.StartedAt)
	}
	return []string{v.id, v.ref, "linux", archName(), v.state, cidr,
		strconv.Itoa(v.cpus), strconv.FormatInt(v.memory>>20, 10) + " MB", started}
}

// listHeader is the `container ls` header row (samples §7.1).
func (a *app) listHeader() []string {
	addr := "IP"
	if !oneX(a.v) {
		addr = "ADDR"
	}
	return []string{"ID", "IMAGE", "OS", "ARCH", "STATE", addr, "CPUS", "MEMORY", "STARTED"}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func orEmptyAny(s []any) []any {
	if s == nil {
		return []any{}
	}
	return s
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// jsonLabelPrefix marks a JSON label value carried in base64: podman splits
// a volume's --label values as CSV, which quotes and commas do not survive.
const jsonLabelPrefix = "b64:"

// encodeJSONLabel is the value of a label that carries JSON through
// podman's CSV reading of volume labels.
func encodeJSONLabel(js []byte) string {
	return jsonLabelPrefix + base64.RawStdEncoding.EncodeToString(js)
}

// decodeJSONLabel reads a label value that encodeJSONLabel wrote, or a
// plain JSON one (a container's).
func decodeJSONLabel(v string) []byte {
	if rest, ok := strings.CutPrefix(v, jsonLabelPrefix); ok {
		if b, err := base64.RawStdEncoding.DecodeString(rest); err == nil {
			return b
		}
	}
	return []byte(v)
}
