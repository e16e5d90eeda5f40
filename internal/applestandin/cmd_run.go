package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/internal/applecli"
)

// createPlan is a run/create command line translated for podman.
type createPlan struct {
	id       string
	image    string // podman reference
	args     []string
	volumes  []string // named volumes that must exist
	anon     []string // anonymous volumes to create
	podArgs  []string
	detach   bool
	rm       bool
	stdin    bool
	tty      bool
	cidfile  string
	imageEnv []string
	creator  string // token in labelCreator: this invocation made the container
	// rwVolumes are the named volumes attached read-write.
	rwVolumes []string
	// mounts are the mounts in Apple's order, with Apple's options.
	mounts []mountSpec
	// labelErr is the -l labels' parse error, reported once the named
	// volumes are made: Apple parses labels after it has resolved (and
	// auto-created) the volumes (Utility.containerConfigFromFlags,
	// 0.8.0–1.2.2).
	labelErr error
}

// cmdRun implements `container run`.
func cmdRun(a *app, p *parsed) error { return a.createOrRun(p, true) }

// cmdCreate implements `container create`.
func cmdCreate(a *app, p *parsed) error { return a.createOrRun(p, false) }

func (a *app) createOrRun(p *parsed, start bool) error {
	// The id is checked first (ContainerRun.swift / ContainerCreate.swift:
	// Utility.validEntityName before 1.2.0, ManagedContainer.nameValid after).
	if f := p.Verify("name"); f != nil {
		return a.failure(f)
	}
	// -c is an Int64 for the parser, which takes any (Parser.resources
	// passes it on); see checkCPUs for what the VM makes of it.
	cpus := 0
	if p.IsSet("cpus") {
		n, err := strconv.Atoi(p.Val("cpus", ""))
		if err != nil {
			return failPlain(err.Error())
		}
		cpus = n
	}
	// The first request is the image lookup (ClientImage.list), or from
	// 1.0.0 the health check of loadContainerSystemConfig: both fail with
	// the bare connection error.
	if err := a.up(); err != nil {
		return err
	}
	id := p.Val("name", "")
	if id == "" {
		id = newUUID()
	}
	// run checks the id before anything else (pull, volumes, boot):
	// exists "container with id <id> already exists" (ContainerRun.swift,
	// 0.8.0–1.2.2); create has no such check, and the server refuses the
	// id once the configuration is made (errCreateExists).
	if start {
		if c, err := a.eng.inspectOne(id); err != nil {
			return err
		} else if c != nil {
			return a.errExists(id)
		}
	}
	if p.Has("virtualization") {
		// docs/how-to.md quotes the coded form; kept for every version.
		return failPlain(coded("unsupported", "nested virtualization is not supported on the platform"))
	}
	if p.IsSet("publish-socket") {
		return failPlain("--publish-socket is not supported by this stand-in")
	}
	ref := normalizeRef(p.Pos[0])
	imgs, err := a.eng.inspectImages(podmanCandidates(ref)...)
	if err != nil {
		return err
	}
	if len(imgs) == 0 {
		return a.errPull(ref)
	}
	podRef, img := pickImage(podmanCandidates(ref), imgs)
	icfg := img.config()
	// Parser.resources (Parser.swift, 0.8.0–1.2.2), once the image is
	// fetched: -m is Measurement.parse in whole MiB (a bare number is
	// bytes; the fraction of a MiB is dropped), its errors printed plainly.
	memory := defaultMemory
	if p.IsSet("memory") {
		if f := p.Verify("memory"); f != nil {
			return a.failure(f)
		}
		mib, _ := memoryMiB(p.Val("memory", ""))
		if mib == 0 {
			// reconstructed: a VM of no memory does not boot; the text is unknown.
			return a.failCause("internalError", "failed to bootstrap container", "memory size "+p.Val("memory", "")+" is less than 1 MiB")
		}
		memory = mib << 20
	}

	plan := &createPlan{id: id, image: podRef, args: p.Pos[1:], detach: p.Has("detach"),
		rm: p.Has("rm"), stdin: p.Has("interactive"), tty: p.Has("tty"), cidfile: p.Val("cidfile", "")}
	if err := a.translate(p, plan, ref, icfg, cpus, memory); err != nil {
		return err
	}
	if err := a.ensureVolumes(plan); err != nil {
		return err
	}
	// Then networks, labels and ports, in Utility.containerConfigFromFlags' order.
	if f := p.Verify("network"); f != nil {
		return a.failure(f)
	}
	if plan.labelErr != nil {
		return plan.labelErr
	}
	if f := p.Verify("publish"); f != nil {
		return a.failure(f)
	}
	if start {
		if err := a.checkAttachable(plan.id, plan.rwVolumes); err != nil {
			return err
		}
		if err := a.checkCPUs(cpus); err != nil {
			return err
		}
	}
	if start && !plan.detach {
		return a.runForeground(plan)
	}
	verb := "create"
	if start {
		verb = "run"
	}
	args := []string{verb}
	if start {
		args = append(args, "-d")
	}
	args = append(args, plan.podArgs...)
	args = append(args, plan.image)
	args = append(args, plan.args...)
	r := a.eng.run(args...)
	if !r.ok() {
		if nameTaken(r) {
			return a.errCreateExists(id)
		}
		a.removeOwn(plan)
		return a.bootstrapError(r)
	}
	if plan.cidfile != "" {
		if err := os.WriteFile(plan.cidfile, []byte(id), 0o644); err != nil {
			return failPlain(err.Error())
		}
	}
	fmt.Fprintln(a.stdout, id)
	return nil
}

