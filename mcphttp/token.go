package mcphttp

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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
// that only its group (one of the process's, as a pod's fsGroup makes a
// secret's) may read, and only root change. The path is walked a part at
// a time (safePath): nobody but root and this user can have put a link or
// a file on it, so nobody else can point it at a file whose content they
// know. A FIFO there does not hold the open.
func readToken(path string) (string, error) {
	real, err := safePath(path)
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
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
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok || int(st.Uid) == os.Geteuid():
		if perm&0o077 != 0 {
			return "", fmt.Errorf("token file %s: others may read it (mode %04o): chmod 600 it", path, perm)
		}
	case st.Uid == 0:
		if perm&0o037 != 0 || !inGroup(int(st.Gid)) {
			return "", fmt.Errorf("token file %s: root's, and others than its group (which must be this process's) may read it, or its group change it (mode %04o, group %d): a file of root's may give its group read only", path, perm, st.Gid)
		}
	default:
		return "", fmt.Errorf("token file %s: owned by uid %d, not by this user (uid %d) nor root: whoever owns it chose the token", path, st.Uid, os.Geteuid())
	}
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	tok := strings.TrimSpace(string(b[:n]))
	if len(tok) < minTokenLen || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("token file %s: holds no token of at least %d characters on one line", path, minTokenLen)
	}
	return tok, nil
}

// inGroup reports whether gid is the process's group or one of its
// supplementary groups.
func inGroup(gid int) bool {
	if gid == os.Getegid() {
		return true
	}
	groups, _ := os.Getgroups()
	return slices.Contains(groups, gid)
}

// maxLinks bounds the links safePath follows.
const maxLinks = 16

// safePath resolves path a part at a time, as OpenSSH's safe_path checks
// one, and returns it without links. Every directory on the way, and
// every link followed, must be root's or this user's, and a directory
// others may write must be sticky (so its entries of root's and this
// user's stay theirs) with the next part root's or this user's. Then
// nobody else can have put a link or file on the path, nor move one
// there while it is opened.
func safePath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	trusted := func(fi fs.FileInfo) bool {
		st, ok := fi.Sys().(*syscall.Stat_t)
		return !ok || st.Uid == 0 || int(st.Uid) == os.Geteuid()
	}
	done := "/"
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(abs), "/"), "/")
	links := 0
	for len(rest) > 0 {
		part := rest[0]
		rest = rest[1:]
		if part == "" || part == "." {
			continue
		}
		if part == ".." {
			done = filepath.Dir(done)
			continue
		}
		dir, err := os.Lstat(done)
		if err != nil {
			return "", err
		}
		if !trusted(dir) {
			return "", fmt.Errorf("directory %s belongs to another user, who could change what the path names", done)
		}
		next := filepath.Join(done, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if dir.Mode().Perm()&0o022 != 0 && (dir.Mode()&fs.ModeSticky == 0 || !trusted(fi)) {
			return "", fmt.Errorf("directory %s may be written by others, who could put another file or link at %s", done, next)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if !trusted(fi) {
			return "", fmt.Errorf("%s is a link of another user's", next)
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("more than %d links", maxLinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			done = "/"
		}
		rest = append(strings.Split(strings.TrimPrefix(filepath.Clean(target), "/"), "/"), rest...)
	}
	return done, nil
}
