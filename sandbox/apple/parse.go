package apple

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// appleEpoch is 2001-01-01T00:00:00Z, the reference date of the numbers
// that 0.x releases print for dates.
const appleEpoch = 978307200

// date is a point in time printed either as ISO-8601 (1.x) or as seconds
// since 2001-01-01 (0.x).
type date struct{ time.Time }

func (d *date) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if s == "" {
			return nil
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("date %q: %w", s, err)
		}
		d.Time = t
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("date %s: %w", b, err)
	}
	sec, frac := math.Modf(f)
	d.Time = time.Unix(int64(sec)+appleEpoch, int64(frac*1e9)).UTC()
	return nil
}

// attachment is a container's place on a network: ipv4Address from 0.8,
// address before.
type attachment struct {
	Network     string `json:"network"`
	Hostname    string `json:"hostname"`
	IPv4Address string `json:"ipv4Address"`
	Address     string `json:"address"`
}

func (a attachment) ip() string {
	s := a.IPv4Address
	if s == "" {
		s = a.Address
	}
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	return s
}

// statusField is `status`: an object with state, networks and startedDate
// from 1.0, a bare state string before.
type statusField struct {
	State       string       `json:"state"`
	Networks    []attachment `json:"networks"`
	StartedDate date         `json:"startedDate"`
}

func (s *statusField) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &s.State)
	}
	type plain statusField
	return json.Unmarshal(b, (*plain)(s))
}

type rawContainer struct {
	ID            string `json:"id"`
	Configuration struct {
		ID    string `json:"id"`
		Image struct {
			Reference string `json:"reference"`
		} `json:"image"`
		Labels    map[string]string `json:"labels"`
		Resources struct {
			CPUs          float64 `json:"cpus"`
			MemoryInBytes int64   `json:"memoryInBytes"`
		} `json:"resources"`
		CreationDate date `json:"creationDate"`
	} `json:"configuration"`
	Status statusField `json:"status"`
	// Before 1.0 networks and startedDate sat next to status.
	Networks    []attachment `json:"networks"`
	StartedDate date         `json:"startedDate"`
}

// ParseContainers reads the JSON array printed by `container list --format
// json` and `container inspect`, in every shape from 0.x to 1.5: status as
// a string or an object, networks at the top or under status, address or
// ipv4Address, dates as Apple-epoch numbers or ISO-8601, `\/` escapes and
// unknown fields.
func ParseContainers(b []byte) ([]sandbox.Container, error) {
	var raw []rawContainer
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("parse container JSON: %w", err)
	}
	out := make([]sandbox.Container, 0, len(raw))
	for _, r := range raw {
		id := r.ID
		if id == "" {
			id = r.Configuration.ID
		}
		if id == "" {
			return nil, errors.New("parse container JSON: an entry has no id")
		}
		nets := r.Status.Networks
		if len(nets) == 0 {
			nets = r.Networks
		}
		started := r.Status.StartedDate.Time
		if started.IsZero() {
			started = r.StartedDate.Time
		}
		c := sandbox.Container{
			Name:    id,
			ID:      id,
			Image:   r.Configuration.Image.Reference,
			State:   state(r.Status.State),
			Labels:  r.Configuration.Labels,
			Created: r.Configuration.CreationDate.Time,
			Started: started,
			CPUs:    r.Configuration.Resources.CPUs,
			Memory:  r.Configuration.Resources.MemoryInBytes,
		}
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		for _, n := range nets {
			ip := n.ip()
			if c.IP == "" {
				c.IP = ip
			}
			c.Networks = append(c.Networks, sandbox.Attachment{Network: n.Network, IP: ip})
		}
		// `--network none` leaves a running container on no network.
		c.NoNetwork = c.State == sandbox.StateRunning && len(nets) == 0
		out = append(out, c)
	}
	return out, nil
}