// pickImage returns the first candidate reference that one of the
// inspected images carries, with that image (else the first image by id).
func pickImage(cands []string, imgs []podImage) (string, *podImage) {
	for _, c := range cands {
		for i := range imgs {
			for _, t := range imgs[i].RepoTags {
				if t == c {
					return c, &imgs[i]
				}
			}
		}
	}
	return imgs[0].ID, &imgs[0]
}

// errPull is what a failed pull of a missing image prints (samples §6.3).
// reconstructed: the tail of the 1.x Docker Hub line is not captured; the
// 0.1.0 wording for the same case is used.
func (a *app) errPull(ref string) error {
	domain, path, suffix := splitRef(ref)
	tag := strings.TrimPrefix(strings.TrimPrefix(suffix, ":"), "@")
	var msg string
	if domain == dockerHub {
		msg = "HTTP request to https://registry-1.docker.io/v2/" + path + "/manifests/" + tag +
			" failed with response: 401 Unauthorized. No credentials found for host registry-1.docker.io"
	} else {
		msg = "HTTP request to https://" + domain + "/v2/" + path + "/manifests/" + tag +
			" failed with response: 404 Not Found. Reason: Unknown"
	}
	if codeErrors(a.v) {
		return failPlain(coded("internalError", msg))
	}
	return failPlain(msg)
}

// bootstrapError maps a podman create/start failure to an Apple error.
func (a *app) bootstrapError(r result) error {
	msg := r.message()
	if exe, ok := missingExecutable(msg); ok {
		return a.fail("notFound", "failed to find target executable "+exe)
	}
	// reconstructed: Apple's wording for other bootstrap failures.
	return a.failCause("internalError", "failed to bootstrap container", msg)
}

// missingExecutable extracts the program name from runc's "executable
// file not found" message.
func missingExecutable(msg string) (string, bool) {
	if !strings.Contains(msg, "executable file not found") && !strings.Contains(msg, "no such file or directory: OCI runtime attempted") {
		return "", false
	}
	if i := strings.Index(msg, `exec: "`); i >= 0 {
		rest := msg[i+len(`exec: "`):]
		if j := strings.Index(rest, `"`); j >= 0 {
			return rest[:j], true
		}
	}
	return "", true
}

