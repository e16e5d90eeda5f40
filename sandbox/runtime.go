package sandbox

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/proc"
)

// Runtime drives one container CLI. Implementations (dialects) build argv,
// run the CLI through one chokepoint and parse its output; they know nothing
// of sandboxes, shells or tools. Every method that takes a container name
// expects one that has already been validated.
//
// The contract is shaped by the least capable engine (Apple's `container`):
// exec is always `-i` without a TTY, there is no commit (see Snapshotter),
// and unix sockets are mounted as single files.
// ImageIdentifier is implemented by runtimes that tell an image's ID:
// what a name refers to now, so that a spare booted from an image since
// rebuilt under that name is told apart (spare.go).
type ImageIdentifier interface {
	// ImageID is the ID image ref refers to now; ErrNotFound when
	// there is no such image.
	ImageID(ctx context.Context, ref string) (string, error)
}

// HostVolumes is implemented by engines whose volumes are directories the
// server can look at on the host: whether a volume exists, known without
// a CLI call.
type HostVolumes interface {
	// VolumeOnHost reports whether volume name exists; known false when
	// the host cannot tell (the caller asks the engine).
	VolumeOnHost(name string) (exists, known bool)
}

// ImageIDWarmer is implemented by engines that answer ImageID from the
// host once the CLI has answered it (docker's store.go): WarmImageID has
// the CLI answer where later looks are then answered from the host, and
// does nothing elsewhere.
type ImageIDWarmer interface {
	WarmImageID(ctx context.Context, ref string)
}

type Runtime interface {
	// Kind names the dialect's engine: "docker", "podman" or "container".
	Kind() string
	// Binary is the CLI program the dialect runs.
	Binary() string
	// Ping checks that the CLI exists and its engine answers. It returns an
	// error wrapping ErrEngineMissing or ErrEngineNotStarted, with a hint.
	Ping(ctx context.Context) error
	// Version reports the engine's version string.
	Version(ctx context.Context) (string, error)

	// Run creates and starts a detached container, and returns its ID when
	// the engine reports it ("" otherwise): a boot then opens the first
	// shell by that ID, without inspecting the container under the name
	// first.
	Run(ctx context.Context, spec RunSpec) (id string, err error)
	// Start starts an existing stopped container.
	Start(ctx context.Context, name string) error
	// Stop stops a running container, waiting at most grace before killing it.
	Stop(ctx context.Context, name string, grace time.Duration) error
	// Remove deletes a container, killing it first if it runs. Removing a
	// container that does not exist returns an error wrapping ErrNotFound.
	Remove(ctx context.Context, name string) error
	// Inspect describes one container, or returns an error wrapping ErrNotFound.
	Inspect(ctx context.Context, name string) (Container, error)
	// List returns the containers (running or not) carrying every given label.
	List(ctx context.Context, labels map[string]string) ([]Container, error)

	// ExecCommand prepares, without starting, a process inside a running
	// container, ended when ctx is. The caller starts it and must Wait for
	// it.
	ExecCommand(ctx context.Context, name string, spec ExecSpec) proc.Process
	// Exec runs a process to completion inside a running container.
	Exec(ctx context.Context, name string, spec ExecSpec) (ExecOutput, error)

	// VolumeCreate creates a named volume if it does not exist.
	VolumeCreate(ctx context.Context, name string, labels map[string]string) error
	// VolumeRemove deletes a named volume; a missing one is not an error.
	VolumeRemove(ctx context.Context, name string) error
	// ImageExists reports whether an image reference is present locally.
	ImageExists(ctx context.Context, ref string) (bool, error)
}

// DirectExecer is implemented by engines that can run a process in a
// container on the host's own pipes, handed to it, rather than on streams
// an engine process relays: a sandbox's persistent shells are opened so
// where the engine can, and a warm command then costs a pipe round trip.
type DirectExecer interface {
	// DirectExecCommand is ExecCommand for a process whose Start gets
	// files (the ends of pipes) as its stdin, stdout and stderr, and
	// which reads and writes those files itself. ok is false when the
	// engine cannot (then ExecCommand serves).
	DirectExecCommand(ctx context.Context, name string, spec ExecSpec) (p proc.Process, ok bool)
}

