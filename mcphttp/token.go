package mcphttp

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// minTokenLen is the shortest token a token file may hold.
const minTokenLen = 16

// LoadOrCreateToken returns the bearer token kept in path, creating the
// file with a new random token (256 bits, hex) readable by its owner only
// when there is none; created says which. The file lands whole or not at
// all, and two servers starting at once end up with one token. A file
// that others may read, or that holds too short a token, is refused.
func LoadOrCreateToken(path string) (token string, created bool, err error) {
	tok, err := readToken(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("token file: %w", err)
	}
	var b [32]byte
	rand.Read(b[:])
	tok = hex.EncodeToString(b[:])
	f, err := os.CreateTemp(filepath.Dir(path), ".token-*")
	if err != nil {
		return "", false, fmt.Errorf("token file: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.WriteString(tok + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", false, fmt.Errorf("token file: %w", err)
	}
	// A link, unlike a rename, does not replace a file another server
	// made in the meantime: then its token is the one.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			tok, err := readToken(path)
			return tok, false, err
		}
		return "", false, fmt.Errorf("token file: %w", err)
	}
	return tok, true, nil
}

// readToken reads the token in path from a regular file that only this
// user may read: its own, with no rights for group or others, or root's
// that its group (the process's, as a pod's fsGroup makes a secret's) may
// read and nobody else may, nor anyone but root change. A link is
// followed only if root made it (a Kubernetes secret's files are links
// into its volume's current data), and then to a file of root's only:
// nobody else can point the path at a file whose content they know.
func readToken(path string) (string, error) {
	flags := os.O_RDONLY | syscall.O_NOFOLLOW
	followed := false
	if li, err := os.Lstat(path); err == nil && li.Mode()&fs.ModeSymlink != 0 {
		if st, ok := li.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
			return "", fmt.Errorf("token file %s: a link, and not one of root's: name the file itself", path)
		}
		flags, followed = os.O_RDONLY, true
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s: not a regular file", path)
	}
	perm := fi.Mode().Perm()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		switch uid := int(st.Uid); {
		case followed && uid != 0:
			return "", fmt.Errorf("token file %s: root's link leads to a file of uid %d, not of root's", path, st.Uid)
		case uid == os.Geteuid():
			if perm&0o077 != 0 {
				return "", fmt.Errorf("token file %s: others may read it (mode %04o): chmod 600 it", path, perm)
			}
		case uid == 0:
			if perm&0o037 != 0 {
				return "", fmt.Errorf("token file %s: root's, and others than its group may read it, or its group change it (mode %04o): a file of root's must be 0440 or less", path, perm)
			}
		default:
			return "", fmt.Errorf("token file %s: owned by uid %d, not by this user (uid %d) nor root: whoever owns it chose the token", path, st.Uid, os.Geteuid())
		}
	} else if followed || perm&0o077 != 0 {
		return "", fmt.Errorf("token file %s: others may read it (mode %04o), or it is a link: chmod 600 it, and name the file itself", path, perm)
	}
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	tok := strings.TrimSpace(string(b[:n]))
	if len(tok) < minTokenLen || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("token file %s: holds no token of at least %d characters on one line", path, minTokenLen)
	}
	return tok, nil
}