// translate turns Apple's flags into podman's and records Apple-only
// configuration in private labels.
func (a *app) translate(p *parsed, plan *createPlan, ref string, icfg imageConfig, cpus int, memory int64) error {
	add := func(s ...string) { plan.podArgs = append(plan.podArgs, s...) }
	label := func(k, v string) { add("--label", k+"="+v) }
	add("--name", plan.id, "--hostname", plan.id)
	plan.creator = newToken()
	label(labelCreator, plan.creator)
	userLabels, err := a.parseRunLabels(p.Vals("label"))
	plan.labelErr = err
	for _, k := range sortedKeys(userLabels) {
		label(k, userLabels[k])
	}
	labelsJSON, _ := json.Marshal(userLabels)
	label(labelLabels, string(labelsJSON))
	label(labelRef, ref)
	if cpus > 0 {
		label(labelCPUs, strconv.Itoa(cpus))
		// See checkCPUs: from 0.12.0 the VM has at most the host's CPUs.
		add("--cpus", strconv.Itoa(min(cpus, hostCPUs())))
	}
	label(labelMemory, strconv.FormatInt(memory, 10))
	add("--memory", strconv.FormatInt(memory, 10))

	env, err := appleEnv(icfg.Env, p.Vals("env-file"), p.Vals("env"))
	if err != nil {
		return failPlain(err.Error())
	}
	envJSON, _ := json.Marshal(env)
	label(labelEnv, string(envJSON))
	for _, f := range p.Vals("env-file") {
		add("--env-file", f)
	}
	for _, e := range p.Vals("env") {
		add("-e", e)
	}
	if icfg.StopSignal != "" {
		label(labelStopSignal, icfg.StopSignal)
	}
	if w := p.Val("workdir", ""); w != "" {
		add("-w", w)
	}
	user, groups, podUser := appleUser(p, icfg.User)
	label(labelUser, string(Encoding{Sorted: true}.Compact(user)))
	if len(groups) > 0 {
		gj, _ := json.Marshal(groups)
		label(labelGroups, string(gj))
		for _, g := range groups {
			add("--group-add", strconv.Itoa(g))
		}
	}
	if podUser != "" {
		add("-u", podUser)
	}
	if plan.stdin {
		add("-i")
	}
	if plan.tty {
		add("-t")
	}
	if p.IsSet("entrypoint") {
		add("--entrypoint", p.Val("entrypoint", ""))
	}
	switch n := strings.Split(p.Val("network", "default"), ",")[0]; n {
	case "none":
		label(labelNetwork, "none")
		add("--network", "none")
	case "default", "":
	default:
		label(labelNetwork, n)
		add("--network", n)
	}
	if p.Has("init") {
		label(labelInit, "1")
		add("--init")
	}
	if plan.rm {
		add("--rm")
	}
	if p.Has("read-only") {
		add("--read-only")
	}
	for _, c := range p.Vals("cap-add") {
		add("--cap-add", c)
	}
	for _, c := range p.Vals("cap-drop") {
		add("--cap-drop", c)
	}
	caps, _ := json.Marshal(map[string][]string{"add": appleCaps(p.Vals("cap-add")), "drop": appleCaps(p.Vals("cap-drop"))})
	label(labelCaps, string(caps))
	for _, d := range p.Vals("dns") {
		add("--dns", d)
	}
	for _, d := range p.Vals("dns-search") {
		add("--dns-search", d)
	}
	for _, d := range p.Vals("dns-option") {
		add("--dns-option", d)
	}
	if p.Has("no-dns") {
		label(labelNoDNS, "1")
		add("--dns", "none")
	}
	if r := p.Val("runtime", ""); r != "" {
		label(labelRuntime, r)
	}
	for _, u := range p.Vals("ulimit") {
		add("--ulimit", u)
	}
	if s := p.Val("shm-size", ""); s != "" {
		// Measurement.parse in bytes (Utility.containerConfigFromFlags, 1.0.0–1.2.2).
		n, err := sizeBytes(s)
		if err != nil {
			return failPlain(err.Error())
		}
		add("--shm-size", strconv.FormatInt(n, 10))
		label(labelShmSize, strconv.FormatInt(n, 10))
	}
	for _, pub := range p.Vals("publish") {
		add("-p", pub)
	}
	// Parser.tmpfsMounts drops repeated --tmpfs values.
	for _, t := range p.Vals("tmpfs") {
		if !slices.ContainsFunc(plan.mounts, func(m mountSpec) bool { return m.Dest == t }) {
			plan.mounts = append(plan.mounts, mountSpec{t, []string{}})
			add("--tmpfs", t)
		}
	}
	for _, v := range p.Vals("volume") {
		arg, err := a.volumeArg(plan, v)
		if err != nil {
			return err
		}
		add("-v", arg)
	}
	if f := p.Verify("mount"); f != nil {
		return a.failure(f)
	}
	for _, m := range p.Vals("mount") {
		arg, err := a.mountArg(plan, m)
		if err != nil {
			return err
		}
		add("--mount", arg)
	}
	mj, _ := json.Marshal(plan.mounts)
	label(labelMounts, string(mj))
	return nil
}