// handedExec is rt's exec of spec in container name on the server's own
// pipes where the engine can hand them over (DirectExecer), else on the
// engine's relayed streams (ExecCommand). The process is the same either
// way; its Start takes pipes.
func handedExec(ctx context.Context, rt Runtime, name string, spec ExecSpec) proc.Process {
	if d, ok := rt.(DirectExecer); ok {
		if p, ok := d.DirectExecCommand(ctx, name, spec); ok {
			return p
		}
	}
	return rt.ExecCommand(ctx, name, spec)
}

// Renamer is implemented by engines that can rename a container. Reset uses
// it to move the old container out of the way and delete it in the
// background while the new one boots.
type Renamer interface {
	Rename(ctx context.Context, name, newName string) error
}

// PoolKeeper is a runtime whose cluster keeps the warm spares itself
// (agent-sandbox's SandboxWarmPools, on Kubernetes): the Manager says
// which to keep and claims them as its own spares (Rename from a spare's
// name), but boots and removes none.
type PoolKeeper interface {
	// KeepsPools reports whether the runtime keeps pools (it was asked
	// to, and can).
	KeepsPools() bool
	// KeepPools keeps pools, of their counts, for the spares of prefix,
	// and no others of prefix's.
	KeepPools(ctx context.Context, prefix string, pools []PoolSpec) error
	// Pooled lists the spares ready in prefix's pools, under the spare
	// names and workspaces of their IDs (spec's, with PooledSpareID
	// replaced).
	Pooled(ctx context.Context, prefix string) ([]Container, error)
}

// PoolSpec is one pool a PoolKeeper keeps: Count spares booted as Spec,
// whose names and workspace are those of PooledSpareID, each with a
// workspace of WorkspaceBytes (0: the runtime's default).
type PoolSpec struct {
	Key            string
	Spec           RunSpec
	WorkspaceBytes int64
	Count          int
}

// PooledSpareID is the spare ID in a PoolSpec's names, which each pooled
// spare's own replaces.
const PooledSpareID = "0000000000000000"

// poolKeeperOf is rt as a PoolKeeper, when it keeps pools.
func poolKeeperOf(rt Runtime) (PoolKeeper, bool) {
	pk, ok := rt.(PoolKeeper)
	return pk, ok && pk.KeepsPools()
}

// RenamerOf is rt as a Renamer, when it is one.
func RenamerOf(rt Runtime) (Renamer, bool) {
	r, ok := rt.(Renamer)
	return r, ok
}

// whyNoRename says why rt cannot rename a container, "" when it can.
func whyNoRename(rt Runtime) string {
	if _, ok := rt.(Renamer); !ok {
		return rt.Kind() + " cannot rename a container"
	}
	return ""
}

// RunSpec describes a long-lived sandbox container.
type RunSpec struct {
	Name    string
	Image   string
	Labels  map[string]string
	CPUs    float64 // 0: engine default
	Memory  string  // e.g. "512M"; "": engine default
	Mounts  []Mount
	Workdir string
	Env     map[string]string
	// Command overrides the image's command; it must keep PID 1's child
	// alive for the sandbox's whole life.
	Command []string
	// Init runs a minimal init as PID 1 so stop signals end the container at
	// once and zombies are reaped.
	Init bool
	// Network is "" for the engine default, "none" for loopback only, or
	// a network the engine made through Networker.
	Network string
	// Aliases are names the container answers to on Network (set only for
	// a Networker's network).
	Aliases []string
	// Virtualization asks for nested virtualization (Apple) or /dev/kvm (Linux).
	Virtualization bool
	// PidsLimit bounds the container's processes and threads; 0: engine
	// default. Set only where DiskSupport.Pids says the engine enforces it.
	PidsLimit int
	// StorageSize bounds the writable root filesystem ("20G"); set only
	// where DiskSupport.RootfsSize says the storage supports it.
	StorageSize string
}

// Mount binds a named volume or a host path into a container.
type Mount struct {
	// Volume names an engine volume; when empty, Source is a host path.
	Volume   string
	Source   string
	Target   string
	ReadOnly bool
}

// ExecSpec describes a process to run inside a container.
type ExecSpec struct {
	Argv        []string
	Interactive bool // keep stdin open (-i)
	// TTY asks the engine for a terminal (-t): only for terminal
	// sessions, whose stdin is a pseudo-terminal on the host.
	TTY     bool
	Workdir string
	Env     map[string]string
	User    string
	Stdin   io.Reader // for Exec only
}

