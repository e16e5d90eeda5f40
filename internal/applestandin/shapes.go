package main

import (
	"encoding/base64"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"
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
	labelUser       = labelPrefix + "user"       // Apple's ProcessConfiguration.User, as JSON (older: -u as given)
	labelGroups     = labelPrefix + "groups"     // JSON array: supplementalGroups (--gid without --uid)
	labelShmSize    = labelPrefix + "shmsize"    // --shm-size in bytes (1.0.0+ shmSize)
	labelMounts     = labelPrefix + "mounts"     // JSON: the mounts' destinations and options in Apple's order
	labelCaps       = labelPrefix + "caps"       // JSON {"add":[…],"drop":[…]}: capAdd and capDrop as Apple records them
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

// appleState maps podman's state to the state Apple's list shows.
// RuntimeStatus has four raw values (unknown, stopped, running, stopping:
// ContainerResource/Container/RuntimeStatus.swift, 0.8.0–1.2.2), but the
// apiserver's snapshot, which list and inspect print, is only ever set to
// .stopped (at load and when the init process exits) or .running (after
// bootstrap) (Server/Containers/ContainersService.swift, 0.8.0–1.2.2): a
// container being stopped stays "running" until it has exited.
func appleState(podState string) string {
	switch strings.ToLower(podState) {
	case "running", "stopping", "paused":
		return "running"
	}
	return "stopped"
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
	user    *Obj  // ProcessConfiguration.User, encoded
	groups  []any // supplementalGroups
	noDNS   bool
	stopSig string
	handler string
	shmSize int64 // 0: not set
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
	v.user, v.groups = processUser(l, c.Config.User)
	if n, err := strconv.ParseInt(l[labelShmSize], 10, 64); err == nil && n > 0 {
		v.shmSize = n
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

// userValue renders Apple's ProcessConfiguration.User for a -u value the
// stand-in recorded before it kept the encoded value: numeric ids as
// {"id":{"gid","uid"}}, names as {"raw":{"userString"}}.
func userValue(u string) *Obj {
	if u == "" {
		return userID(0, 0)
	}
	us, gs, hasG := strings.Cut(u, ":")
	uid, err1 := strconv.Atoi(us)
	gid, err2 := 0, error(nil)
	if hasG {
		gid, err2 = strconv.Atoi(gs)
	}
	if err1 == nil && err2 == nil {
		return userID(uid, gid)
	}
	return userRaw(u)
}

// userID and userRaw are the two cases of ProcessConfiguration.User as
// Swift's synthesized Codable writes an enum with associated values
// (ContainerResource/Container/ProcessConfiguration.swift, 0.8.0–1.2.2).
func userID(uid, gid int) *Obj {
	return NewObj().Set("id", NewObj().Set("gid", gid).Set("uid", uid))
}

func userRaw(s string) *Obj { return NewObj().Set("raw", NewObj().Set("userString", s)) }

// appleUser is Parser.user (Services/ContainerAPIService/Client/Parser.swift,
// 0.8.0–1.2.2) for run and create: a non-empty -u is taken raw, whatever
// it holds (even "1000:1000"); --uid with --gid is an id; --uid alone is
// raw; otherwise the default user, with --gid as a supplemental group.
// The default user is the image's USER, raw, when it has one, else id
// 0:0 (Parser.process). podmanUser is the -u to give podman ("" for its
// default) and groups its --group-add values.
func appleUser(p *parsed, imageUser string) (user *Obj, groups []int, podmanUser string) {
	u, uid, gid := p.Val("user", ""), p.Val("uid", ""), p.Val("gid", "")
	switch {
	case u != "":
		return userRaw(u), nil, u
	case uid != "" && gid != "":
		un, _ := strconv.Atoi(uid)
		gn, _ := strconv.Atoi(gid)
		return userID(un, gn), nil, uid + ":" + gid
	case uid != "":
		return userRaw(uid), nil, uid
	}
	def := userID(0, 0)
	if imageUser != "" {
		def = userRaw(imageUser)
	}
	if gid != "" {
		gn, _ := strconv.Atoi(gid)
		groups = []int{gn}
	}
	return def, groups, ""
}

// processUser is the recorded user and supplemental groups of a
// container; one the stand-in did not create shows podman's user, raw as
// an image's USER is.
func processUser(l map[string]string, podUser string) (*Obj, []any) {
	groups := []any{}
	var gs []int
	if json.Unmarshal([]byte(l[labelGroups]), &gs) == nil {
		for _, g := range gs {
			groups = append(groups, g)
		}
	}
	s, ok := l[labelUser]
	if !ok {
		if podUser == "" {
			return userID(0, 0), groups
		}
		return userRaw(podUser), groups
	}
	if o, err := decodeOrdered([]byte(s)); err == nil {
		if obj, isObj := o.(*Obj); isObj {
			return obj, groups
		}
	}
	return userValue(s), groups
}

// startedDate is the container's ContainerSnapshot.startedDate: set when
// it boots and kept when it stops (only status and networks are reset
// then), until the apiserver restarts and reloads every container with
// none (Server/Containers/ContainersService.swift, 0.8.0–1.2.2; a 1.2.0
// capture keeps it after a stop, samples §1.5). The stand-in's apiserver
// restart is `system start` (systemStartedAt).
func (a *app) startedDate(v *ctrView) (time.Time, bool) {
	t := v.c.State.StartedAt
	if t.IsZero() || t.Year() <= 1 {
		return time.Time{}, false
	}
	if v.state != "running" {
		if since, ok := a.systemStartedAt(); ok && t.Before(since) {
			return time.Time{}, false
		}
	}
	return t, true
}

// containerJSON renders one container in the emulated version's shape.
// Objects are built in the 0.x key order of samples §1.9; 1.x sorts keys.
// Fields by release (ContainerResource/Container/ContainerConfiguration.swift
// and Network/Attachment.swift, AttachmentConfiguration.swift at each tag):
// useInit from 0.10.0; the mtu of a network attachment and of its
// configured options from 0.11.0 (Utility.getAttachmentConfigurations
// sets 1280); capAdd and capDrop from 0.12.0; creationDate, stopSignal
// (the image's STOPSIGNAL), shmSize (--shm-size) and
// resources.cpuOverhead from 1.0.0; the attachment's variant from 1.1.0
// ("reserved": NetworkVmnet/Server/ReservedVmnetNetwork.swift). Optional
// fields that are nil are left out, as JSONEncoder does.
func (a *app) containerJSON(v *ctrView) *Obj {
	c := v.c
	one := oneX(a.v)
	mtu := a.v.AtLeast("0.11.0")

	image := NewObj().Set("reference", v.ref).Set("descriptor",
		NewObj().Set("size", descriptorSize).Set("mediaType", indexMediaType).Set("digest", c.ImageDigest))

	dns := NewObj().
		Set("searchDomains", orEmpty(c.HostConfig.DNSSearch)).
		Set("options", orEmpty(c.HostConfig.DNSOptions)).
		Set("nameservers", orEmpty(c.HostConfig.DNS))

	var cfgNets []any
	if v.network != "" {
		cfgNets = append(cfgNets, NewObj().
			Set("options", NewObj().Set("hostname", v.id).SetIf(mtu, "mtu", defaultMTU)).
			Set("network", v.network))
	}

	init := NewObj().
		Set("terminal", c.Config.Tty).
		Set("executable", v.exe).
		Set("workingDirectory", orDefault(c.Config.WorkingDir, "/")).
		Set("rlimits", []any{}).
		Set("environment", v.env).
		Set("user", v.user).
		Set("arguments", v.args).
		Set("supplementalGroups", v.groups)

	capsAdd, capsDrop := orEmpty(c.HostConfig.CapAdd), orEmpty(c.HostConfig.CapDrop)
	var caps struct{ Add, Drop []string }
	if json.Unmarshal([]byte(c.Config.Labels[labelCaps]), &caps) == nil {
		capsAdd, capsDrop = orEmpty(caps.Add), orEmpty(caps.Drop)
	}

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
		SetIf(a.v.AtLeast("0.12.0"), "capAdd", capsAdd).
		Set("readOnly", c.HostConfig.ReadonlyRootfs).
		Set("publishedSockets", []any{}).
		Set("networks", orEmptyAny(cfgNets)).
		Set("initProcess", init).
		Set("id", v.id).
		Set("mounts", a.mountsJSON(c)).
		SetIf(a.v.AtLeast("0.12.0"), "capDrop", capsDrop).
		SetIf(a.v.AtLeast("0.10.0"), "useInit", v.useInit).
		Set("resources", resources).
		SetIf(one && v.stopSig != "", "stopSignal", v.stopSig).
		SetIf(one && v.shmSize > 0, "shmSize", v.shmSize)
	if one {
		cfg.Set("creationDate", isoDate(c.Created))
	}

	var nets []any
	if cidr, gw, mac, ip6 := v.ipv4(); cidr != "" {
		att := NewObj().
			SetIf(mtu, "mtu", defaultMTU).
			Set("ipv4Gateway", gw).
			Set("macAddress", mac).
			Set("hostname", v.id).
			SetIf(ip6 != "", "ipv6Address", ip6).
			Set("ipv4Address", cidr).
			Set("network", v.network)
		// The 1.0.0 capture has no variant and the 1.2.0 ones have it:
		// the field came with 1.1.0.
		if a.v.AtLeast("1.1.0") {
			att.Set("variant", "reserved")
		}
		nets = append(nets, att)
	}

	started, hasStarted := a.startedDate(v)
	if one {
		status := NewObj().
			Set("networks", orEmptyAny(nets)).
			SetIf(hasStarted, "startedDate", isoDate(started)).
			Set("state", v.state)
		return NewObj().Set("configuration", cfg).Set("id", v.id).Set("status", status)
	}
	return NewObj().
		Set("networks", orEmptyAny(nets)).
		SetIf(hasStarted, "startedDate", appleSeconds(started)).
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

// mountSpec is one mount as Apple's configuration records it: its
// destination and options, in the order of ContainerConfiguration.mounts.
type mountSpec struct {
	Dest string   `json:"d"`
	Opts []string `json:"o"`
}

// mountsJSON renders bind mounts as virtiofs, named volumes as ext4 volume
// images and tmpfs mounts, in Apple's Filesystem encoding (an enum with
// associated values: {"virtiofs":{}}, {"tmpfs":{}}, {"volume":{"name",
// "format","cache":{"on":{}},"sync":{"fsync":{}}}}: Filesystem.swift,
// 0.8.0–1.2.2). Their order is Utility.containerConfigFromFlags': the
// --tmpfs mounts, then -v, then --mount, and each keeps the options as
// Parser.volume and Parser.mount read them (labelMounts); for a container
// without that record, "ro" for a read-only one.
func (a *app) mountsJSON(c *podContainer) []any {
	var specs []mountSpec
	_ = json.Unmarshal([]byte(c.Config.Labels[labelMounts]), &specs)
	order := map[string]int{}
	opts := map[string][]string{}
	for i, m := range specs {
		if _, dup := order[m.Dest]; !dup {
			order[m.Dest] = i
			opts[m.Dest] = m.Opts
		}
	}
	type entry struct {
		dest string
		obj  *Obj
	}
	var entries []entry
	seen := map[string]bool{}
	options := func(dest string, ro bool) []string {
		if o, ok := opts[dest]; ok {
			return orEmpty(o)
		}
		if ro {
			return []string{"ro"}
		}
		return []string{}
	}
	for _, m := range c.Mounts {
		seen[m.Destination] = true
		mo := NewObj().Set("options", options(m.Destination, !m.RW))
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
		entries = append(entries, entry{m.Destination, mo})
	}
	for d := range c.HostConfig.Tmpfs {
		if seen[d] {
			continue
		}
		entries = append(entries, entry{d, NewObj().Set("options", options(d, false)).Set("source", "").Set("destination", d).
			Set("type", NewObj().Set("tmpfs", NewObj()))})
	}
	rank := func(d string) int {
		if i, ok := order[d]; ok {
			return i
		}
		return len(order)
	}
	sort.SliceStable(entries, func(i, j int) bool {
		ri, rj := rank(entries[i].dest), rank(entries[j].dest)
		if ri != rj {
			return ri < rj
		}
		return entries[i].dest < entries[j].dest
	})
	out := make([]any, len(entries))
	for i, e := range entries {
		out[i] = e.obj
	}
	return out
}

// listRow is one `container ls` table row for the emulated version.
func (a *app) listRow(v *ctrView) []string {
	cidr, _, _, _ := v.ipv4()
	started := ""
	if t, ok := a.startedDate(v); ok {
		started = isoDate(t)
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

// appleCaps is Parser.capabilities (Services/ContainerAPIService/Client/Parser.swift,
// 0.12.0–1.2.2): each name upper-cased and given the CAP_ prefix, "ALL"
// kept as is, in the order given (podman expands ALL).
func appleCaps(names []string) []string {
	out := []string{}
	for _, n := range names {
		u := strings.ToUpper(n)
		if u != "ALL" && !strings.HasPrefix(u, "CAP_") {
			u = "CAP_" + u
		}
		out = append(out, u)
	}
	return out
}