// checkCPUs is the boot-time fate of -c above the host's CPUs. The CLI
// takes any count (Parser.resources, 0.8.0–1.2.2) and the VM gets it:
// before 0.12.0 (containerization < 0.31) as is, which
// Virtualization.framework refuses when it exceeds what the host has, so
// the boot fails; from 0.12.0 containerization clamps the VM's CPUs to
// the host's active processors (VZVirtualMachineManager.create), so it
// boots with fewer and the configuration keeps the count asked for.
func (a *app) checkCPUs(cpus int) error {
	if host := hostCPUs(); a.v.Before("0.12.0") && cpus > host {
		// reconstructed: Virtualization.framework's validation text is not captured.
		return a.failCause("internalError", "failed to bootstrap container",
			fmt.Sprintf(`Error Domain=VZErrorDomain Code=2 "Invalid virtual machine configuration. The number of CPUs (%d) exceeds the maximum allowed (%d)."`, cpus, host))
	}
	return nil
}

// userFlag combines -u, --uid and --gid the way Apple does.
func userFlag(p *parsed) (string, bool) {
	if u := p.Val("user", ""); u != "" {
		return u, true
	}
	uid, gid := p.Val("uid", ""), p.Val("gid", "")
	switch {
	case uid != "" && gid != "":
		return uid + ":" + gid, true
	case uid != "":
		return uid, true
	case gid != "":
		return "0:" + gid, true
	}
	return "", false
}

// appleEnv is the init process environment Apple records: image env,
// then env files, then -e (a bare NAME takes the host's value).
func appleEnv(image, files, flags []string) ([]string, error) {
	env := append([]string(nil), image...)
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		for i, e := range env {
			if ek, _, _ := strings.Cut(e, "="); ek == k {
				env[i] = kv
				return
			}
		}
		env = append(env, kv)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			set(line)
		}
	}
	for _, e := range flags {
		if strings.Contains(e, "=") {
			set(e)
		} else if v, ok := os.LookupEnv(e); ok {
			set(e + "=" + v)
		}
	}
	if env == nil {
		env = []string{}
	}
	return env, nil
}

// volumeArg translates one -v value as Parser.volume reads it
// (Parser.swift, 0.8.0–1.2.2): leading ':' are trimmed and the rest split
// on ':' with empty pieces dropped. One piece is an anonymous volume
// mounted there; two or three are source, destination and options (split
// on ','). The source is a host path when it holds a '/' (absolute, or
// relative to the working directory: "./x", "a/b", "~/x", where '~' is
// not expanded) or, from 0.11.0, is "." or ".."; anything else is a
// volume name, which must match the volume name pattern. A host path must
// exist. Four pieces or more are refused.
func (a *app) volumeArg(plan *createPlan, v string) (string, error) {
	spec, f := applecli.ParseVolume(a.v, v)
	switch {
	case f != nil:
		return "", a.failure(f)
	case spec.Anonymous:
		// VolumeStorage.generateAnonymousVolumeName: a lowercased UUID.
		name := newUUID()
		plan.anon = append(plan.anon, name)
		plan.mounts = append(plan.mounts, mountSpec{spec.Target, []string{}})
		return name + ":" + spec.Target, nil
	}
	plan.mounts = append(plan.mounts, mountSpec{spec.Target, orEmpty(spec.Options)})
	if !spec.Path {
		plan.volumes = append(plan.volumes, spec.Source)
		if !slices.Contains(spec.Options, "ro") && !slices.Contains(spec.Options, "readonly") {
			plan.rwVolumes = append(plan.rwVolumes, spec.Source)
		}
		return podmanVolume(spec.Source, spec.Target, spec.Options), nil
	}
	abs, err := filepath.Abs(spec.Source)
	if err != nil {
		return "", failPlain(err.Error())
	}
	if _, err := os.Stat(abs); err != nil {
		return "", a.fail("invalidArgument", "path '"+spec.Source+"' does not exist")
	}
	return podmanVolume(abs, spec.Target, spec.Options), nil
}

