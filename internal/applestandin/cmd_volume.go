package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/internal/applecli"
	"github.com/sandbox-mcp/sandbox-mcp/internal/loopdisk"
)

// Private volume labels: Apple's size and options (podman's --opt would
// interpret them as mount options).
const (
	labelVolSize = labelPrefix + "size"
	labelVolOpts = labelPrefix + "opts" // JSON object
)

// errVolumeNotFound is volume inspect's error for missing names: from
// 1.0.0 notFound "volume not found: <names>" (VolumeInspect.swift: the
// missing names sorted, joined by ", "); before, the server's
// VolumeError.volumeNotFound for the first one, which XPCServer sends as
// invalidArgument with its description "volume '<name>' not found".
func (a *app) errVolumeNotFound(names ...string) error {
	if oneX(a.v) {
		sorted := append([]string(nil), names...)
		sort.Strings(sorted)
		return a.fail("notFound", "volume not found: "+strings.Join(sorted, ", "))
	}
	return a.fail("invalidArgument", "volume '"+names[0]+"' not found")
}

// cmdVolumeCreate creates a named volume and prints its name
// (VolumeCreate.swift and VolumesService._create, 0.8.0–1.2.2). Labels and
// --opt options are parseKeyValuePairs; -s is the "size" option. The
// server checks the name, then that it is new, then reads the size with
// Measurement.parse (bytes without a unit; at least 1 MiB; 512 GiB when
// absent). The volume is an ext4 image of that size where the host allows
// (volume_disk.go). Its VolumeErrors come back as invalidArgument with their
// descriptions, other errors as unknown (XPCServer.swift).
func cmdVolumeCreate(a *app, p *parsed) error {
	name := p.Pos[0]
	if err := a.up(); err != nil {
		return err
	}
	if !validVolumeName(name) {
		// VolumeError.invalidVolumeName wraps the whole message in its own
		// description: "invalid volume name '<message>'".
		return a.fail("invalidArgument", "invalid volume name 'invalid volume name '"+name+"': must match "+volumeNamePattern+"'")
	}
	if have, err := a.eng.inspectVolumes(name); err != nil {
		return err
	} else if len(have) > 0 {
		return a.fail("invalidArgument", "volume '"+name+"' already exists")
	}
	opts := parseKeyValuePairs(p.Vals("opt"))
	if s := p.Val("s", ""); s != "" {
		opts["size"] = s
	}
	size := defaultVolumeSize
	if s, ok := opts["size"]; ok {
		n, err := sizeBytes(s)
		if err != nil {
			return a.fail("unknown", err.Error())
		}
		if n < 1<<20 {
			return a.fail("invalidArgument", "storage error: volume size too small: minimum 1MiB")
		}
		size = n
	}
	// Apple's labels and options are kept as JSON: a key such as "k=" (what
	// "--label k=" makes) would not survive podman's own key=value split.
	// podman reads a volume's --label as CSV, so the JSON travels encoded.
	labelsJSON, _ := json.Marshal(parseKeyValuePairs(p.Vals("label")))
	optsJSON, _ := json.Marshal(opts)
	args := []string{"volume", "create",
		"--label", labelLabels + "=" + encodeJSONLabel(labelsJSON),
		"--label", labelVolOpts + "=" + encodeJSONLabel(optsJSON),
		"--label", labelVolSize + "=" + strconv.FormatInt(size, 10)}
	// An ext4 image of that size, as Apple's volumes are (volume_disk.go).
	disk, img, err := a.makeVolumeImage(name, size)
	if err != nil {
		return a.failCause("internalError", "failed to create volume "+name, err.Error()) // reconstructed
	}
	r := a.eng.run(append(append(args, disk...), name)...)
	if !r.ok() {
		if img != "" {
			loopdisk.Detach(img)
		}
		if r.contains("already exists") {
			return a.fail("invalidArgument", "volume '"+name+"' already exists")
		}
		return a.failCause("internalError", "failed to create volume "+name, r.message()) // reconstructed
	}
	fmt.Fprintln(a.stdout, name)
	return nil
}

// volumeNamePattern is VolumeStorage.volumeNamePattern.
const volumeNamePattern = applecli.VolumeNamePattern

func validVolumeName(name string) bool { return applecli.ValidVolumeName(name) }

