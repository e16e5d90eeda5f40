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

func readToken(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
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
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("token file %s: owned by uid %d, not by this user (uid %d): whoever owns it chose the token", path, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("token file %s: others may read it (mode %04o): chmod 600 it", path, fi.Mode().Perm())
	}
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	tok := strings.TrimSpace(string(b[:n]))
	if len(tok) < minTokenLen || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("token file %s: holds no token of at least %d characters on one line", path, minTokenLen)
	}
	return tok, nil
}
