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
