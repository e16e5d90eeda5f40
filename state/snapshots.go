package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Snapshot records a saved sandbox: the image in the engine (labelled as
// ours) and the workspace tar beside the state file.
type Snapshot struct {
	Name      string          `json:"name"`
	Image     string          `json:"image"`
	Sandbox   string          `json:"sandbox"`
	BaseImage string          `json:"base_image"`
	Profile   json.RawMessage `json:"profile,omitempty"`
	// Parent is the snapshot the sandbox was restored from, if any.
	Parent  string    `json:"parent,omitempty"`
	Created time.Time `json:"created"`
	Note    string    `json:"note,omitempty"`
	// Workspace is set when the workspace was saved, in WorkspaceFile
	// (relative to the state directory).
	Workspace      bool   `json:"workspace"`
	WorkspaceFile  string `json:"workspace_file,omitempty"`
	WorkspaceBytes int64  `json:"workspace_bytes,omitempty"`
	// Env names the env variables the env tool had set (values stay in
	// the image).
	Env []string `json:"env,omitempty"`
	// WorkspaceOnly is set when the runtime could not save the root
	// filesystem (it has no image of a running sandbox: Kubernetes): the
	// snapshot is the workspace tar, Image is empty, and a restore or a
	// clone boots BaseImage afresh with the workspace loaded.
	WorkspaceOnly bool `json:"workspace_only,omitempty"`
	// VolumeSnapshot, on a WorkspaceOnly snapshot, names the snapshot of
	// the workspace volume the runtime's storage keeps (a Kubernetes
	// VolumeSnapshot, by the name the server made it under) in place of a
	// tar: a restore makes the sandbox a new workspace volume from it.
	// WorkspaceBytes is then the size of the volume it was taken of (the
	// storage's restore size), not of the files in it.
	VolumeSnapshot string `json:"volume_snapshot,omitempty"`
	// Engine is where the parts of the snapshot an engine keeps (Image,
	// unless WorkspaceOnly; VolumeSnapshot) live: the runtime's kind, and
	// for a runtime with scopes, the one the server used ("kubernetes
	// namespace sandboxes at https://…"). Empty on records made before
	// it was kept, and on a workspace tar alone, which any runtime
	// restores.
	Engine string `json:"engine,omitempty"`
}

// ErrSnapshotExists marks a snapshot name in use.
var ErrSnapshotExists = errors.New("snapshot exists")

// AddSnapshot records a new snapshot; a name in use is ErrSnapshotExists.
func (s *Store) AddSnapshot(sn Snapshot) error {
	data, err := json.Marshal(sn)
	if err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketSnaps)
		if err != nil {
			return err
		}
		if b.Get([]byte(sn.Name)) != nil {
			return fmt.Errorf("%w: %q", ErrSnapshotExists, sn.Name)
		}
		return b.Put([]byte(sn.Name), data)
	})
}

// Snapshot returns one snapshot record.
func (s *Store) Snapshot(name string) (sn Snapshot, ok bool, err error) {
	return getRecord[Snapshot](s, bucketSnaps, []byte(name))
}

// Snapshots returns every snapshot record, in name order; unreadable
// ones are skipped.
func (s *Store) Snapshots() ([]Snapshot, error) {
	return listRecords[Snapshot](s, bucketSnaps, "snapshot")
}

// DeleteSnapshot forgets a snapshot; it reports whether there was one.
func (s *Store) DeleteSnapshot(name string) (bool, error) {
	return s.deleteRecord(bucketSnaps, []byte(name))
}