// podmanVolume spells a -v value for podman.
func podmanVolume(src, dst string, opts []string) string {
	if len(opts) == 0 {
		return src + ":" + dst
	}
	return src + ":" + dst + ":" + strings.Join(opts, ",")
}

func hasOption(opts string, names ...string) bool {
	for _, o := range strings.Split(opts, ",") {
		for _, n := range names {
			if o == n {
				return true
			}
		}
	}
	return false
}

// checkAttachable refuses to start a container with a named volume that a
// running container already has attached read-write: an Apple volume is
// an ext4 block device that only one VM may attach read-write (apple/
// container#1133).
func (a *app) checkAttachable(self string, rw []string) error {
	for _, vol := range rw {
		r := a.eng.run("ps", "--filter", "status=running", "--filter", "volume="+vol, "--format", "{{.Names}}")
		if !r.ok() {
			continue
		}
		for _, other := range strings.Fields(string(r.stdout)) {
			if other == self {
				continue
			}
			c, err := a.eng.inspectOne(other)
			if err != nil || c == nil {
				continue
			}
			for _, m := range c.Mounts {
				if m.Type == "volume" && m.Name == vol && m.RW {
					// reconstructed: the line around the VZ error is not captured.
					return a.failCause("internalError", "failed to bootstrap container",
						`Error Domain=VZErrorDomain Code=2 "The storage device attachment is invalid."`)
				}
			}
		}
	}
	return nil
}

// mountArg translates --mount type=virtiofs|bind|volume|tmpfs,… to podman.
func (a *app) mountArg(plan *createPlan, m string) (string, error) {
	var typ, src, dst string
	var extra []string
	// The options Parser.mount records: "ro", "size=<bytes>", "mode=<mode>"
	// (it walks a dictionary, so their order varies; here as given).
	apple := []string{}
	for _, kv := range strings.Split(m, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "type":
			typ = v
		case "source", "src":
			src = v
		case "target", "dst", "destination":
			dst = v
		case "readonly", "ro":
			extra = append(extra, "readonly")
			apple = append(apple, "ro")
		case "size":
			// Parser.mount: memoryStringAsMiB, times 1 MiB (Parser.swift, 0.8.0–1.2.2).
			mib, err := memoryMiB(v)
			if err != nil {
				return "", failPlain(err.Error())
			}
			extra = append(extra, "tmpfs-size="+strconv.FormatInt(mib<<20, 10))
			apple = append(apple, "size="+strconv.FormatInt(mib<<20, 10))
		case "mode":
			extra = append(extra, "tmpfs-mode="+v)
			apple = append(apple, "mode="+v)
		default:
			// reconstructed: Apple's wording for an unknown mount key.
			return "", a.fail("invalidArgument", "unknown mount option "+k)
		}
	}
	out := []string{}
	switch typ {
	case "virtiofs", "bind":
		abs, err := filepath.Abs(src)
		if err != nil {
			return "", failPlain(err.Error())
		}
		out = append(out, "type=bind", "source="+abs)
	case "volume":
		if src == "" {
			// No source: an anonymous volume (Parser.mount).
			src = newUUID()
			plan.anon = append(plan.anon, src)
		} else {
			plan.volumes = append(plan.volumes, src)
		}
		if !hasOption(strings.Join(extra, ","), "readonly") {
			plan.rwVolumes = append(plan.rwVolumes, src)
		}
		out = append(out, "type=volume", "source="+src)
	case "tmpfs":
		out = append(out, "type=tmpfs")
	default:
		return "", a.fail("invalidArgument", "unsupported mount type "+typ)
	}
	out = append(out, "destination="+dst)
	plan.mounts = append(plan.mounts, mountSpec{dst, apple})
	return strings.Join(append(out, extra...), ","), nil
}

