package main

import "testing"

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
	a, out, _ = testApp("1.2.2")
	if code := a.finish(a.dispatch([]string{"system", "property", "list", "--format", "json"})); code != 0 || out.String() != `{"registry":{"domain":"ghcr.io"}}`+"\n" {
		t.Errorf("1.2.2 list: %d %q", code, out.String())
	}
	a, _, errb := testApp("1.2.2")
	if code := a.finish(a.dispatch([]string{"system", "property", "get", "registry.domain"})); code != 64 {
		t.Errorf("1.2.2 has no property get: %d %q", code, errb.String())
	}
}
