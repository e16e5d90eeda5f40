//go:build linux

package csihost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Name is the driver's name, as a StorageClass's provisioner and a
// VolumeSnapshotClass's driver give it.
const Name = "hostpath.csi.kubetest.sandbox-mcp.dev"

// Version is the driver's vendor version.
const Version = "1.0.0"

// maxNameLength bounds volume and snapshot names (the sanity suite asks
// for 128 to work).
const maxNameLength = 256

// defaultCapacity is a volume's size when its request names none.
const defaultCapacity = 1 << 30

// Driver serves CSI's Identity, Controller and Node services over one
// unix socket, keeping its volumes and snapshots under one directory.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	dir    string
	nodeID string
	// mu orders every call: a volume's or snapshot's record and its data
	// change together.
	mu  sync.Mutex
	srv *grpc.Server
}

// volume is a volume's record, volumes/<id>.json beside volumes/<id>/.
type volume struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Capacity int64  `json:"capacity"`
	// Snapshot is the snapshot the volume was made from, if any.
	Snapshot string `json:"snapshot,omitempty"`
}

// snapshot is a snapshot's record, snapshots/<id>.json beside
// snapshots/<id>/.
type snapshot struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Source  string    `json:"source"`
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
}

// New returns a driver keeping its data under dir, for node nodeID.
func New(dir, nodeID string) (*Driver, error) {
	for _, k := range []kind{volumes, snapshots} {
		if err := os.MkdirAll(filepath.Join(dir, k.dir), 0o700); err != nil {
			return nil, fmt.Errorf("csihost: %w", err)
		}
	}
	return &Driver{dir: dir, nodeID: nodeID}, nil
}

// Serve answers CSI calls on the unix socket at path until ctx ends.
func (d *Driver) Serve(ctx context.Context, path string) error {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("csihost: %w", err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterControllerServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	stop := context.AfterFunc(ctx, srv.Stop)
	defer stop()
	if err := srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("csihost: %w", err)
	}
	return nil
}

// --- Identity ---------------------------------------------------------------

// GetPluginInfo names the driver.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: Name, VendorVersion: Version}, nil
}

// GetPluginCapabilities says the driver has a controller service.
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

// Probe says the driver is ready: it has nothing to wait for.
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// --- Controller -------------------------------------------------------------

// ControllerGetCapabilities: volumes, snapshots and a listing of them.
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, c := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: c}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// kind is what the driver keeps: volumes or snapshots, each an ID's
// directory and record (<dir>/<id>/ and <dir>/<id>.json).
type kind struct{ prefix, dir string }

var (
	volumes   = kind{"vol", "volumes"}
	snapshots = kind{"snap", "snapshots"}
)

// idOf is the ID of the volume or snapshot named name: a digest, so that
// a second call with the name finds the first one's record.
func (k kind) idOf(name string) string {
	sum := sha256.Sum256([]byte(k.prefix + "\x00" + name))
	return k.prefix + "-" + hex.EncodeToString(sum[:12])
}

// valid refuses IDs this driver never gave: they name paths.
func (k kind) valid(id string) bool {
	rest, ok := strings.CutPrefix(id, k.prefix+"-")
	if !ok || len(rest) != 24 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil
}

// CreateVolume makes an empty directory, or a copy of a snapshot's.
func (d *Driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if name == "" || len(name) > maxNameLength {
		return nil, status.Errorf(codes.InvalidArgument, "a volume needs a name of 1 to %d bytes", maxNameLength)
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	capacity, err := capacityOf(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	var snapID string
	if src := req.GetVolumeContentSource(); src != nil {
		s := src.GetSnapshot()
		if s == nil {
			return nil, status.Error(codes.InvalidArgument, "a volume can be made from a snapshot only")
		}
		snapID = s.GetSnapshotId()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := volume{ID: volumes.idOf(name), Name: name, Capacity: capacity, Snapshot: snapID}
	var old volume
	switch err := d.read(volumes, v.ID, &old); {
	case err == nil:
		if old.Capacity != v.Capacity || old.Snapshot != v.Snapshot {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with another size or source", name)
		}
		return &csi.CreateVolumeResponse{Volume: d.csiVolume(old)}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, status.Error(codes.Internal, err.Error())
	}
	data := d.path(volumes, v.ID)
	if err := os.RemoveAll(data); err != nil { // a call cut before its record
		return nil, status.Error(codes.Internal, err.Error())
	}
	if snapID != "" {
		var s snapshot
		if d.read(snapshots, snapID, &s) != nil {
			return nil, status.Errorf(codes.NotFound, "no snapshot %q", snapID)
		}
		if err := copyTree(d.path(snapshots, snapID), data); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	} else if err := os.Mkdir(data, 0o777); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	// Open to every user, as a hostPath volume: a pod whose user is not
	// root writes it too.
	if err := os.Chmod(data, 0o777); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := d.write(volumes, v.ID, v); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.CreateVolumeResponse{Volume: d.csiVolume(v)}, nil
}

func (d *Driver) csiVolume(v volume) *csi.Volume {
	out := &csi.Volume{VolumeId: v.ID, CapacityBytes: v.Capacity}
	if v.Snapshot != "" {
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: v.Snapshot}}}
	}
	return out
}

