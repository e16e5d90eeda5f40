package sandbox

import (
	"strings"
	"testing"
)

// Snapshot names that differ only in case get workspace files whose names
// differ in more than case, so a case-insensitive file system (macOS's
// default) keeps them apart.
func TestWorkspaceFileNamesSurviveCaseFolding(t *testing.T) {
	seen := map[string]string{}
	for _, n := range []string{"Foo", "foo", "FOO", "fOo", ".clone-Web", ".clone-web"} {
		f := workspaceFileName(n)
		if !strings.HasPrefix(f, n+"-") || !strings.HasSuffix(f, ".workspace.tar") || strings.ContainsAny(f, "/\x00") {
			t.Errorf("%q: file %q", n, f)
		}
		folded := strings.ToLower(f)
		if other, ok := seen[folded]; ok {
			t.Errorf("%q and %q share the file %q on a case-insensitive file system", n, other, folded)
		}
		seen[folded] = n
	}
	if workspaceFileName("foo") != workspaceFileName("foo") {
		t.Fatal("not stable")
	}
}
