package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Private volume labels: Apple's size and options (podman's --opt would
// interpret them as mount options).
const (
	labelVolSize = labelPrefix + "size"
	labelVolOpt  = labelPrefix + "opt."
)

// volumeCommands is the `container volume` group.
func volumeCommands(v Version) map[string]handler {
	list := func(n string) handler {
		return handler{&cmdSpec{
			path:  "container volume " + n,
			usage: "container volume " + n + " [--format <format>] [--quiet]",
			opts:  []opt{option("format", "--format"), flag("-q", "--quiet")},
		}, cmdVolumeList}
	}
	del := func(n string) handler {
		return handler{&cmdSpec{
			path:  "container volume " + n,
			usage: "container volume " + n + " [--all] [<names> ...]",
			opts:  []opt{flag("-a", "--all")},
		}, cmdVolumeDelete}
	}
	return map[string]handler{
		"create": {&cmdSpec{
			path:  "container volume create",
			usage: "container volume create [--label <label> ...] [--opt <opt> ...] [-s <s>] <name>",
			// --label is parsed by parseVolumeLabels: Utility.parseKeyValuePairs
			// (VolumeCreate.swift, Utility.swift), 0.4.0–1.2.2.
			opts: []opt{option("label", "--label"), option("opt", "--opt"), option("s", "-s")},
			args: []string{"<name>"},
		}, cmdVolumeCreate},
		"list": list("list"),
		"ls":   list("ls"),
		"inspect": {&cmdSpec{
			path:  "container volume inspect",
			usage: "container volume inspect <names> ...",
			args:  []string{"<names>"},
		}, cmdVolumeInspect},
		"delete": del("delete"),
		"rm":     del("rm"),
	}
}

// errVolumeNotFound is `volume not found: X` (1.x) / `volume 'X' not found` (0.x).
func (a *app) errVolumeNotFound(name string) error {
	if a.v.oneX() {
		return a.fail("notFound", "volume not found: "+name)
	}
	return failPlain("volume '" + name + "' not found")
}

// cmdVolumeCreate creates a named volume and prints its name.
func cmdVolumeCreate(a *app, p *parsed) error {
	name := p.pos[0]
	if err := a.up("failed to create volume"); err != nil {
		return err
	}
	args := []string{"volume", "create"}
	// Apple's volume labels are kept as JSON: a key such as "k=" (what
	// "--label k=" makes) would not survive podman's own key=value split.
	labelsJSON, _ := json.Marshal(parseVolumeLabels(p.vals["label"]))
	args = append(args, "--label", labelLabels+"="+string(labelsJSON))
	opts := map[string]string{}
	for _, o := range p.vals["opt"] {
		k, v, _ := strings.Cut(o, "=")
		opts[k] = v
	}
	if s := p.val("s", ""); s != "" {
		opts["size"] = s
	}
	if s, ok := opts["size"]; ok {
		n, ok := parseSize(s)
		if !ok {
			// reconstructed
			return a.fail("invalidArgument", "invalid size "+s)
		}
		args = append(args, "--label", labelVolSize+"="+strconv.FormatInt(n, 10))
	}
	for k, v := range opts {
		args = append(args, "--label", labelVolOpt+k+"="+v)
	}
	r := a.eng.run(append(args, name)...)
	if !r.ok() {
		if r.contains("already exists") {
			// reconstructed: mirrors the not-found wording of each era.
			if a.v.oneX() {
				return a.fail("exists", "volume already exists: "+name)
			}
			return failPlain("volume '" + name + "' already exists")
		}
		return a.failCause("internalError", "failed to create volume "+name, r.message())
	}
	fmt.Fprintln(a.stdout, name)
	return nil
}

