package main

import (
	"os"
	"path/filepath"
	"testing"
)

// sample reads one of the dialect's Apple CLI samples, which the
// dialect's tests feed through its error classification: the stand-in
// must print exactly these texts.
func sample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "sandbox", "apple", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDeleteTexts: volume and image deletes fail with the real texts in
// each version's error form (VolumeDelete.swift, ImageDelete.swift).
func TestDeleteTexts(t *testing.T) {
	for _, v := range []string{"0.8.0", "0.9.0", "0.10.0", "1.2.2", "1.5.0"} {
		form := "0.10-1.x"
		if MustVersion(v).Before("0.10.0") {
			form = "pre-0.10"
		}
		a, _, errb := testApp(v)
		if got, want := errString(t, a.errVolumesMissing([]string{"nope"}))+"\n", sample(t, "stderr-volume-delete-missing-"+form+".txt"); got != want {
			t.Errorf("%s volume missing: %q, want %q", v, got, want)
		}
		a.logVolumeDeleteFailure("busy", volumeInUseDesc("busy"))
		if got, want := errb.String()+errString(t, a.errVolumesDeleteFailed([]string{"busy"}))+"\n", sample(t, "stderr-volume-delete-in-use-"+form+".txt"); got != want {
			t.Errorf("%s volume in use: %q, want %q", v, got, want)
		}
		if got, want := errString(t, a.errImagesDeleteFailed([]string{"nope"}))+"\n", sample(t, "stderr-image-delete-missing-"+form+".txt"); got != want {
			t.Errorf("%s image missing: %q, want %q", v, got, want)
		}
	}
	// Swift prints a Set of several names in hash order; the stand-in sorts.
	a, _, _ := testApp("1.5.0")
	if got := errString(t, a.errVolumesMissing([]string{"b", "a"})); got != `Error: failed to delete one or more volumes: ["a", "b"]` {
		t.Errorf("two missing: %q", got)
	}
}
