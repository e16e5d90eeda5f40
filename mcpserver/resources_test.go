package mcpserver

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestSandboxFileResources: a file in a sandbox reads as a resource by
// its sandbox:// URI, text as text and anything else as a blob; a URI
// that is not one, a bad name, a relative path, a file over the cap and a
// sandbox that does not exist are refused with an error that says why.
func TestSandboxFileResources(t *testing.T) {
	f := &fake{files: map[string][]byte{
		"/workspace/notes.txt": []byte("# notes\n"),
		"/tmp/outputs/a.png":   []byte("\x89PNG\r\n\x1a\nxx"),
		"/workspace/raw":       {0xff, 0x00, 0x01},
		"/workspace/big.txt":   []byte(strings.Repeat("x", maxResource+1)),
	}}
	s := connect(t, f, Options{})
	read := func(uri string) ([]mcp.ResourceContents, error) {
		req := mcp.ReadResourceRequest{}
		req.Params.URI = uri
		res, err := s.c.ReadResource(t.Context(), req)
		if err != nil {
			return nil, err
		}
		return res.Contents, nil
	}

	got, err := read("sandbox://box-one/workspace/notes.txt")
	if tc, ok := firstText(got); err != nil || !ok || tc.Text != "# notes\n" || tc.MIMEType != "text/plain" {
		t.Fatalf("a text file: %+v %v", got, err)
	}
	got, err = read(sandboxFileURI("box-one", "/tmp/outputs/a.png"))
	if bc, ok := firstBlob(got); err != nil || !ok || bc.MIMEType != "image/png" || bc.Blob != base64.StdEncoding.EncodeToString(f.files["/tmp/outputs/a.png"]) {
		t.Fatalf("an image: %+v %v", got, err)
	}
	got, err = read("sandbox://box-one/workspace/raw")
	if bc, ok := firstBlob(got); err != nil || !ok || bc.MIMEType != "application/octet-stream" {
		t.Fatalf("bytes that are not text: %+v %v", got, err)
	}
	for uri, why := range map[string]string{
		"file:///etc/passwd":                  "not found",
		"sandbox://box-one":                   "not found",
		"sandbox://user@box-one/x":            "not found",
		"sandbox://box-one/x?y=1":             "sandbox://NAME/ABSOLUTE/PATH",
		"sandbox://-bad/x":                    "name",
		"sandbox://box-one/workspace/big.txt": "copy it to the host with download",
	} {
		if _, err := read(uri); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v, want an error saying %q", uri, err, why)
		}
	}
	f.errAll = errors.New("no such sandbox")
	if _, err := read("sandbox://gone/workspace/notes.txt"); err == nil || !strings.Contains(err.Error(), "no such sandbox") {
		t.Errorf("a sandbox that is not there: %v", err)
	}
}

func firstText(c []mcp.ResourceContents) (mcp.TextResourceContents, bool) {
	if len(c) != 1 {
		return mcp.TextResourceContents{}, false
	}
	tc, ok := c[0].(mcp.TextResourceContents)
	return tc, ok
}

func firstBlob(c []mcp.ResourceContents) (mcp.BlobResourceContents, bool) {
	if len(c) != 1 {
		return mcp.BlobResourceContents{}, false
	}
	bc, ok := c[0].(mcp.BlobResourceContents)
	return bc, ok
}
