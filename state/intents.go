package state

import "time"

// Intent records an operation that changes a sandbox in steps a killed
// server could leave half done (a restore or a clone that moves its
// container aside and swaps its workspace). It is written before the first
// step and removed after the last, so that the next server to take the
// sandbox's lifecycle lock finds what a dead one left and finishes or
// undoes it.
type Intent struct {
	Sandbox string `json:"sandbox"`
	// Op is "restore", "clone", "reset" or "destroy"; Snapshot the
	// snapshot restored (or the clone's source).
	Op       string `json:"op"`
	Snapshot string `json:"snapshot,omitempty"`
	// Phase is "begun" until the new workspace is whole beside the old
	// one, then "staged": from then on the operation is finished, not
	// undone.
	Phase string `json:"phase"`
	// Trash is the name the old container was moved aside to, if any.
	Trash string `json:"trash,omitempty"`
	// Stage and Old are the directories, in the workspace, that hold the
	// new workspace while it arrives and the old one while they swap.
	Stage string `json:"stage"`
	Old   string `json:"old"`
	// Volume, on a restore from a volume snapshot, is the workspace
	// volume the restore makes from it; OldVolume the one it replaces,
	// removed once the sandbox runs on the new one ("staged").
	Volume    string    `json:"volume,omitempty"`
	OldVolume string    `json:"old_volume,omitempty"`
	Began     time.Time `json:"began"`
}

var bucketIntents = []byte("intents")

// PutIntent stores or replaces the intent of a sandbox (one at a time:
// the sandbox's lifecycle lock is held for the operation).
func (s *Store) PutIntent(in Intent) error {
	return s.putRecord(bucketIntents, []byte(in.Sandbox), in)
}

// Intent returns a sandbox's intent; ok is false when it has none.
func (s *Store) Intent(sandbox string) (Intent, bool, error) {
	return getRecord[Intent](s, bucketIntents, []byte(sandbox))
}

// Intents returns every intent recorded.
func (s *Store) Intents() ([]Intent, error) {
	return listRecords[Intent](s, bucketIntents, "intent")
}

// DeleteIntent removes a sandbox's intent.
func (s *Store) DeleteIntent(sandbox string) error {
	_, err := s.deleteRecord(bucketIntents, []byte(sandbox))
	return err
}