// ParseVolumeMounts reads `container list --all --format json` (any
// shape, 0.8 to 1.5) for the named volumes each container mounts: the
// mounts whose type is {"volume": {"name": …}} (Filesystem.FSType,
// ContainerResource/Container/Filesystem.swift, 0.8.0–1.2.2).
func ParseVolumeMounts(b []byte) (map[string][]string, error) {
	var raw []struct {
		ID            string `json:"id"`
		Configuration struct {
			ID     string `json:"id"`
			Mounts []struct {
				Type struct {
					Volume *struct {
						Name string `json:"name"`
					} `json:"volume"`
				} `json:"type"`
			} `json:"mounts"`
		} `json:"configuration"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("parse container JSON: %w", err)
	}
	out := map[string][]string{}
	for _, r := range raw {
		id := r.ID
		if id == "" {
			id = r.Configuration.ID
		}
		for _, m := range r.Configuration.Mounts {
			if m.Type.Volume != nil && m.Type.Volume.Name != "" {
				out[id] = append(out[id], m.Type.Volume.Name)
			}
		}
	}
	return out, nil
}

func state(s string) sandbox.State {
	switch strings.ToLower(s) {
	case "running":
		return sandbox.StateRunning
	case "stopped", "stopping":
		return sandbox.StateStopped
	default:
		return sandbox.StateUnknown
	}
}

// Image is one entry of `container image list`.
type Image struct {
	// Reference is the normalised name, e.g. docker.io/library/alpine:latest.
	Reference string
	// Digest is the index digest, e.g. sha256:28bd….
	Digest string
}

type rawImage struct {
	// 1.x
	ID            string `json:"id"`
	Configuration struct {
		Name       string `json:"name"`
		Descriptor struct {
			Digest string `json:"digest"`
		} `json:"descriptor"`
	} `json:"configuration"`
	// 0.x
	Reference  string `json:"reference"`
	Descriptor struct {
		Digest string `json:"digest"`
	} `json:"descriptor"`
}

// ParseImages reads `container image list --format json`: ImageResource
// entries from 1.0, {reference, descriptor} before.
func ParseImages(b []byte) ([]Image, error) {
	var raw []rawImage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("parse image JSON: %w", err)
	}
	out := make([]Image, 0, len(raw))
	for _, r := range raw {
		img := Image{Reference: r.Configuration.Name, Digest: r.Configuration.Descriptor.Digest}
		if img.Reference == "" {
			img.Reference, img.Digest = r.Reference, r.Descriptor.Digest
		}
		if img.Digest == "" && r.ID != "" {
			img.Digest = "sha256:" + r.ID
		}
		if img.Reference == "" {
			return nil, errors.New("parse image JSON: an entry has no name")
		}
		out = append(out, img)
	}
	return out, nil
}

// DefaultRegistryDomain is the registry Apple's CLI puts in front of a
// reference without one unless configured otherwise
// (DefaultsStore registry.domain before 1.0, RegistryConfig.defaultDomain
// from 1.0).
const DefaultRegistryDomain = "docker.io"

// NormalizeReference spells an image reference the way Apple's CLI stores
// it (ClientImage.normalizeReference, with containerization's
// Reference.parse and normalize): a reference whose first '/'-separated
// part neither starts with "localhost" nor holds '.' or ':' gets the
// configured default registry domain in front; a Docker Hub one
// (docker.io or registry-1.docker.io) with a one-part path gets
// "library/"; one with neither tag nor digest gets ":latest"; one with
// both keeps the tag only. An empty domain is DefaultRegistryDomain
// ("mcp-dev" → "docker.io/library/mcp-dev:latest").
func NormalizeReference(ref, domain string) string {
	if domain == "" {
		domain = DefaultRegistryDomain
	}
	if host, _, _, _ := splitReference(ref); host == "" {
		ref = domain + "/" + ref
	}
	host, path, tag, digest := splitReference(ref)
	if (host == "docker.io" || host == "registry-1.docker.io") && !strings.Contains(path, "/") {
		path = "library/" + path
	}
	name := path
	if host != "" {
		name = host + "/" + path
	}
	switch {
	case tag != "":
		return name + tag
	case digest != "":
		return name + digest
	}
	return name + ":latest"
}

// splitReference splits an image reference into its domain (empty when
// the first part is not one), path, ":tag" and "@digest".
func splitReference(ref string) (host, path, tag, digest string) {
	name := ref
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		name, digest = ref[:i], ref[i:]
	}
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name, tag = name[:i], name[i:]
	}
	if first, rest, ok := strings.Cut(name, "/"); ok && first != "" && rest != "" &&
		(strings.HasPrefix(first, "localhost") || strings.ContainsAny(first, ".:")) {
		return first, rest, tag, digest
	}
	return "", name, tag, digest
}

// ContainerStats is one entry of `container stats --format json`. Every
// field is optional since 0.9.0; absent ones are zero.
type ContainerStats struct {
	ID               string `json:"id"`
	MemoryUsageBytes int64  `json:"memoryUsageBytes"`
	MemoryLimitBytes int64  `json:"memoryLimitBytes"`
	CPUUsageUsec     int64  `json:"cpuUsageUsec"`
	NetworkRxBytes   int64  `json:"networkRxBytes"`
	NetworkTxBytes   int64  `json:"networkTxBytes"`
	BlockReadBytes   int64  `json:"blockReadBytes"`
	BlockWriteBytes  int64  `json:"blockWriteBytes"`
	NumProcesses     int    `json:"numProcesses"`
}

// ParseStats reads `container stats --format json --no-stream`.
func ParseStats(b []byte) ([]ContainerStats, error) {
	var out []ContainerStats
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("parse stats JSON: %w", err)
	}
	return out, nil
}

// SystemStatus is what `container system status --format json` says.
type SystemStatus struct {
	// Status is "running", "not running" or "unregistered".
	Status string
	// ServerVersion is the apiserver's version as printed (a bare version
	// from 1.4, a whole "container-apiserver version …" line before).
	ServerVersion string
	AppRoot       string
}

// Running reports whether the container system answers.
func (s SystemStatus) Running() bool { return s.Status == "running" }

// ParseSystemStatus reads `system status --format json`: flat before 1.4
// ({status, apiServerVersion, appRoot, …}), nested from 1.4 ({status,
// server{version}, paths{appRoot}, …}), and the minimal {status} a stopped
// system prints.
func ParseSystemStatus(b []byte) (SystemStatus, error) {
	var raw struct {
		Status           string `json:"status"`
		APIServerVersion string `json:"apiServerVersion"`
		AppRoot          string `json:"appRoot"`
		Server           struct {
			Version string `json:"version"`
		} `json:"server"`
		Paths struct {
			AppRoot string `json:"appRoot"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return SystemStatus{}, fmt.Errorf("parse system status JSON: %w", err)
	}
	if raw.Status == "" {
		return SystemStatus{}, errors.New("parse system status JSON: no status field")
	}
	s := SystemStatus{Status: raw.Status, ServerVersion: raw.Server.Version, AppRoot: raw.Paths.AppRoot}
	if s.ServerVersion == "" {
		s.ServerVersion = raw.APIServerVersion
	}
	if s.AppRoot == "" {
		s.AppRoot = raw.AppRoot
	}
	return s, nil
}