// capacityOf is the size to record for r.
func capacityOf(r *csi.CapacityRange) (int64, error) {
	req, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || limit < 0 || (limit > 0 && limit < req) {
		return 0, status.Errorf(codes.OutOfRange, "capacity range %d to %d", req, limit)
	}
	switch {
	case req > 0:
		return req, nil
	case limit > 0:
		return min(limit, defaultCapacity), nil
	}
	return defaultCapacity, nil
}

// checkCapabilities accepts mount volumes of any access mode this one
// node can give (its directories are shared by whoever mounts them).
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	for _, c := range caps {
		if c.GetBlock() != nil {
			return status.Error(codes.InvalidArgument, "block volumes are not served: a volume is a directory")
		}
		if c.GetMount() == nil {
			return status.Error(codes.InvalidArgument, "a volume capability names no access type")
		}
		if c.GetAccessMode() == nil {
			return status.Error(codes.InvalidArgument, "a volume capability names no access mode")
		}
	}
	return nil
}

// DeleteVolume removes a volume's directory and record; an unknown one
// is gone already.
func (d *Driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if err := d.deleteCall(volumes, "volume", req.GetVolumeId()); err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// deleteCall is the body of DeleteVolume and DeleteSnapshot: the ID of
// a noun of k is required, and what it names is removed (an unknown ID
// is gone already).
func (d *Driver) deleteCall(k kind, noun, id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, noun+" id missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.remove(k, id); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// ValidateVolumeCapabilities confirms what checkCapabilities accepts.
func (d *Driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	d.mu.Lock()
	var v volume
	err := d.read(volumes, req.GetVolumeId(), &v)
	d.mu.Unlock()
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "no volume %q", req.GetVolumeId())
	}
	if checkCapabilities(req.GetVolumeCapabilities()) != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: "only mount volumes are served"}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters()}}, nil
}

// CreateSnapshot copies a volume's directory whole (owners, modes, times,
// extended attributes, holes).
func (d *Driver) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	name, src := req.GetName(), req.GetSourceVolumeId()
	if name == "" || len(name) > maxNameLength {
		return nil, status.Errorf(codes.InvalidArgument, "a snapshot needs a name of 1 to %d bytes", maxNameLength)
	}
	if src == "" {
		return nil, status.Error(codes.InvalidArgument, "source volume id missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := snapshot{ID: snapshots.idOf(name), Name: name, Source: src}
	var old snapshot
	switch err := d.read(snapshots, s.ID, &old); {
	case err == nil:
		if old.Source != src {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists, of another volume", name)
		}
		return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(old)}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, status.Error(codes.Internal, err.Error())
	}
	var v volume
	if d.read(volumes, src, &v) != nil {
		return nil, status.Errorf(codes.NotFound, "no volume %q", src)
	}
	data := d.path(snapshots, s.ID)
	if err := os.RemoveAll(data); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := copyTree(d.path(volumes, src), data); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	size, err := treeSize(data)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.Size, s.Created = size, time.Now().UTC()
	if err := d.write(snapshots, s.ID, s); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(s)}, nil
}

func csiSnapshot(s snapshot) *csi.Snapshot {
	return &csi.Snapshot{SnapshotId: s.ID, SourceVolumeId: s.Source, SizeBytes: s.Size,
		CreationTime: timestamppb.New(s.Created), ReadyToUse: true}
}

