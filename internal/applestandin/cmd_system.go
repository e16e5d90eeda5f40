package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// The stand-in's build identity (`--version` shows the 7-hex short form).
const (
	shortCommit = "0000000"
	fullCommit  = "0000000000000000000000000000000000000000"
	installRoot = "/usr/local/"
	// reconstructed: a plausible macOS version string for status' host.operatingSystem.
	hostOS = "Version 26.0 (Build 25A354)"
)

// cmdPropertyGet prints one property's value (0.5.0–0.12.x).
// reconstructed: only registry.domain is known to the stand-in; the other
// ids the CLI has are reported as unknown here.
func cmdPropertyGet(a *app, p *parsed) error {
	if p.Pos[0] != "registry.domain" {
		return a.fail("invalidArgument", "property ID "+p.Pos[0]+" not found")
	}
	fmt.Fprintln(a.stdout, registryDomain)
	return nil
}

// cmdPropertyList prints the system configuration (1.0.0–1.2.2,
// System/Property/PropertyList.swift): the ContainerSystemConfig that
// loadContainerSystemConfig makes, TOML by default or JSON (compact,
// sorted). reconstructed: the TOML layout (a third-party encoder).
func cmdPropertyList(a *app, p *parsed) error {
	if a.v.Before("1.0.0") {
		return failPlain("system property list before 1.0.0 is not supported by this stand-in")
	}
	// PropertyList.swift@1.0.0 loads the configuration, whose health check
	// fails with the bare connection error when the apiserver is down.
	if err := a.up(); err != nil {
		return err
	}
	cfg := a.systemConfig()
	switch p.Val("format", "toml") {
	case "json":
		a.printJSON(cfg, false)
	case "toml":
		fmt.Fprint(a.stdout, tomlTables(cfg))
	}
	return nil
}

// systemConfig is ContainerSystemConfig with its defaults
// (ContainerPersistence/ContainerSystemConfig.swift, MachineConfig.swift,
// MemorySize.swift at 1.0.0–1.2.2) and the configured registry domain:
// sizes are MemorySize's "<value><b|kb|mb|gb|tb|pb>"; the builder and
// vminit images carry the builder shim and containerization versions the
// release pins (Package.swift); kernel.digest is there from 1.2.0; dns'
// domain and network's subnets are nil by default, so left out; the
// machine defaults to half the host's CPUs (at least 4) and half its
// memory in whole GiB (at least 1).
func (a *app) systemConfig() *Obj {
	shim, cz := "0.13.1", "0.40.1" // 1.2.1–1.2.2; later releases are taken as these
	switch {
	case a.v.Before("1.1.0"):
		shim, cz = "0.12.0", "0.33.3"
	case a.v.Before("1.2.0"):
		shim, cz = "0.12.0", "0.35.0"
	case a.v.Before("1.2.1"):
		shim, cz = "0.13.0", "0.40.1"
	}
	kernel := NewObj().
		Set("binaryPath", "opt/kata/share/kata-containers/vmlinux-6.18.15-186").
		Set("url", "https://github.com/kata-containers/kata-containers/releases/download/3.28.0/kata-static-3.28.0-arm64.tar.zst").
		SetIf(a.v.AtLeast("1.2.0"), "digest", "sha256:f63d54507d1f18635d94475077e4c2330de4d8e05cedf25f7c38f063b0e66a91")
	return NewObj().
		Set("build", NewObj().Set("rosetta", true).Set("cpus", 2).Set("memory", "2048mb").
			Set("image", "ghcr.io/apple/container-builder-shim/builder:"+shim)).
		Set("container", NewObj().Set("cpus", 4).Set("memory", "1gb")).
		Set("dns", NewObj()).
		Set("kernel", kernel).
		Set("machine", NewObj().Set("cpus", max(hostCPUs()/2, 4)).
			Set("memory", strconv.FormatInt(max(hostMemory()/2, 1<<30)>>30, 10)+"gb").
			Set("homeMount", "rw").Set("virtualization", false)).
		Set("network", NewObj()).
		Set("registry", NewObj().Set("domain", registryDomain)).
		Set("vminit", NewObj().Set("image", "ghcr.io/apple/containerization/vminit:"+cz))
}