// ExecOutput is the outcome of Runtime.Exec.
type ExecOutput struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int
}

// State is a container's lifecycle state, normalised across engines.
type State string

// Container states.
const (
	StateRunning State = "running"
	StateStopped State = "stopped"
	StateCreated State = "created"
	StatePaused  State = "paused"
	StateUnknown State = "unknown"
)

// Container is what the engine knows about one container.
type Container struct {
	Name    string
	ID      string
	Image   string
	State   State
	Labels  map[string]string
	Created time.Time
	Started time.Time
	// Finished and ExitCode are when a stopped container's main process
	// ended and with what, where the engine says (zero otherwise).
	Finished time.Time
	ExitCode int
	IP       string
	CPUs     float64
	Memory   int64 // bytes, 0 if unknown
	// Networks are the networks the container is on, with its address on
	// each (empty while stopped); none for a container without network.
	Networks []Attachment
	// NoNetwork is set for a container made with network "none".
	NoNetwork bool
	// UpperDir is the overlay upper directory of its root filesystem and
	// PID its main process's ID, as the engine's inspect reported them
	// ("" and 0 where it did not): paths and IDs of the engine's host,
	// which only a runtime implementing UsageDirs or HostPIDs vouches for
	// as this host's. A boot that inspected the container passes them on
	// rather than asking the engine again.
	UpperDir string
	PID      int
}

// Attachment is a container's place on one network.
type Attachment struct {
	Network string `json:"network"`
	IP      string `json:"ip,omitempty"`
	// Aliases are the names the engine resolves to IP on Network.
	Aliases []string `json:"aliases,omitempty"`
}

// Networker is implemented by engines that make networks on which
// containers reach each other by name (the engine's DNS, with Aliases).
type Networker interface {
	// EnsureNetwork creates network name, with labels, unless it exists.
	EnsureNetwork(ctx context.Context, name string, labels map[string]string) error
	// RemoveNetwork removes network name and reports whether it existed;
	// with dryRun it only reports.
	RemoveNetwork(ctx context.Context, name string, dryRun bool) (bool, error)
	// ConnectNetwork attaches container to network, answering to
	// aliases there; one attached already is left as it is.
	ConnectNetwork(ctx context.Context, container, network string, aliases []string) error
	// Networks lists the networks that carry label key=value.
	Networks(ctx context.Context, key, value string) ([]string, error)
}

// Running reports whether the container is running.
func (c Container) Running() bool { return c.State == StateRunning }

// StartBounded is implemented by runtimes whose wait for a new container
// to run has a bound of its own, longer than a local engine's start (a
// Kubernetes pod waits for its image to be pulled and for a node): the
// manager then gives a boot that long, and a minute more for its first
// shell, unless Config.BootTimeout says otherwise.
type StartBounded interface {
	StartTimeout() time.Duration
}

// VolumeLister is implemented by engines that list their volumes, which
// prune needs to find workspaces whose sandbox is gone.
type VolumeLister interface {
	VolumeNames(ctx context.Context) ([]string, error)
}

// DiskSweeper is implemented by engines whose workspace volumes are
// backed by files of the server's making (images on loop devices): it
// removes those a server killed in the middle of a volume's creation
// left, which no volume names, and returns them.
type DiskSweeper interface {
	SweepDisks(ctx context.Context) ([]string, error)
}

// StatsReader is implemented by engines that report a container's
// resource use.
type StatsReader interface {
	Stats(ctx context.Context, name string) (Stats, error)
}

// Stats is a snapshot of one container's resource use. Counters are
// cumulative since the container started.
type Stats struct {
	CPUTime     time.Duration
	MemoryUsage int64 // bytes
	MemoryLimit int64 // bytes, 0 if unlimited or unknown
	NetRx       int64
	NetTx       int64
	BlockRead   int64
	BlockWrite  int64
	Processes   int
}

// ImageSaver is implemented by engines that turn a container's root
// filesystem (volumes excluded) into an image: docker and podman by
// commit, Apple by export and build.
type ImageSaver interface {
	// SaveImage makes image ref, carrying labels, from container name.
	// env is the environment the image keeps (from the container's PID 1),
	// for engines that rebuild the image config. pause freezes the
	// container meanwhile, where the engine can.
	SaveImage(ctx context.Context, name, ref string, labels map[string]string, env []string, pause bool) error
	// RemoveImage removes image ref. An image a container still uses is
	// untagged, or kept until the container is gone, never forced out
	// from under it; a missing one is no error: nil, or ErrNotFound where
	// the engine says so.
	RemoveImage(ctx context.Context, ref string) error
}

