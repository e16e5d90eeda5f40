package mcpserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"mime"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/units"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// A file in a sandbox is a resource, sandbox://NAME/ABSOLUTE/PATH: results
// link to files they could not hold (an image over the size attached),
// and a client reads them with resources/read.
const sandboxFileTemplate = "sandbox://{sandbox}/{+path}"

// maxResource bounds the file a resources/read returns: past it the
// download tool copies the file to the host instead.
const maxResource = 8 << 20

// resourcePart is what one read of a resource's file asks for: as much
// as a read takes.
const resourcePart = sandbox.MaxReadFile

// sandboxFileURI is the resource URI of path (absolute) in sandbox name.
func sandboxFileURI(name, p string) string {
	return (&url.URL{Scheme: "sandbox", Host: name, Path: p}).String()
}

// fileLink is a resource link to path in sandbox name.
func fileLink(name, p, mimeType string, size int64) mcp.ResourceLink {
	return mcp.NewResourceLink(sandboxFileURI(name, p), path.Base(p),
		fmt.Sprintf("%s in sandbox %q (%s)", p, name, units.Human(size)), mimeType)
}

func (s *Server) addResources() {
	s.ms.AddResourceTemplate(mcp.NewResourceTemplate(sandboxFileTemplate, "sandbox file",
		mcp.WithTemplateDescription(fmt.Sprintf("A file in a sandbox by absolute path, e.g. sandbox://default/workspace/plot.png (at most %s; download copies larger ones).", units.Approx(maxResource))),
	), s.readSandboxFile)
}

// readSandboxFile answers resources/read for a sandboxFileTemplate URI. It
// reads only from a sandbox that exists: it creates none.
func (s *Server) readSandboxFile(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	uri := req.Params.URI
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "sandbox" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" ||
		!strings.HasPrefix(u.Path, "/") {
		return nil, fmt.Errorf("want sandbox://NAME/ABSOLUTE/PATH, not %q", uri)
	}
	name, p := u.Hostname(), path.Clean(u.Path)
	if err := sandbox.ValidateName(name); err != nil {
		return nil, fmt.Errorf("%q: %w", uri, err)
	}
	if _, err := s.m.Status(ctx, name); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", name, err)
	}
	var data []byte
	for {
		// In parts: one read returns at most resourcePart bytes.
		part, err := s.m.ReadFile(ctx, name, p, int64(len(data)), resourcePart)
		if err != nil {
			return nil, fmt.Errorf("%s in sandbox %q: %w", p, name, err)
		}
		data = append(data, part...)
		if len(data) > maxResource {
			return nil, fmt.Errorf("%s in sandbox %q is over %s: copy it to the host with download", p, name, units.Approx(maxResource))
		}
		if len(part) < resourcePart {
			break
		}
	}
	mimeType := mime.TypeByExtension(path.Ext(p))
	if i := strings.IndexByte(mimeType, ';'); i >= 0 {
		mimeType = mimeType[:i]
	}
	if mimeType == "" || strings.HasPrefix(mimeType, "text/") {
		if utf8.Valid(data) {
			if mimeType == "" {
				mimeType = "text/plain"
			}
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: mimeType, Text: string(data)}}, nil
		}
		mimeType = "application/octet-stream"
	}
	return []mcp.ResourceContents{mcp.BlobResourceContents{URI: uri, MIMEType: mimeType, Blob: base64.StdEncoding.EncodeToString(data)}}, nil
}
