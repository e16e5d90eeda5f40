package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/atomicfile"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
	"github.com/sandbox-mcp/sandbox-mcp/transfer"
)

// Host files a killed server leaves half written.
//
// A download is extracted into a staging directory beside its target
// (transfer.Unpack), a snapshot's workspace into a partial file in the
// snapshot directory; each is renamed into place when whole and removed
// when it fails. A server killed part way can do neither, so each such
// path is first listed in the server's staging file, <LockDir>/<prefix>-
// server-<ID>.staging (NUL-terminated paths, appended and synced, after a
// first entry naming the server's engine). The next server that finds the
// server gone (sweep.go) removes what is listed and still there, and the
// file. Only names a server makes are removed: a path whose base name does
// not start with one of StagingPrefixes is left alone, whatever the file
// says. The volume snapshots a path names (a clone's, a snapshot's) are
// removed by a server on the same engine (and namespace) only.

// StagingPrefixes begin the base names of the host paths a server lists
// in its staging file.
var StagingPrefixes = []string{transfer.StagingPrefix, ".sandbox-mcp-partial-", clonePrefix, volumeSnapshotPrefix}

// stagingFile is the list of host staging paths of the server with id.
func (m *Manager) stagingFile(id string) string {
	return filepath.Join(m.cfg.LockDir, m.serverKey(id)+".staging")
}

var stagingMu sync.Mutex