// tomlTables writes a configuration of one level of tables as TOML, keys
// sorted (Output.renderTOML sets .sortedKeys).
func tomlTables(cfg *Obj) string {
	var b strings.Builder
	keys := cfg.Keys()
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString("[" + k + "]\n")
		t, _ := cfg.Get(k)
		o, _ := t.(*Obj)
		if o == nil {
			continue
		}
		inner := o.Keys()
		sort.Strings(inner)
		for _, ik := range inner {
			v, _ := o.Get(ik)
			switch x := v.(type) {
			case string:
				fmt.Fprintf(&b, "%s = %q\n", ik, x)
			default:
				fmt.Fprintf(&b, "%s = %v\n", ik, x)
			}
		}
	}
	return b.String()
}

// cmdSystemStart clears the stopped marker (the system is then up),
// printing what SystemStart.swift prints on the way: before 0.10.0
// "Verifying apiserver is running..."; 0.10–0.12 "Registering API server
// with launchd..." first; from 1.0.0 "Launching container-apiserver..."
// and "Testing access to container-apiserver..." as log lines (stderr),
// then "Verifying machine API server is running..." (stdout in 1.0–1.1, a
// log line from 1.2.0). The init image and kernel are taken as installed.
func cmdSystemStart(a *app, p *parsed) error {
	say := func(text string, stderr bool) {
		w := a.stdout
		if stderr {
			w = a.stderr
		}
		fmt.Fprintln(w, text)
	}
	switch {
	case oneX(a.v):
		say("Launching container-apiserver...", true)
		say("Testing access to container-apiserver...", true)
	case a.v.AtLeast("0.10.0"):
		say("Registering API server with launchd...", false)
		say("Verifying apiserver is running...", false)
	default:
		say("Verifying apiserver is running...", false)
	}
	if a.forced != "" && a.systemDown() != "" {
		// The health check fails: internalError "failed to get a response
		// from apiserver: <error>", which holds the XPC error and so gets
		// the hint (1.x capture, samples §6.1).
		return a.errXPCText(coded("internalError", "failed to get a response from apiserver: "+coded("interrupted", "XPC connection error: Connection invalid")))
	}
	if oneX(a.v) {
		say("Verifying machine API server is running...", a.v.AtLeast("1.2.0"))
	}
	if a.home != "" {
		err := os.Remove(filepath.Join(a.home, stoppedMarker))
		switch {
		case err == nil:
			// The apiserver starts afresh: it loads every container with no
			// startedDate (startedDate).
			if err := os.WriteFile(filepath.Join(a.home, startedMarker), nil, 0o644); err != nil {
				return failPlain(err.Error())
			}
		case !os.IsNotExist(err):
			return failPlain(err.Error())
		}
	}
	return nil
}

// cmdSystemStop marks the system stopped. Containers are left alone:
// other tests may share the podman store.
func cmdSystemStop(a *app, p *parsed) error {
	if a.home == "" {
		return nil
	}
	if err := os.MkdirAll(a.home, 0o755); err != nil {
		return failPlain(err.Error())
	}
	if err := os.WriteFile(filepath.Join(a.home, stoppedMarker), nil, 0o644); err != nil {
		return failPlain(err.Error())
	}
	return nil
}

// apiserverVersion is the apiserver's version string for the version.
func (a *app) apiserverVersion() string {
	if nestedStatus(a.v) {
		return a.v.String()
	}
	return fmt.Sprintf("container-apiserver version %s (build: release, commit: %s)", a.v, shortCommit)
}

// cmdSystemStatus reports whether the apiserver runs (exit 1 when not).
func cmdSystemStatus(a *app, p *parsed) error {
	format, err := a.checkFormat(p)
	if err != nil {
		return err
	}
	down := a.systemDown()
	if format == "json" {
		a.printJSON(a.statusJSON(down), false)
	} else {
		fmt.Fprintln(a.stdout, a.statusText(down))
	}
	if down != "" {
		return exitCode(exitFailure)
	}
	return nil
}

