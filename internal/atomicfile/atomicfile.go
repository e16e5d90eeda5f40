// Package atomicfile writes files that land whole or not at all.
package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// StaleAfter is how long a temporary file of Write's must have gone
// unwritten (by its modification time) before a later Write of the same
// path takes it for one a killed writer left and removes it: far longer
// than a write takes. A writer stopped that long (a SIGSTOP, a suspended
// machine) or a clock stepped forward can lose its temporary file: its
// Write then fails whole, and the other Write's data stands.
const StaleAfter = 15 * time.Minute

// Write replaces path with data, with permissions mode: it writes a
// temporary file beside path, syncs it, and renames it over path, so a
// reader (or a server started after a kill) finds the old contents or the
// new, never a part. The temporary file is removed when any step fails;
// those a writer killed midway left beside path are removed by the next
// Write of path, once StaleAfter old.
func Write(path string, data []byte, mode os.FileMode) error {
	removeStale(path)
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// removeStale removes temporary files of Write's for path (named
// .<base>.<digits>, as os.CreateTemp makes them) older than StaleAfter.
func removeStale(path string) {
	dir, prefix := filepath.Dir(path), "."+filepath.Base(path)+"."
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || rest == "" || strings.Trim(rest, "0123456789") != "" || !e.Type().IsRegular() {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > StaleAfter {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