// ensureVolumes creates the missing named volumes and the anonymous ones,
// as Utility.getOrCreateVolume does: a named one it had to create is
// logged from 0.10.0 (log.warning "named volume was automatically
// created" with the volume as metadata, which StderrLogHandler prints
// after the message; nothing before); an anonymous one is made with the
// label com.apple.container.resource.anonymous="" (Volume.anonymousLabel,
// 0.8.0–1.2.2).
func (a *app) ensureVolumes(plan *createPlan) error {
	if len(plan.volumes) > 0 {
		have, err := a.eng.inspectVolumes(plan.volumes...)
		if err != nil {
			return err
		}
		exists := map[string]bool{}
		for _, v := range have {
			exists[v.Name] = true
		}
		for _, name := range plan.volumes {
			if exists[name] {
				continue
			}
			exists[name] = true
			if r := a.eng.run("volume", "create", name); !r.ok() {
				if r.contains("already exists") {
					continue
				}
				return a.failCause("internalError", "failed to create volume "+name, r.message()) // reconstructed
			}
			if a.v.AtLeast("0.10.0") {
				fmt.Fprintf(a.stderr, "named volume was automatically created: [\"volume\": %s]\n", name)
			}
		}
	}
	for _, name := range plan.anon {
		labels, _ := json.Marshal(map[string]string{anonymousLabel: ""})
		if r := a.eng.run("volume", "create", "--label", labelLabels+"="+encodeJSONLabel(labels), name); !r.ok() {
			return a.failCause("internalError", "failed to create volume "+name, r.message()) // reconstructed
		}
	}
	return nil
}

// anonymousLabel marks an anonymous volume (Volume.anonymousLabel).
const anonymousLabel = "com.apple.container.resource.anonymous"

// runForeground runs the container attached: stdout/stderr pass through,
// stdin only with -i, and the CLI exits with the process's exit code.
// The container is created and initialised first (runc reports a missing
// executable there), so bootstrap failures get Apple's texts and the
// container is deleted, as Apple does.
func (a *app) runForeground(plan *createPlan) error {
	args := append([]string{"create"}, plan.podArgs...)
	args = append(args, plan.image)
	if r := a.eng.run(append(args, plan.args...)...); !r.ok() {
		if nameTaken(r) {
			return a.errCreateExists(plan.id)
		}
		a.removeOwn(plan)
		return a.bootstrapError(r)
	}
	if r := a.eng.run("init", plan.id); !r.ok() {
		a.removeOwn(plan)
		return a.bootstrapError(r)
	}
	if plan.cidfile != "" {
		if err := os.WriteFile(plan.cidfile, []byte(plan.id), 0o644); err != nil {
			return failPlain(err.Error())
		}
	}
	start := []string{"start", "--attach"}
	if plan.stdin {
		start = append(start, "--interactive")
	}
	cmd := a.eng.command(append(start, plan.id)...)
	if plan.stdin {
		cmd.Stdin = a.stdin
	}
	cmd.Stdout, cmd.Stderr = a.stdout, a.stderr
	stop := forwardSignals(func(sig os.Signal) {
		if cmd.Process != nil {
			_ = cmd.Process.Signal(sig)
		}
	})
	defer stop()
	return exitCode(exitStatus(cmd.Run()))
}

// nameTaken reports whether podman refused a create because the name is
// in use: podman words it differently depending on where the race is lost.
func nameTaken(r result) bool {
	return r.contains("already in use") || r.contains("name is in use") || r.contains("container already exists")
}

// removeOwn deletes the container of a failed create, as Apple does, but
// only if this invocation created it: under the same name another caller
// may have won a race and own a healthy container.
func (a *app) removeOwn(plan *createPlan) {
	c, err := a.eng.inspectOne(plan.id)
	if err != nil || c == nil || c.Config.Labels[labelCreator] != plan.creator {
		return
	}
	_ = a.eng.run("rm", "-f", "-t", "0", plan.id)
}

// newToken returns a random hex token.
func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