// volumeJSON renders a volume: 1.x {id, configuration{…}}, 0.x flat.
func (a *app) volumeJSON(v podVolume) *Obj {
	opts := map[string]string{}
	for k, val := range v.Labels {
		if o, ok := strings.CutPrefix(k, labelVolOpt); ok {
			opts[o] = val
		}
	}
	size := defaultVolumeSize
	if n, err := strconv.ParseInt(v.Labels[labelVolSize], 10, 64); err == nil {
		size = n
	}
	labels := containerLabels(v.Labels)
	if a.v.oneX() {
		return NewObj().Set("configuration", NewObj().
			Set("creationDate", isoDate(v.CreatedAt)).
			Set("driver", "local").
			Set("format", "ext4").
			Set("labels", labels).
			Set("name", v.Name).
			Set("options", opts).
			Set("sizeInBytes", size).
			Set("source", volumeSource(v.Name))).
			Set("id", v.Name)
	}
	return NewObj().
		Set("format", "ext4").
		Set("options", opts).
		Set("name", v.Name).
		Set("driver", "local").
		Set("createdAt", appleSeconds(v.CreatedAt)).
		Set("sizeInBytes", size).
		Set("labels", labels).
		Set("source", volumeSource(v.Name))
}

// cmdVolumeList lists volumes as a table, names (-q) or JSON.
func cmdVolumeList(a *app, p *parsed) error {
	format, err := a.checkFormat(&cmdSpec{path: "container volume list", usage: "container volume list [--format <format>] [--quiet]"}, p)
	if err != nil {
		return err
	}
	if err := a.up("failed to list volumes"); err != nil {
		return err
	}
	vols, err := a.eng.listVolumes()
	if err != nil {
		return err
	}
	sort.Slice(vols, func(i, j int) bool { return vols[i].CreatedAt.Before(vols[j].CreatedAt) })
	switch {
	case format == "json":
		arr := []any{}
		for _, v := range vols {
			arr = append(arr, a.volumeJSON(v))
		}
		a.printJSON(arr, false)
	case p.has("quiet"):
		for _, v := range vols {
			fmt.Fprintln(a.stdout, v.Name)
		}
	default:
		rows := [][]string{{"NAME", "TYPE", "DRIVER", "OPTIONS"}}
		for _, v := range vols {
			typ := "named"
			if strings.HasPrefix(v.Name, "anon-") {
				typ = "anonymous"
			}
			var opts []string
			for k, val := range v.Labels {
				if o, ok := strings.CutPrefix(k, labelVolOpt); ok {
					opts = append(opts, o+"="+val)
				}
			}
			sort.Strings(opts)
			rows = append(rows, []string{v.Name, typ, "local", strings.Join(opts, ",")})
		}
		fmt.Fprintln(a.stdout, renderTable(rows))
	}
	return nil
}

// cmdVolumeInspect prints volumes as JSON; a missing name is an error.
func cmdVolumeInspect(a *app, p *parsed) error {
	if err := a.up("failed to list volumes"); err != nil {
		return err
	}
	vols, err := a.eng.inspectVolumes(p.pos...)
	if err != nil {
		return err
	}
	byName := map[string]podVolume{}
	for _, v := range vols {
		byName[v.Name] = v
	}
	arr := []any{}
	for _, n := range p.pos {
		v, ok := byName[n]
		if !ok {
			return a.errVolumeNotFound(n)
		}
		arr = append(arr, a.volumeJSON(v))
	}
	a.printJSON(arr, true)
	return nil
}

// cmdVolumeDelete removes volumes and prints their names.
func cmdVolumeDelete(a *app, p *parsed) error {
	if err := a.up("failed to delete volume"); err != nil {
		return err
	}
	names := p.pos
	if p.has("all") {
		vols, err := a.eng.listVolumes()
		if err != nil {
			return err
		}
		names = nil
		for _, v := range vols {
			names = append(names, v.Name)
		}
	}
	if len(names) == 0 {
		// reconstructed
		return a.fail("invalidArgument", "no volumes specified and --all not supplied")
	}
	for _, n := range names {
		r := a.eng.run("volume", "rm", n)
		if !r.ok() {
			if r.contains("no such volume") || r.contains("no volume with name") {
				return a.errVolumeNotFound(n)
			}
			if r.contains("being used") || r.contains("in use") {
				// VolumeError.volumeInUse's text (ContainerResource/Volume/VolumeConfiguration.swift).
				return a.fail("invalidState", "volume '"+n+"' is currently in use and cannot be accessed by another container, or deleted")
			}
			return a.failCause("internalError", "failed to delete volume "+n, r.message())
		}
		fmt.Fprintln(a.stdout, n)
	}
	return nil
}
