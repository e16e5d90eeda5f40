package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuildListsTheModulesOfABinary: the document of sandbox-ctl names
// the main module at the release's version, each module built in as its
// dependency, and the toolchain; a bad version or a file that is no Go
// binary is refused.
func TestBuildListsTheModulesOfABinary(t *testing.T) {
	self := filepath.Join(t.TempDir(), "sandbox-ctl")
	if out, err := exec.Command("go", "build", "-o", self, "../../cmd/sandbox-ctl").CombinedOutput(); err != nil {
		t.Fatalf("build sandbox-ctl: %v\n%s", err, out)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b, err := build("v1.2.3", []string{self}, at)
	if err != nil {
		t.Fatal(err)
	}
	var d doc
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.SPDXVersion != "SPDX-2.3" || d.CreationInfo.Created != "2026-01-02T03:04:05Z" || d.Packages[0].VersionInfo != "v1.2.3" ||
		!strings.HasSuffix(d.Packages[0].Name, "sandbox-mcp") {
		t.Fatalf("document: %s", b)
	}
	out := filepath.Join(t.TempDir(), "sbom.json")
	if err := writeFile(out, b); err != nil {
		t.Fatal(err)
	}
	var dep string
	for _, p := range d.Packages[1:] {
		if p.Name != "golang.org/toolchain" {
			dep = p.Name + "@" + p.VersionInfo
			break
		}
	}
	if dep == "" {
		t.Fatal("no dependency listed")
	}
	if err := checkDoc(out, []string{dep}); err != nil {
		t.Fatal(err)
	}
	if err := checkDoc(out, []string{"example.com/not-built@v1.0.0"}); err == nil {
		t.Fatal("a module that is not built in was found")
	}
	again, _ := build("v1.2.3", []string{self}, at)
	if string(again) != string(b) {
		t.Fatal("the same binaries gave two documents")
	}
	if _, err := build("1.2.3", []string{self}, at); err == nil {
		t.Fatal("a version without its v was taken")
	}
	if _, err := build("v1.2.3", []string{out}, at); err == nil {
		t.Fatal("a file that is no Go binary was taken")
	}
}
