// Package atomicfile writes files that land whole or not at all.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data, with permissions mode: it writes a
// temporary file beside path, syncs it, and renames it over path, so a
// reader (or a server started after a kill) finds the old contents or the
// new, never a part. The temporary file is removed when any step fails.
func Write(path string, data []byte, mode os.FileMode) error {
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
