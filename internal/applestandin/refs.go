package main

import "strings"

// Image references. Apple stores every image under a fully qualified,
// normalised reference (`mcp-dev` -> `docker.io/library/mcp-dev:latest`);
// podman keeps local builds and imports under `localhost/…`. These helpers
// translate between the two.

const dockerHub = "docker.io"

// splitRef splits a reference into domain, path and tag-or-digest suffix
// (":tag" or "@sha256:…", "" when absent).
func splitRef(ref string) (domain, path, suffix string) {
	name := ref
	if i := strings.Index(name, "@"); i >= 0 {
		name, suffix = name[:i], name[i:]
	} else if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, suffix = name[:i], name[i:]
	}
	if i := strings.Index(name, "/"); i >= 0 {
		first := name[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" {
			return first, name[i+1:], suffix
		}
	}
	return "", name, suffix
}

// normalizeRef returns Apple's fully qualified form of ref.
func normalizeRef(ref string) string {
	domain, path, suffix := splitRef(ref)
	if domain == "" {
		domain = dockerHub
	}
	if domain == dockerHub && !strings.Contains(path, "/") {
		path = "library/" + path
	}
	if suffix == "" {
		suffix = ":latest"
	}
	return domain + "/" + path + suffix
}

// displayRef is the short form Apple prints in tables and `-q` output
// (`docker.io/library/alpine:latest` -> `alpine:latest`).
func displayRef(full string) string {
	if s, ok := strings.CutPrefix(full, dockerHub+"/library/"); ok {
		return s
	}
	if s, ok := strings.CutPrefix(full, dockerHub+"/"); ok {
		return s
	}
	return full
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
