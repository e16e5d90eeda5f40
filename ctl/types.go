package ctl

import "time"

// SpawnParams ask for a child; every field may be left out.
type SpawnParams struct {
	Image  string  `json:"image,omitempty"`
	Name   string  `json:"name,omitempty"`
	CPUs   float64 `json:"cpus,omitempty"`
	Memory string  `json:"memory,omitempty"`
	// Network asks for less network than the child would get: "none"
	// (loopback only) or "allowlist" (no route out; the host's proxy
	// decides). A child never gets more than its parent, asked or not.
	Network string `json:"network,omitempty"`
	// Allow, when set, are the only hosts the child may connect to
	// (patterns as in the profile key allow: "pypi.org", "*.github.com:443",
	// "10.0.0.0/8"), on top of what its own and its ancestors' policies
	// allow. It implies network allowlist.
	Allow []string `json:"allow,omitempty"`
}

// Child describes a child sandbox.
type Child struct {
	Name      string    `json:"name"`
	Container string    `json:"container"`
	Image     string    `json:"image"`
	CPUs      float64   `json:"cpus"`
	MemoryMB  int64     `json:"memory_mb"`
	IP        string    `json:"ip,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
	// Notes say what the host lowered to fit the policy.
	Notes []string `json:"notes,omitempty"`
}

// PingResult answers ping.
type PingResult struct {
	OK     bool   `json:"ok"`
	Parent string `json:"parent"`
}

// ListResult answers list.
type ListResult struct {
	Children []Child `json:"children"`
}

// NameParams name a child (destroy).
type NameParams struct {
	Name string `json:"name"`
}

// ExecParams run a command in a child through its shell.
type ExecParams struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	// Timeout in seconds; 0 is the host's default.
	Timeout float64 `json:"timeout,omitempty"`
	Workdir string  `json:"workdir,omitempty"`
}

// RunParams spawn a child, run a command in it and destroy it.
type RunParams struct {
	Command string  `json:"command"`
	Image   string  `json:"image,omitempty"`
	Timeout float64 `json:"timeout,omitempty"`
	Workdir string  `json:"workdir,omitempty"`
	// Network and Allow ask for less network, as SpawnParams' do.
	Network string   `json:"network,omitempty"`
	Allow   []string `json:"allow,omitempty"`
}

// ExecResult is a command's outcome; its output was streamed before it.
type ExecResult struct {
	Name       string `json:"name"`
	ExitCode   int    `json:"exit_code"`
	DurationMS int64  `json:"duration_ms"`
	TimedOut   bool   `json:"timed_out,omitempty"`
}
