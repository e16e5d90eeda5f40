package main

import "strings"

// Image references. Apple stores every image under a fully qualified,
// normalised reference (`mcp-dev` -> `docker.io/library/mcp-dev:latest`);
// podman keeps local builds and imports under `localhost/…`. These helpers
// translate between the two.

const dockerHub = "docker.io"

// registryDomain is the default registry domain the emulated system is
// configured with (CONTAINER_STANDIN_REGISTRY_DOMAIN): the UserDefaults
// key registry.domain before 1.0, config.toml's [registry] domain from
// 1.0; docker.io unless set.
var registryDomain = dockerHub

// isDockerHub is the domain test of Reference.normalize (containerization
// Reference.swift): only these get "library/" added.
func isDockerHub(domain string) bool { return domain == dockerHub || domain == "registry-1.docker.io" }

// splitRef splits a reference into domain, path and tag-or-digest suffix
// (":tag" or "@sha256:…", "" when absent).
func splitRef(ref string) (domain, path, suffix string) {
	name := ref
	if i := strings.Index(name, "@"); i >= 0 {
		name, suffix = name[:i], name[i:]
	} else if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, suffix = name[:i], name[i:]
	}
	// Reference.parseDomain (containerization Reference.swift): the part
	// before the first '/' is a domain when it starts with "localhost" or
	// holds '.' or ':'.
	if i := strings.Index(name, "/"); i >= 0 {
		first := name[:i]
		if strings.ContainsAny(first, ".:") || strings.HasPrefix(first, "localhost") {
			return first, name[i+1:], suffix
		}
	}
	return "", name, suffix
}

// normalizeRef returns Apple's fully qualified form of ref
// (ClientImage.normalizeReference): the configured domain when it has
// none, "library/" for a one-part Docker Hub path, ":latest" when there
// is no tag or digest.
func normalizeRef(ref string) string {
	domain, path, suffix := splitRef(ref)
	if domain == "" {
		domain = registryDomain
	}
	if isDockerHub(domain) && !strings.Contains(path, "/") {
		path = "library/" + path
	}
	if suffix == "" {
		suffix = ":latest"
	}
	return domain + "/" + path + suffix
}

// displayRef is the short form Apple prints in tables and `-q` output
// (ClientImage.denormalizeReference): the configured domain dropped, and
// "library/" with it when that is Docker Hub
// (`docker.io/library/alpine:latest` -> `alpine:latest`).
func displayRef(full string) string {
	s, ok := strings.CutPrefix(full, registryDomain+"/")
	if !ok {
		return full
	}
	if isDockerHub(registryDomain) {
		s = strings.TrimPrefix(s, "library/")
	}
	return s
}

// refNameTag splits a display reference into NAME and TAG columns.
func refNameTag(display string) (name, tag string) {
	_, _, suffix := splitRef(display)
	name = strings.TrimSuffix(display, suffix)
	if strings.HasPrefix(suffix, ":") {
		return name, suffix[1:]
	}
	return name, "<none>"
}

// podmanCandidates lists the podman references an Apple reference may live
// under, preferred first: Docker Hub names are looked up under localhost/
// first (where local builds and imports live), then as they are.
func podmanCandidates(full string) []string {
	domain, path, suffix := splitRef(full)
	if domain == dockerHub {
		local := strings.TrimPrefix(path, "library/")
		return []string{"localhost/" + local + suffix, full}
	}
	return []string{full}
}

// podmanTag is where a build tagged with an Apple reference is stored.
func podmanTag(full string) string { return podmanCandidates(full)[0] }

// appleFromPodman converts a podman reference back to Apple's form
// (`localhost/mcp-dev:latest` -> `docker.io/library/mcp-dev:latest`).
func appleFromPodman(ref string) string {
	if rest, ok := strings.CutPrefix(ref, "localhost/"); ok {
		return normalizeRef(rest)
	}
	return normalizeRef(ref)
}