// DeleteSnapshot removes a snapshot's copy and record; an unknown one is
// gone already.
func (d *Driver) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if err := d.deleteCall(snapshots, "snapshot", req.GetSnapshotId()); err != nil {
		return nil, err
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists every snapshot, or those of one ID or one source
// volume, in pages whose token is the index of the next entry.
func (d *Driver) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ents, err := os.ReadDir(filepath.Join(d.dir, snapshots.dir))
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	var all []snapshot
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		var s snapshot
		if !ok || d.read(snapshots, id, &s) != nil {
			continue
		}
		if (req.GetSnapshotId() != "" && s.ID != req.GetSnapshotId()) ||
			(req.GetSourceVolumeId() != "" && s.Source != req.GetSourceVolumeId()) {
			continue
		}
		all = append(all, s)
	}
	start := 0
	if tok := req.GetStartingToken(); tok != "" {
		if _, err := fmt.Sscanf(tok, "%d", &start); err != nil || start < 0 || start > len(all) {
			return nil, status.Errorf(codes.Aborted, "starting token %q is not one of this driver's", tok)
		}
	}
	end := len(all)
	if m := int(req.GetMaxEntries()); m < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries below 0")
	} else if m > 0 && start+m < end {
		end = start + m
	}
	out := &csi.ListSnapshotsResponse{}
	for _, s := range all[start:end] {
		out.Entries = append(out.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(s)})
	}
	if end < len(all) {
		out.NextToken = fmt.Sprint(end)
	}
	return out, nil
}

// --- Node -------------------------------------------------------------------

// NodeGetCapabilities: none (no staging, no stats).
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// NodeGetInfo names the node.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.nodeID}, nil
}

// NodePublishVolume bind-mounts a volume's directory at the target path,
// which it makes (its parent is the caller's).
func (d *Driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	case target == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume capability missing")
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var v volume
	if d.read(volumes, id, &v) != nil {
		return nil, status.Errorf(codes.NotFound, "no volume %q", id)
	}
	src := d.path(volumes, id)
	if mounted, err := mountedFrom(target, src); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	} else if mounted {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := syscall.Mount(src, target, "", syscall.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind %s at %s: %v", src, target, err)
	}
	if req.GetReadonly() {
		if err := syscall.Mount("", target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			_ = syscall.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "read-only %s: %v", target, err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume unmounts the target path and removes it.
func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	case target == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		err := syscall.Unmount(target, 0)
		if err == nil {
			continue // bound twice: unmount until nothing is
		}
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
			break // not a mount point (any more), or not there
		}
		return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// mountedFrom reports whether target is a bind mount of src: the two
// name the same directory (device and inode).
func mountedFrom(target, src string) (bool, error) {
	var t, s syscall.Stat_t
	if err := syscall.Stat(target, &t); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return false, nil
		}
		return false, err
	}
	if err := syscall.Stat(src, &s); err != nil {
		return false, err
	}
	return t.Dev == s.Dev && t.Ino == s.Ino, nil
}

// --- records and copies -----------------------------------------------------

// path is the directory of k's id. Only IDs k.valid accepts reach it.
func (d *Driver) path(k kind, id string) string {
	return filepath.Join(d.dir, k.dir, id)
}

// read reads the record of k's id into v; an ID the driver never gave
// has none (fs.ErrNotExist), and names no path.
func (d *Driver) read(k kind, id string, v any) error {
	if !k.valid(id) {
		return fs.ErrNotExist
	}
	b, err := os.ReadFile(d.path(k, id) + ".json")
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// write writes the record of k's id whole or not at all.
func (d *Driver) write(k kind, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	path := d.path(k, id) + ".json"
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// remove removes k's id, its record first: a call cut between the two
// leaves a directory the next creation of that name clears. An ID the
// driver never gave is gone already.
func (d *Driver) remove(k kind, id string) error {
	if !k.valid(id) {
		return nil
	}
	if err := os.Remove(d.path(k, id) + ".json"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.RemoveAll(d.path(k, id))
}

// copyTree copies directory src to dst (which must not exist) with
// everything a snapshot keeps: GNU cp's archive mode, holes kept.
func copyTree(src, dst string) error {
	out, err := exec.Command("cp", "-a", "--sparse=always", "--", src, dst).CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dst)
		return fmt.Errorf("copy %s: %v: %s", src, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// treeSize is the bytes the files under dir take on disk.
func treeSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := e.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n, err
}

// Count is how many volumes and snapshots the driver keeps.
func (d *Driver) Count() (vols, snaps int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	count := func(k kind) (int, error) {
		recs, err := filepath.Glob(filepath.Join(d.dir, k.dir, "*.json"))
		return len(recs), err
	}
	if vols, err = count(volumes); err != nil {
		return 0, 0, err
	}
	snaps, err = count(snapshots)
	return vols, snaps, err
}