// volumeOptions are the volume's driver options as Apple shows them.
func volumeOptions(labels map[string]string) map[string]string {
	opts := map[string]string{}
	_ = json.Unmarshal(decodeJSONLabel(labels[labelVolOpts]), &opts)
	return opts
}

// volumeJSON renders a volume: 1.x VolumeResource {id, configuration{…}}
// (VolumeResource.swift, VolumeConfiguration.swift), 0.x the flat Volume
// with createdAt (Volume.swift). A date is a value the encoder formats:
// the caller's encoding decides (volumeDate).
func (a *app) volumeJSON(v podVolume) *Obj { return a.volumeJSONDated(v, a.dateValue(v.CreatedAt)) }

// volumeJSONDated is volumeJSON with the date value given.
func (a *app) volumeJSONDated(v podVolume, created any) *Obj {
	opts := volumeOptions(v.Labels)
	size := defaultVolumeSize
	if n := volumeImageSize(v.Labels); n >= 0 {
		size = n
	} else if n, err := strconv.ParseInt(v.Labels[labelVolSize], 10, 64); err == nil {
		size = n
	}
	labels := containerLabels(v.Labels)
	if oneX(a.v) {
		return NewObj().Set("configuration", NewObj().
			Set("creationDate", created).
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
		Set("createdAt", created).
		Set("sizeInBytes", size).
		Set("labels", labels).
		Set("source", volumeSource(v.Name))
}

// cmdVolumeList lists volumes as a table, names (-q) or JSON.
func cmdVolumeList(a *app, p *parsed) error {
	format, err := a.checkFormat(p)
	if err != nil {
		return err
	}
	if err := a.up(); err != nil {
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
	case p.Has("quiet"):
		for _, v := range vols {
			fmt.Fprintln(a.stdout, v.Name)
		}
	default:
		// Before 1.0.0 the table is sorted newest first (VolumeList.swift@0.12.3);
		// from 1.0.0 it keeps the list's order.
		if !oneX(a.v) {
			sort.SliceStable(vols, func(i, j int) bool { return vols[i].CreatedAt.After(vols[j].CreatedAt) })
		}
		rows := [][]string{{"NAME", "TYPE", "DRIVER", "OPTIONS"}}
		for _, v := range vols {
			typ := "named"
			if _, anon := containerLabels(v.Labels)[anonymousLabel]; anon {
				typ = "anonymous"
			}
			var opts []string
			for k, val := range volumeOptions(v.Labels) {
				opts = append(opts, k+"="+val)
			}
			sort.Strings(opts)
			rows = append(rows, []string{v.Name, typ, "local", strings.Join(opts, ",")})
		}
		fmt.Fprintln(a.stdout, renderTable(rows))
	}
	return nil
}

// cmdVolumeInspect prints volumes as JSON, pretty-printed with sorted
// keys and ISO-8601 dates in every release (VolumeInspect.swift: its own
// encoder options before 1.0.0, Output's .pretty from 1.0.0). 1.x takes
// the listed volumes whose names are given, once each, in the list's
// order, and fails for missing ones first; 0.x inspects each name in
// turn and stops at the first missing one.
func cmdVolumeInspect(a *app, p *parsed) error {
	if err := a.up(); err != nil {
		return err
	}
	names := p.Pos
	if oneX(a.v) {
		names = uniq(names)
	}
	vols, err := a.eng.inspectVolumes(uniq(names)...)
	if err != nil {
		return err
	}
	byName := map[string]podVolume{}
	for _, v := range vols {
		byName[v.Name] = v
	}
	var missing []string
	for _, n := range names {
		if _, ok := byName[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return a.errVolumeNotFound(missing...)
	}
	if oneX(a.v) {
		sort.SliceStable(vols, func(i, j int) bool { return vols[i].CreatedAt.Before(vols[j].CreatedAt) })
		names = nil
		for _, v := range vols {
			names = append(names, v.Name)
		}
	}
	arr := []any{}
	for _, n := range names {
		arr = append(arr, a.volumeJSONDated(byName[n], isoDate(byName[n].CreatedAt)))
	}
	enc := Encoding{Sorted: true, EscapeSlash: escapeSlashes(a.v)}
	_, _ = a.stdout.Write(append(enc.Pretty(arr), '\n'))
	return nil
}

// cmdVolumeDelete removes volumes and prints their names
// (Volume/VolumeDelete.swift, 0.8.0–1.2.2). Every named volume must
// exist, else nothing is deleted and notFound "failed to delete one or
// more volumes: <Set>" is the error; each failing delete is logged and
// they end in internalError "delete failed for one or more volumes:
// <[String]>". A volume that any container (running or not) mounts
// cannot go (VolumesService._delete: VolumeError.volumeInUse).
func cmdVolumeDelete(a *app, p *parsed) error {
	if a.v.AtLeast("1.0.0") {
		// VolumeDelete.validate(), 1.0.0–1.2.2 (before, no names and no
		// --all deleted nothing, and --all won over names).
		switch {
		case len(p.Pos) == 0 && !p.Has("all"):
			return a.fail("invalidArgument", "no volumes specified and --all not supplied")
		case len(p.Pos) > 0 && p.Has("all"):
			return a.fail("invalidArgument", "explicitly supplied volume name(s) conflict with the --all flag")
		}
	}
	if err := a.up(); err != nil {
		return err
	}
	vols, err := a.eng.listVolumes()
	if err != nil {
		return err
	}
	var names []string
	if p.Has("all") {
		for _, v := range vols {
			names = append(names, v.Name)
		}
	} else {
		exists := map[string]bool{}
		for _, v := range vols {
			exists[v.Name] = true
		}
		seen := map[string]bool{}
		var missing []string
		for _, n := range p.Pos {
			if seen[n] {
				continue
			}
			seen[n] = true
			names = append(names, n)
			if !exists[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return a.errVolumesMissing(missing)
		}
	}
	labels := map[string]map[string]string{}
	for _, v := range vols {
		labels[v.Name] = v.Labels
	}
	var failed []string
	for _, n := range names {
		r := a.eng.run("volume", "rm", n)
		switch {
		case r.ok():
			removeVolumeImage(labels[n])
			fmt.Fprintln(a.stdout, n)
		case r.contains("no such volume") || r.contains("no volume with name"):
			// Gone meanwhile: the server's volumeNotFound.
			a.logVolumeDeleteFailure(n, coded("invalidArgument", "volume '"+n+"' not found"))
			failed = append(failed, n)
		case r.contains("being used") || r.contains("in use"):
			// VolumeError.volumeInUse, which the XPC server sends as invalidArgument
			// with its description (XPCServer.swift, 0.8.0–1.2.2).
			a.logVolumeDeleteFailure(n, volumeInUseDesc(n))
			failed = append(failed, n)
		default:
			a.logVolumeDeleteFailure(n, coded("internalError", r.message())) // reconstructed
			failed = append(failed, n)
		}
	}
	if len(failed) > 0 {
		return a.errVolumesDeleteFailed(failed)
	}
	return nil
}

// errVolumesDeleteFailed is volume delete's error once deletes failed:
// internalError "delete failed for one or more volumes: <[String]>"; the
// reason is only in the log lines before it.
func (a *app) errVolumesDeleteFailed(names []string) error {
	return a.fail("internalError", "delete failed for one or more volumes: "+swiftArray(names))
}

// volumeInUseDesc is VolumeError.volumeInUse as the client describes it
// after the XPC round trip (VolumeConfiguration.swift, XPCServer.swift).
func volumeInUseDesc(name string) string {
	return coded("invalidArgument", "volume '"+name+"' is currently in use and cannot be accessed by another container, or deleted")
}

// errVolumesMissing is volume delete's notFound error; Swift prints the
// Set of names as ["a", "b"] (in hash order; sorted here).
func (a *app) errVolumesMissing(names []string) error {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	return a.fail("notFound", "failed to delete one or more volumes: "+swiftSet(sorted))
}

// logVolumeDeleteFailure is the log line of one failed volume delete, as
// StderrLogHandler prints it (message, then ": " and the metadata
// dictionary): 0.8–0.9 logged "failed to delete volume <id>: <error>",
// 0.10.0–1.2.2 "failed to delete volume" with id and error as metadata.
// reconstructed: Swift prints a dictionary in hash order; id comes first here.
func (a *app) logVolumeDeleteFailure(name, errDesc string) {
	if a.v.Before("0.10.0") {
		fmt.Fprintf(a.stderr, "failed to delete volume %s: %s\n", name, errDesc)
		return
	}
	fmt.Fprintf(a.stderr, "failed to delete volume: [\"id\": %s, \"error\": %s]\n", name, errDesc)
}