// LiveSaver is implemented by ImageSavers that may need the container
// stopped to save it (Apple before 1.2.1). An error says snapshots are not
// possible at all with this engine version.
type LiveSaver interface {
	SavesRunning(ctx context.Context) (bool, error)
}

// VolumeSnapshotter is implemented by runtimes whose storage copies a
// workspace volume itself (Kubernetes' VolumeSnapshots, where the claims'
// CSI driver has them): a clone's workspace is then a snapshot of the
// source's volume and a volume made from it, with no tar through the
// server. refs are names of the Manager's making.
type VolumeSnapshotter interface {
	// VolumeSnapshotsWhyNot says why volume snapshots cannot be used as
	// the runtime is set up, "" when they can.
	VolumeSnapshotsWhyNot(ctx context.Context) string
	// SnapshotVolume snapshots volume as ref and waits until the
	// snapshot is whole; it returns the size a volume made from it needs
	// (0 where the storage does not tell).
	SnapshotVolume(ctx context.Context, volume, ref string, labels map[string]string) (int64, error)
	// VolumeFromSnapshot makes the new volume name, of at least bytes,
	// holding snapshot ref's files, and waits until it can be mounted.
	VolumeFromSnapshot(ctx context.Context, name, ref string, labels map[string]string, bytes int64) error
	// RemoveVolumeSnapshot deletes snapshot ref; a missing one is not an
	// error.
	RemoveVolumeSnapshot(ctx context.Context, ref string) error
}

// Scoped is implemented by runtimes whose objects live in one part of
// their engine that a server is set up to use (a namespace of a
// cluster): what a server made in one part, another reaches only from the
// same part.
type Scoped interface {
	// Scope names the part this runtime uses, for people to read. It may
	// end with ", id " and an identity of that part the runtime read (an
	// object's UID), which tells apart parts of one name (a namespace
	// made again, one of that name on another cluster); two scopes are
	// compared by it only where both have one.
	Scope() string
}

// scopeID separates a scope from the identity it may end with.
const scopeID = ", id "

// engineHere reports whether made, the engine a record or list names, is
// here, this server's (both as snapshotEngine gives them): equal, or
// equal but for a scope's identity made lacks (written by a server that
// could not read it). Here lacking one (this server could not read it)
// matches only a made without one.
func engineHere(made, here string) bool {
	if made == here {
		return true
	}
	mb, mid, _ := strings.Cut(made, scopeID)
	hb, _, _ := strings.Cut(here, scopeID)
	return mid == "" && mb == hb
}

// VolumeSnapshotFinder is implemented by VolumeSnapshotters that tell
// whether snapshot ref, one of theirs, is there: a record that says it
// was made elsewhere (its scope's identity made again since) is this
// server's all the same where it finds the snapshot.
type VolumeSnapshotFinder interface {
	HasVolumeSnapshot(ctx context.Context, ref string) (bool, error)
}

// BuildSpec describes an image build.
type BuildSpec struct {
	Tag        string
	File       string // the Containerfile
	ContextDir string
}

// ImageBuilder is implemented by engines that build images, streaming
// the build's output to log.
type ImageBuilder interface {
	BuildImage(ctx context.Context, b BuildSpec, log io.Writer) error
}

// ImageInfo is one image the engine has.
type ImageInfo struct {
	Ref     string // repository:tag, or "" for an untagged image
	ID      string // or digest
	Size    string // as the engine prints it
	Created string // as the engine prints it
}

// ImagePruner is implemented by engines that can remove the untagged
// images a clone leaves (its tag goes once it booted; the engine keeps
// the image while the clone's container uses it).
type ImagePruner interface {
	// PruneImages removes the untagged images carrying every label of
	// labels (an empty value: the key alone) that no container uses, and
	// returns their IDs; with dryRun it only lists them.
	PruneImages(ctx context.Context, labels map[string]string, dryRun bool) ([]string, error)
}

// ImageLister is implemented by engines that list their images.
type ImageLister interface {
	ListImages(ctx context.Context) ([]ImageInfo, error)
}
