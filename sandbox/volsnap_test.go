package sandbox

import (
	"strings"
	"testing"
)

// TestCloneKeyOf: the key of a clone is read back from its tar's name,
// which a killed server's staging list keeps, so the next server removes
// the clone's volume snapshot too; other names are not taken for one.
func TestCloneKeyOf(t *testing.T) {
	for _, target := range []string{"copy", "a-b_c.d", strings.Repeat("x", 63)} {
		key := cloneKey(target)
		got, ok := cloneKeyOf(workspaceFileName(key))
		if !ok || got != key {
			t.Fatalf("cloneKeyOf(workspaceFileName(%q)) = %q, %v", key, got, ok)
		}
	}
	for _, base := range []string{
		workspaceFileName("snap"),            // a snapshot's tar
		".clone-x.workspace.tar",             // no hash
		".clone-x-abc.workspace.tar",         // a short one
		".clone-x-0123abcd.workspace.tar.gz", // another file
		".sandbox-mcp-partial-1-" + workspaceFileName(cloneKey("x")),
	} {
		if key, ok := cloneKeyOf(base); ok {
			t.Fatalf("cloneKeyOf(%q) = %q", base, key)
		}
	}
}

// TestVolumeSnapshotKeyOf: the name of a snapshot's volume snapshot,
// which a killed server's staging list keeps, is told from other staging
// names, so the next server looks for its record and removes it if none.
func TestVolumeSnapshotKeyOf(t *testing.T) {
	for _, snap := range []string{"s", "a-b_c.d", strings.Repeat("x", 100)} {
		key := volumeSnapshotKey(snap)
		if !volumeSnapshotKeyOf(key) || !isStagingName(key) {
			t.Fatalf("volumeSnapshotKeyOf(%q) is false", key)
		}
	}
	for _, base := range []string{
		".vsnap-",                   // no snapshot, no hex
		".vsnap--0123456789abcdef",  // no snapshot
		".vsnap-s-0123456789abcde",  // a short one
		".vsnap-s-0123456789abcdeg", // not hex
		cloneKey("x"),               // a clone's
		".sandbox-mcp-partial-1-.vsnap-s-0123456789abcdef",
	} {
		if volumeSnapshotKeyOf(base) {
			t.Fatalf("volumeSnapshotKeyOf(%q) is true", base)
		}
	}
}