// Volume is one entry of `container volume list --format json`.
type Volume struct {
	Name   string
	Labels map[string]string
	Source string
	// Size is the image's size in bytes: what -s asked for, else the
	// CLI's default of 512 GiB.
	Size int64
	// Options are the driver options it was made with; "size" is there
	// when it was made with -s or --opt size=.
	Options map[string]string
	Created time.Time
}

// Sized reports whether the volume was made with an explicit size.
func (v Volume) Sized() bool { _, ok := v.Options["size"]; return ok }

// ParseVolumes reads `container volume list --format json`: {id,
// configuration{…}} from 1.0, a flat object with createdAt before.
func ParseVolumes(b []byte) ([]Volume, error) {
	type fields struct {
		Name         string            `json:"name"`
		Labels       map[string]string `json:"labels"`
		Options      map[string]string `json:"options"`
		Source       string            `json:"source"`
		SizeInBytes  int64             `json:"sizeInBytes"`
		CreationDate date              `json:"creationDate"`
		CreatedAt    date              `json:"createdAt"`
	}
	var raw []struct {
		fields
		ID            string  `json:"id"`
		Configuration *fields `json:"configuration"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("parse volume JSON: %w", err)
	}
	out := make([]Volume, 0, len(raw))
	for _, r := range raw {
		f := r.fields
		if r.Configuration != nil {
			f = *r.Configuration
		}
		v := Volume{Name: f.Name, Labels: f.Labels, Options: f.Options, Source: f.Source, Size: f.SizeInBytes, Created: f.CreationDate.Time}
		if v.Created.IsZero() {
			v.Created = f.CreatedAt.Time
		}
		if v.Name == "" {
			v.Name = r.ID
		}
		if v.Name == "" {
			return nil, errors.New("parse volume JSON: an entry has no name")
		}
		out = append(out, v)
	}
	return out, nil
}