// TrackStaging lists path, a host path about to be made as a staging
// directory or partial file, for the next server to remove if this one is
// killed before it does (see above). Without a lock directory it does
// nothing.
func (m *Manager) TrackStaging(path string) error {
	if m.cfg.LockDir == "" {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	stagingMu.Lock()
	defer stagingMu.Unlock()
	list := m.stagingFile(m.serverID)
	entry := abs + "\x00"
	if _, vs := m.rt.(VolumeSnapshotter); vs {
		if _, err := os.Lstat(list); errors.Is(err, fs.ErrNotExist) {
			// The list begins with where the server's volume snapshots
			// are, so that a sweeper elsewhere leaves them for one there.
			// (An engine without them lists none.)
			entry = stagingEngine + m.snapshotEngine() + "\x00" + entry
		}
	}
	f, err := os.OpenFile(list, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(entry); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// stagingEngine begins the first entry of a staging file: the engine
// (snapshotEngine) of the server that wrote it. Not an absolute path, so
// a server that does not know it passes over it.
const stagingEngine = "engine:"

// errElsewhere marks a volume snapshot a gone server listed that this
// server's runtime does not reach (another engine, another namespace).
var errElsewhere = errors.New("volume snapshots elsewhere")

// removeStaging removes what the gone server id listed in its staging
// file and is still there, then the file; it returns how many paths it
// removed, and whether the list is done with. A volume snapshot a path
// names whose removal failed (the cluster unreachable, say), or that
// lives where this server's runtime does not reach (the list says where
// its server made them), keeps its path in the file, which is written
// anew with what is left, for the next sweep (or one on that engine) to
// try again.
func (m *Manager) removeStaging(id string) (n int, done bool) {
	list := m.stagingFile(id)
	data, err := os.ReadFile(list)
	if err != nil {
		return 0, true
	}
	var left bytes.Buffer
	engine := ""
	for _, p := range bytes.Split(data, []byte{0}) {
		path := string(p)
		if e, ok := strings.CutPrefix(path, stagingEngine); ok && engine == "" {
			engine = e
			continue
		}
		if !filepath.IsAbs(path) || !isStagingName(filepath.Base(path)) {
			continue
		}
		var kept error
		base := filepath.Base(path)
		_, isClone := cloneKeyOf(base)
		switch {
		case (isClone || volumeSnapshotKeyOf(base)) && engine != "" && !engineHere(engine, m.snapshotEngine()):
			// Whatever it names in an engine is out of reach here;
			// its host files are not.
			kept = errElsewhere
		case isClone:
			// A clone's key names its volume snapshot too, where the
			// runtime makes them (volsnap.go).
			key, _ := cloneKeyOf(base)
			kept = m.removeCloneSnapshot(key)
		case volumeSnapshotKeyOf(base):
			// A snapshot's, named as its key, goes unless it was
			// recorded.
			kept = m.removeUnrecordedSnapshot(base)
		}
		if kept != nil && !errors.Is(kept, ErrInUse) { // in use: not ours, left alone
			left.WriteString(path + "\x00")
		}
		if _, err := os.Lstat(path); err != nil {
			continue // renamed into place or removed by its server
		}
		if err := os.RemoveAll(path); err != nil {
			m.log.Warn("remove what a killed server left half written", "path", path, "err", err)
			continue
		}
		m.log.Info("removed what a killed server left half written", "path", path)
		n++
	}
	if left.Len() == 0 {
		_ = os.Remove(list)
		return n, true
	}
	out := left.Bytes()
	if engine != "" {
		out = append([]byte(stagingEngine+engine+"\x00"), out...)
	}
	if bytes.Equal(out, data) {
		return n, false // as it was: nothing to write
	}
	if err := atomicfile.Write(list, out, 0o600); err != nil {
		m.log.Warn("keep the volume snapshots a killed server left for the next sweep", "file", list, "err", err)
	}
	return n, false
}

func isStagingName(base string) bool {
	for _, p := range StagingPrefixes {
		if strings.HasPrefix(base, p) && len(base) > len(p) {
			return true
		}
	}
	return false
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// legacyPartialAge is how old a partial snapshot file of the naming
// servers used before staging files must be before it is taken for a
// killed server's: older than the longest a workspace tar may run.
const legacyPartialAge = 2 * transferTimeout

// removeLegacyPartials removes the partial workspace tars, named
// ".<file>.partial", that servers from before staging files left in the
// snapshot directory when killed.
func (m *Manager) removeLegacyPartials() {
	if m.cfg.SnapshotDir == "" {
		return
	}
	paths, _ := filepath.Glob(filepath.Join(m.cfg.SnapshotDir, ".*.workspace.tar.partial"))
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || time.Since(fi.ModTime()) < legacyPartialAge {
			continue
		}
		if os.Remove(p) == nil {
			m.log.Info("removed a partial snapshot file a killed server left", "path", p, "bytes", fi.Size())
		}
	}
}

// adoptSnapshots records the snapshots whose image the engine has (by the
// snapshot reference, SnapshotRef) but the state file does not: a state
// file that was damaged and repaired lost their records, and an image
// without one is neither listed nor ever removed. The workspace tar is
// taken back with it when it is there. A snapshot being made or deleted
// right now (its lock held) is left to that operation.
func (m *Manager) adoptSnapshots(ctx context.Context) {
	_, store, err := m.snapshotter()
	if err != nil {
		return
	}
	lister, ok := m.rt.(ImageLister)
	if !ok {
		// No images to adopt (Kubernetes keeps workspace tars alone), but
		// a killed snapshot's tar may be there all the same.
		m.removeOrphanTars(store)
		return
	}
	imgs, err := lister.ListImages(ctx)
	if err != nil {
		m.log.Debug("list images to adopt snapshots", "err", err)
		return
	}
	prefix := m.SnapshotRef("")
	for _, img := range imgs {
		name, ok := strings.CutPrefix(shortRef(img.Ref), prefix)
		if !ok || ValidateSnapshotName(name) != nil {
			continue
		}
		unlock, err := m.lockSnapshot(name, "adopt")
		if err != nil {
			continue
		}
		if _, known, err := store.Snapshot(name); err == nil && !known {
			rec := state.Snapshot{Name: name, Image: m.SnapshotRef(name), Created: time.Now().UTC(), Engine: m.snapshotEngine(),
				Note: "adopted: its record was lost with a damaged state file; its sandbox and profile are not known"}
			file := workspaceFileName(name)
			if fi, err := os.Stat(filepath.Join(m.cfg.SnapshotDir, file)); err == nil && fi.Mode().IsRegular() {
				rec.Workspace, rec.WorkspaceFile, rec.WorkspaceBytes = true, file, fi.Size()
			}
			if err := store.AddSnapshot(rec); err == nil {
				m.log.Info("adopted a snapshot the state file had no record of", "snapshot", name, "image", img.Ref, "workspace", rec.Workspace)
			}
		}
		unlock()
	}
	m.removeOrphanTars(store)
}

// removeOrphanTars removes the workspace tars in the snapshot directory
// that belong to no snapshot: a server killed after saving one and before
// its image and record were made leaves it, and nothing else would ever
// remove it. A snapshot being made right now (its lock held) keeps its.
func (m *Manager) removeOrphanTars(store SnapshotStore) {
	recs, err := store.Snapshots()
	if err != nil {
		return
	}
	used := map[string]bool{}
	for _, r := range recs {
		used[r.WorkspaceFile] = true
	}
	paths, _ := filepath.Glob(filepath.Join(m.cfg.SnapshotDir, "*.workspace.tar"))
	for _, p := range paths {
		file := filepath.Base(p)
		if used[file] {
			continue
		}
		// The name is workspaceFileName(snapshot): find the snapshot.
		cut := strings.LastIndexByte(strings.TrimSuffix(file, ".workspace.tar"), '-')
		if cut <= 0 {
			continue
		}
		snap := file[:cut]
		if workspaceFileName(snap) != file || ValidateSnapshotName(snap) != nil {
			continue // not a name a snapshot makes: not ours to judge
		}
		unlock, err := m.lockSnapshot(snap, "remove an orphaned workspace tar")
		if err != nil {
			continue
		}
		if _, known, err := store.Snapshot(snap); err == nil && !known {
			if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && os.Remove(p) == nil {
				m.log.Info("removed a workspace tar no snapshot has (its server was killed while making it)", "path", p, "bytes", fi.Size())
			}
		}
		unlock()
	}
}

// runsFile lists the terminal and Python sessions of the server with id:
// "sandbox runID =label" lines, the label (what the history records)
// with its newlines folded. A line without the "=" is an older server's
// terminal session: "sandbox runID command".
func (m *Manager) runsFile(id string) string {
	return filepath.Join(m.cfg.LockDir, m.serverKey(id)+".runs")
}

// trackRun lists a session (a terminal's, a Python interpreter's), so
// that the next server ends its processes, and records label in the
// history, if this one is killed while it runs.
func (m *Manager) trackRun(name, runID, label string) {
	if m.cfg.LockDir == "" {
		return
	}
	line := name + " " + runID + " =" + strings.Join(strings.Fields(label), " ") + "\n"
	stagingMu.Lock()
	defer stagingMu.Unlock()
	f, err := os.OpenFile(m.runsFile(m.serverID), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		m.log.Warn("list a session for the next server", "err", err)
		return
	}
	defer f.Close()
	_, _ = f.WriteString(line)
}

// endRuns ends, in each running sandbox, the sessions the gone
// server id listed that still run, records each in the sandbox's
// history, and removes the list. It reports whether every sandbox could
// be asked (else the list stays for the next try).
func (m *Manager) endRuns(ctx context.Context, id string, running map[string]Container) bool {
	data, err := os.ReadFile(m.runsFile(id))
	if err != nil {
		return true
	}
	ok := true
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) < 2 || ValidateName(f[0]) != nil || !isHex(f[1]) {
			continue
		}
		c, live := running[f[0]]
		if !live {
			continue // its container stopped or went: nothing of it runs
		}
		n, err := (containerHost{rt: m.rt, name: idOr(c)}).killRunCount(ctx, f[1])
		if err != nil {
			m.log.Warn("end a killed server's session", "sandbox", f[0], "err", err)
			ok = false
			continue
		}
		if n > 0 {
			cmd := "terminal"
			if len(f) == 3 {
				if label, ok := strings.CutPrefix(f[2], "="); ok && label != "" {
					cmd = label
				} else if f[2] != "" {
					cmd = "terminal: " + f[2]
				}
			}
			m.history.Add(f[0], cmd, shell.Result{ExitCode: 128 + 9}, fmt.Errorf("ended: the server that ran it was killed; a later server found %d of its processes still running and ended them", n))
		}
	}
	if ok {
		_ = os.Remove(m.runsFile(id))
	}
	return ok
}

// killRunCount counts the processes marked with runID (guest.RunVar) and,
// if there are any, ends them (KillRun); it returns how many there were.
func (h containerHost) killRunCount(ctx context.Context, runID string) (int, error) {
	res, err := h.rt.Exec(ctx, h.name, ExecSpec{Argv: []string{"sh", "-c",
		`n=0; for e in /proc/[0-9]*/environ; do case "$(tr '\000' '\n' <"$e" 2>/dev/null)" in *"` + guest.RunVar + `=$1"*) n=$((n+1)) ;; esac; done; echo "$n"`, "sh", runID}})
	if err != nil {
		return 0, err
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if n == 0 {
		return 0, nil
	}
	return n, h.KillRun(ctx, noShell, runID, false)
}
