package docker

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// inspectJSON holds the fields of `docker|podman container inspect` that the
// dialect reads. Both engines print an array of these; unknown fields are
// ignored.
type inspectJSON struct {
	ID        string `json:"Id"`
	Name      string `json:"Name"`
	Created   string `json:"Created"`
	ImageName string `json:"ImageName"` // podman only
	State     struct {
		Status     string `json:"Status"`
		StartedAt  string `json:"StartedAt"`
		FinishedAt string `json:"FinishedAt"`
		ExitCode   int    `json:"ExitCode"`
		Pid        int    `json:"Pid"`
	} `json:"State"`
	GraphDriver struct {
		Data map[string]string `json:"Data"`
	} `json:"GraphDriver"`
	Config struct {
		Image  string            `json:"Image"`
		Labels map[string]string `json:"Labels"`
	} `json:"Config"`
	HostConfig struct {
		NanoCpus    int64  `json:"NanoCpus"`
		Memory      int64  `json:"Memory"`
		NetworkMode string `json:"NetworkMode"`
	} `json:"HostConfig"`
	NetworkSettings struct {
		IPAddress string `json:"IPAddress"`
		Networks  map[string]struct {
			IPAddress string   `json:"IPAddress"`
			Aliases   []string `json:"Aliases"`
		} `json:"Networks"`
	} `json:"NetworkSettings"`
}

// ParseInspect parses the JSON array printed by `container inspect`.
func ParseInspect(data []byte) ([]sandbox.Container, error) {
	var raw []inspectJSON
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("parse inspect output: %w", err)
	}
	out := make([]sandbox.Container, 0, len(raw))
	for _, r := range raw {
		c := sandbox.Container{
			Name:     strings.TrimPrefix(r.Name, "/"),
			ID:       r.ID,
			Image:    r.Config.Image,
			State:    normaliseState(r.State.Status),
			Labels:   r.Config.Labels,
			Created:  parseTime(r.Created),
			Started:  parseTime(r.State.StartedAt),
			ExitCode: r.State.ExitCode,
			IP:       r.NetworkSettings.IPAddress,
			CPUs:     float64(r.HostConfig.NanoCpus) / 1e9,
			Memory:   r.HostConfig.Memory,
		}
		if c.Image == "" {
			c.Image = r.ImageName
		}
		if c.State == sandbox.StateRunning && r.State.Pid > 1 {
			c.PID = r.State.Pid
		}
		if dir := r.GraphDriver.Data["UpperDir"]; filepath.IsAbs(dir) {
			c.UpperDir = dir
		}
		if c.State == sandbox.StateStopped {
			c.Finished = parseTime(r.State.FinishedAt)
		}
		c.NoNetwork = r.HostConfig.NetworkMode == "none"
		for _, name := range sortedKeys(r.NetworkSettings.Networks) {
			n := r.NetworkSettings.Networks[name]
			if name == "none" {
				continue
			}
			c.Networks = append(c.Networks, sandbox.Attachment{Network: name, IP: n.IPAddress, Aliases: n.Aliases})
			if c.IP == "" {
				c.IP = n.IPAddress
			}
		}
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		out = append(out, c)
	}
	return out, nil
}

func normaliseState(s string) sandbox.State {
	switch strings.ToLower(s) {
	case "running", "restarting":
		return sandbox.StateRunning
	case "exited", "stopped", "dead", "removing", "stopping":
		return sandbox.StateStopped
	case "created", "configured", "initialized":
		return sandbox.StateCreated
	case "paused":
		return sandbox.StatePaused
	}
	return sandbox.StateUnknown
}

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999 -0700 MST"} {
		if t, err := time.Parse(layout, s); err == nil && t.Year() > 1 {
			return t
		}
	}
	return time.Time{}
}