// statusJSON is `system status --format json` (samples §4.1, §4.2).
func (a *app) statusJSON(down string) *Obj {
	if nestedStatus(a.v) {
		if down != "" {
			return NewObj().Set("status", down)
		}
		running, total, images := a.counts()
		return NewObj().
			Set("client", NewObj().Set("appName", "container").Set("build", "release").Set("commit", fullCommit).Set("version", a.v.String())).
			Set("host", NewObj().Set("architecture", archName()).Set("cpus", runtime.NumCPU()).Set("operatingSystem", hostOS)).
			Set("paths", NewObj().Set("appRoot", appRoot()).Set("installRoot", installRoot)).
			Set("resources", NewObj().Set("containersRunning", running).Set("containersTotal", total).Set("images", images)).
			Set("server", NewObj().Set("appName", "container-apiserver").Set("build", "release").Set("commit", fullCommit).Set("version", a.apiserverVersion())).
			Set("status", "running")
	}
	o := NewObj().Set("status", "running").Set("appRoot", appRoot()).Set("installRoot", installRoot).
		Set("apiServerVersion", a.apiserverVersion()).Set("apiServerCommit", fullCommit).
		Set("apiServerBuild", "release").Set("apiServerAppName", "container-apiserver")
	if down != "" {
		for _, k := range o.Keys() {
			o.Set(k, "")
		}
		o.Set("status", down)
	}
	return o
}

// counts returns running and total containers and tagged images.
func (a *app) counts() (running, total, images int) {
	if r := a.eng.run("ps", "-a", "--format", "json"); r.ok() {
		var ps []struct {
			State string `json:"State"`
		}
		_ = json.Unmarshal(r.stdout, &ps)
		for _, c := range ps {
			total++
			if strings.EqualFold(c.State, "running") {
				running++
			}
		}
	}
	if entries, err := a.listImages(); err == nil {
		images = len(entries)
	}
	return running, total, images
}

// statusText is the plain `system status` output.
func (a *app) statusText(down string) string {
	switch down {
	case "unregistered":
		return "apiserver is not running and not registered with launchd"
	case "not running":
		return "apiserver is not running"
	}
	switch {
	case a.v.Before("0.10.0"):
		// reconstructed from the 0.9.0 sources (samples §4.2).
		return "apiserver is running\n" +
			"application data root: " + appRoot() + "\n" +
			"application install root: " + installRoot + "\n" +
			"container-apiserver version: " + a.apiserverVersion() + "\n" +
			"container-apiserver commit: " + fullCommit
	case nestedStatus(a.v):
		// reconstructed: the 1.4+ table layout is unknown; keys follow the JSON.
		return renderTable([][]string{
			{"FIELD", "VALUE"}, {"status", "running"}, {"paths.appRoot", appRoot()},
			{"paths.installRoot", installRoot}, {"server.version", a.apiserverVersion()},
			{"server.commit", fullCommit}, {"server.build", "release"}, {"server.appName", "container-apiserver"},
		})
	}
	return renderTable([][]string{
		{"FIELD", "VALUE"}, {"status", "running"}, {"appRoot", appRoot()}, {"installRoot", installRoot},
		{"logRoot", ""}, {"apiserver.version", a.apiserverVersion()}, {"apiserver.commit", fullCommit},
		{"apiserver.build", "release"}, {"apiserver.appName", "container-apiserver"},
	})
}

// cmdSystemVersion lists the CLI and, when reachable, the apiserver.
func cmdSystemVersion(a *app, p *parsed) error {
	format, err := a.checkFormat(p)
	if err != nil {
		return err
	}
	up := a.systemDown() == ""
	if format == "json" {
		arr := []any{NewObj().Set("appName", "container").Set("buildType", "release").Set("commit", fullCommit).Set("version", a.v.String())}
		if up {
			arr = append(arr, NewObj().Set("appName", "container-apiserver").Set("buildType", "release").Set("commit", fullCommit).Set("version", a.apiserverVersion()))
		}
		a.printJSON(arr, false)
		return nil
	}
	// The table's COMMIT is VersionInfo.commit, the whole hash, as in the JSON
	// (SystemVersion.swift, 0.8.0–1.2.2).
	rows := [][]string{{"COMPONENT", "VERSION", "BUILD", "COMMIT"}, {"container", a.v.String(), "release", fullCommit}}
	if up {
		rows = append(rows, []string{"container-apiserver", a.apiserverVersion(), "release", fullCommit})
	}
	fmt.Fprintln(a.stdout, renderTable(rows))
	return nil
}
