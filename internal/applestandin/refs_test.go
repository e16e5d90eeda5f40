package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestConfiguredRegistryDomain: references without a domain get the
// configured one (ClientImage.normalizeReference), and "library/" only on
// Docker Hub (Reference.normalize).
func TestConfiguredRegistryDomain(t *testing.T) {
	defer func(d string) { registryDomain = d }(registryDomain)
	registryDomain = "registry.example.com:5000"
	for in, want := range map[string]string{
		"alpine":                 "registry.example.com:5000/alpine:latest",
		"team/tool:1":            "registry.example.com:5000/team/tool:1",
		"docker.io/alpine":       "docker.io/library/alpine:latest",
		"registry-1.docker.io/x": "registry-1.docker.io/library/x:latest",
		"localhostish/x":         "localhostish/x:latest",
		"ghcr.io/a/b@sha256:ab":  "ghcr.io/a/b@sha256:ab",
	} {
		if got := normalizeRef(in); got != want {
			t.Errorf("normalizeRef(%q) = %q, want %q", in, got, want)
		}
	}
	for full, want := range map[string]string{
		"registry.example.com:5000/alpine:latest": "alpine:latest",
		"docker.io/library/alpine:latest":         "docker.io/library/alpine:latest",
	} {
		if got := displayRef(full); got != want {
			t.Errorf("displayRef(%q) = %q, want %q", full, got, want)
		}
	}
}

// TestPropertyCommands: 0.x reads the domain with `system property get
// registry.domain`, 1.x with `system property list --format json`.
func TestPropertyCommands(t *testing.T) {
	defer func(d string) { registryDomain = d }(registryDomain)
	registryDomain = "ghcr.io"
	a, out, _ := testApp("0.12.3")
	if code := a.finish(a.dispatch([]string{"system", "property", "get", "registry.domain"})); code != 0 || out.String() != "ghcr.io\n" {
		t.Errorf("0.12.3 get: %d %q", code, out.String())
	}
	// ContainerSystemConfig with its defaults at 1.2.2 (ContainerSystemConfig.swift,
	// MachineConfig.swift, MemorySize.swift; versions pinned in Package.swift).
	machine := fmt.Sprintf(`"machine":{"cpus":%d,"homeMount":"rw","memory":"%dgb","virtualization":false}`,
		max(hostCPUs()/2, 4), max(hostMemory()/2, 1<<30)>>30)
	want := `{"build":{"cpus":2,"image":"ghcr.io\/apple\/container-builder-shim\/builder:0.13.1","memory":"2048mb","rosetta":true},` +
		`"container":{"cpus":4,"memory":"1gb"},"dns":{},` +
		`"kernel":{"binaryPath":"opt\/kata\/share\/kata-containers\/vmlinux-6.18.15-186","digest":"sha256:f63d54507d1f18635d94475077e4c2330de4d8e05cedf25f7c38f063b0e66a91",` +
		`"url":"https:\/\/github.com\/kata-containers\/kata-containers\/releases\/download\/3.28.0\/kata-static-3.28.0-arm64.tar.zst"},` +
		machine + `,"network":{},"registry":{"domain":"ghcr.io"},"vminit":{"image":"ghcr.io\/apple\/containerization\/vminit:0.40.1"}}` + "\n"
	a, out, _ = testApp("1.2.2")
	if code := a.finish(a.dispatch([]string{"system", "property", "list", "--format", "json"})); code != 0 || out.String() != want {
		t.Errorf("1.2.2 list: %d\n%s\nwant\n%s", code, out.String(), want)
	}
	// 1.0.0: no kernel digest; the builder shim and containerization it pins.
	a, out, _ = testApp("1.0.0")
	if code := a.finish(a.dispatch([]string{"system", "property", "list", "--format", "json"})); code != 0 ||
		strings.Contains(out.String(), "digest") || !strings.Contains(out.String(), `builder:0.12.0"`) || !strings.Contains(out.String(), `vminit:0.33.3"`) {
		t.Errorf("1.0.0 list: %d %s", code, out.String())
	}
	a, _, errb := testApp("1.2.2")
	if code := a.finish(a.dispatch([]string{"system", "property", "get", "registry.domain"})); code != 64 {
		t.Errorf("1.2.2 has no property get: %d %q", code, errb.String())
	}
}
