package mcpserver

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func TestWriteFileSaysWhatWasChecked(t *testing.T) {
	f := &fake{}
	s := connect(t, f, Options{})
	r := s.call("write_file", map[string]any{"path": "/a", "content": "hello"})
	if r.isError || r.text != "wrote 5 bytes to /a (size checked)" || r.data["size"] != 5.0 || r.data["bytes"] != 5.0 {
		t.Fatalf("%+v", r)
	}
	sum := strings.Repeat("ab", 32)
	r = s.call("write_file", map[string]any{"path": "/a", "content": "x", "append": true, "sha256": sum})
	if r.isError || !strings.HasPrefix(r.text, "appended 1 bytes to /a (size checked: the file now holds 1 bytes); sha256 checked") || r.data["sha256"] != sum {
		t.Fatalf("%+v", r)
	}
	if want := "write default /a 1 true " + sum; f.calls[1] != want {
		t.Fatalf("call %q, want %q", f.calls[1], want)
	}
	f.write = func(req sandbox.WriteRequest) (sandbox.Written, error) {
		return sandbox.Written{Path: req.Path, Bytes: 3, Size: -1}, nil
	}
	r = s.call("write_file", map[string]any{"path": "/proc/1/oom_score_adj", "content": "500"})
	if r.isError || !strings.Contains(r.text, "a kernel file: its size and content cannot be checked") || r.data["size"] != -1.0 {
		t.Fatalf("%+v", r)
	}
}

// TestWriteFileFailureIsAToolError: a write that did not land is an error
// result naming the cause, never "wrote N bytes".
func TestWriteFileFailureIsAToolError(t *testing.T) {
	f := &fake{write: func(req sandbox.WriteRequest) (sandbox.Written, error) {
		return sandbox.Written{}, &sandbox.WriteError{Path: req.Path, Cause: guest.CauseNoSpace, Sent: int64(len(req.Data)), Landed: 2, Size: 2}
	}}
	s := connect(t, f, Options{})
	r := s.call("write_file", map[string]any{"path": "/data/x", "content": "hello"})
	if !r.isError || strings.Contains(r.text, "wrote") ||
		!strings.Contains(r.text, `write_file in sandbox "default": /data/x: no space left on device: 2 of 5 bytes landed`) {
		t.Fatalf("%+v", r)
	}
}

// TestBatchWriteReportsEveryFile: a batch with a failed file says which
// failed and why, and that the others were left as they were.
func TestBatchWriteReportsEveryFile(t *testing.T) {
	f := &fake{write: func(req sandbox.WriteRequest) (sandbox.Written, error) {
		if strings.HasPrefix(req.Path, "/data/") {
			return sandbox.Written{}, &sandbox.WriteError{Path: req.Path, Cause: guest.CauseNoSpace, Sent: int64(len(req.Data)), Landed: 0, Size: 0}
		}
		return sandbox.Written{Path: req.Path, Bytes: int64(len(req.Data)), Size: int64(len(req.Data))}, nil
	}}
	s := connect(t, f, Options{})
	r := s.call("batch_write", map[string]any{"files": map[string]any{"/w/b": "bb", "/data/a": "aaaa", "/w/a": "a"}})
	if !r.isError {
		t.Fatalf("a failed batch is not a success: %+v", r)
	}
	for _, want := range []string{
		`batch_write in sandbox "default": 1 of 3 files failed`,
		"failed:\n  /data/a: no space left on device: 0 of 4 bytes landed",
		"no file was written: the batch is all or none, so these were left as they were too:\n  /w/a\n  /w/b",
	} {
		if !strings.Contains(r.text, want) {
			t.Errorf("text lacks %q:\n%s", want, r.text)
		}
	}
	files, _ := r.data["files"].([]any)
	failed, _ := r.data["failed"].([]any)
	if len(files) != 0 || len(failed) != 3 || failed[0].(map[string]any)["path"] != "/data/a" {
		t.Fatalf("%+v", r.data)
	}

	f.write = nil
	r = s.call("batch_write", map[string]any{"files": map[string]any{"/w/b": "bb", "/w/a": "a"}})
	if r.isError || r.text != "wrote 2 files (sizes checked): /w/a (1 bytes), /w/b (2 bytes)" {
		t.Fatalf("%+v", r)
	}

	// A failure outside the sandbox before anything landed is one error.
	f.errAll = errEngine
	r = s.call("batch_write", map[string]any{"files": map[string]any{"/w/b": "bb", "/w/a": "a"}})
	if !r.isError || !strings.Contains(r.text, "no file was written") || !strings.Contains(r.text, "try: run podman info") {
		t.Fatalf("%+v", r)
	}
}

func TestReadFileRefusalReachesTheAgent(t *testing.T) {
	f := &fake{errAll: &sandbox.ScriptError{Op: "read_file /dev/zero", ExitCode: guest.ExitNotRegular, Stderr: "not a regular file (a character device)"}}
	s := connect(t, f, Options{})
	r := s.call("read_file", map[string]any{"path": "/dev/zero"})
	if !r.isError || !strings.Contains(r.text, "not a regular file (a character device)") {
		t.Fatalf("%+v", r)
	}
}

// Numbers past any file are refused as such, not wrapped to negative ones
// (a huge line read the file from its start; a huge offset was "negative").
func TestReadFileHugeNumbers(t *testing.T) {
	for _, key := range []string{"offset", "length", "line", "lines"} {
		f := &fake{files: map[string][]byte{"/f": []byte("line1\nline2\n")}}
		s := connect(t, f, Options{})
		args := map[string]any{"path": "/f", key: 1e19}
		if key == "lines" {
			args["line"] = 1
		}
		r := s.call("read_file", args)
		if !r.isError || !strings.Contains(r.text, key) || !strings.Contains(r.text, "must be") || len(f.calls) != 0 {
			t.Errorf("%s=1e19: error %v, calls %v: %s", key, r.isError, f.calls, r.text)
		}
	}
}
