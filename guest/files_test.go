package guest

import "testing"

func TestParseWriteStatus(t *testing.T) {
	sum := "30e14955ebf1352266dc2ff8067e68104607e750abb9d3b36582b8af909fcb58"
	st, ok := ParseWriteStatus([]byte("rc=0\nbefore=10\nafter=  1010\nfstype=-\nsha256=" + sum + "\n"))
	if !ok || st != (WriteStatus{Code: 0, Before: 10, After: 1010, SHA256: sum}) {
		t.Fatalf("%+v %v", st, ok)
	}
	st, ok = ParseWriteStatus([]byte("rc=1\nbefore=0\nafter=-\nfstype=proc\nsha256=-\n"))
	if !ok || st != (WriteStatus{Code: 1, After: -1, FSType: "proc"}) {
		t.Fatalf("%+v %v", st, ok)
	}
	// What the sandbox prints is untrusted: anything odd is no status.
	for _, bad := range []string{
		"",
		"rc=0\n",
		"rc=0\nbefore=0\nafter=5\nfstype=-\n", // a field missing
		"rc=0\nbefore=0\nafter=5\nfstype=-\nsha256=-\nextra=1\n", // an unknown one
		"rc=x\nbefore=0\nafter=5\nfstype=-\nsha256=-\n",          // not a number
		"rc=0\nbefore=-3\nafter=5\nfstype=-\nsha256=-\n",         // negative
		"rc=0\nbefore=0\nafter=-7\nfstype=-\nsha256=-\n",         // negative
		"rc=0\nbefore=0\nafter=99999999999999999999\nfstype=-\nsha256=-\n",
		"garbage\nrc=0\nbefore=0\nafter=5\nfstype=-\nsha256=-\n",
	} {
		if st, ok := ParseWriteStatus([]byte(bad)); ok {
			t.Errorf("%q: accepted as %+v", bad, st)
		}
	}
	// A hash that is not one is dropped, so it can never match.
	st, ok = ParseWriteStatus([]byte("rc=0\nbefore=0\nafter=5\nfstype=-\nsha256=zz\n"))
	if !ok || st.SHA256 != "" {
		t.Fatalf("%+v %v", st, ok)
	}
}

func TestFileErrorCause(t *testing.T) {
	for stderr, want := range map[string]string{
		"cat: write error: No space left on device":                       CauseNoSpace,
		"head: error writing 'standard output': No space left on device":  CauseNoSpace,
		"cat: write error: Disk quota exceeded":                           CauseQuota,
		"sh: 5: eval: cannot create /ro/x: Read-only file system":         CauseReadOnly,
		"sh: eval: line 7: can't create /ro/x: Read-only file system":     CauseReadOnly,
		"mkdir: cannot create directory '/ro/sub': Read-only file system": CauseReadOnly,
		"cat: write error: Permission denied":                             CausePermission,
		"sh: 1: cannot create /x: Operation not permitted":                CausePermission,
		"mkdir: cannot create directory '/etc/hostname': Not a directory": CauseNotDir,
		"is a directory":                                   CauseIsDir,
		"cat: write error: File too large":                 CauseTooLarge,
		"not a regular file":                               CauseNotRegular,
		"sh: 1: cannot create /a/b: Directory nonexistent": CauseNoDir,
		"cat: write error: Input/output error":             CauseIO,
		"something else entirely":                          "",
		"":                                                 "",
	} {
		if got := FileErrorCause(stderr); got != want {
			t.Errorf("%q: %q, want %q", stderr, got, want)
		}
	}
}

func TestPseudoFS(t *testing.T) {
	for fs, want := range map[string]bool{"proc": true, "sysfs": true, "cgroup2fs": true, "tmpfs": false, "overlayfs": false, "ext2/ext3": false, "": false} {
		if PseudoFS(fs) != want {
			t.Errorf("%q: %v", fs, !want)
		}
	}
}
