package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func (s *Server) writeFileTool() tool {
	return tool{group: "core", handler: s.handleWriteFile, def: newTool[FileWritten]("write_file", "Write a file",
		"Write a file in a sandbox, creating parent directories; relative paths start at the shell's cwd. Overwrites unless append is set. "+
			"Checks what landed; a failure names its cause (no space, read-only…).",
		mutating(false), // append=true adds on every call
		mcp.WithString("path", mcp.Required(), mcp.Description("File path in the sandbox.")),
		mcp.WithString("content", mcp.Required(), mcp.Description("File content (text, or base64 with encoding=base64).")),
		sandboxParam(),
		encodingParam("How content is encoded; base64 writes exact bytes."),
		mcp.WithBoolean("append", mcp.Description("Append instead of overwriting."), mcp.DefaultBool(false)),
		mcp.WithString("sha256", mcp.Description("Hex sha256 the written file must have (with append: the whole file)."),
			mcp.Pattern("^[0-9a-fA-F]{64}$")),
	)}
}

// FileWritten is the structured result of write_file, and one file of
// batch_write's.
type FileWritten struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path"`
	// Bytes were written; Size is the file's size after (-1: a kernel
	// file, whose size says nothing).
	Bytes  int64  `json:"bytes"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
}

func decodeContent(content, encoding string) ([]byte, error) {
	switch encoding {
	case "", "text":
		return []byte(content), nil
	case "base64":
		return base64.StdEncoding.DecodeString(content)
	}
	return nil, fmt.Errorf("encoding must be text or base64")
}

func (s *Server) handleWriteFile(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("write_file: %v", err), nil
	}
	path, err := req.RequireString("path")
	if err != nil || path == "" {
		return argError("write_file: `path` is required"), nil
	}
	content, err := req.RequireString("content")
	if err != nil {
		return argError("write_file: `content` is required (may be empty)"), nil
	}
	data, err := decodeContent(content, req.GetString("encoding", "text"))
	if err != nil {
		return argError("write_file: %v", err), nil
	}
	wr := sandbox.WriteRequest{Path: path, Data: data, Append: req.GetBool("append", false), SHA256: req.GetString("sha256", "")}
	w, err := s.m.WriteFile(ctx, name, wr)
	if err != nil {
		return failure(ctx, fmt.Sprintf("write_file in sandbox %q", name), err), nil
	}
	return mcp.NewToolResultStructured(fileWritten(name, w), writtenText(w, wr.Append)), nil
}

func fileWritten(name string, w sandbox.Written) FileWritten {
	return FileWritten{Sandbox: name, Path: w.Path, Bytes: w.Bytes, Size: w.Size, SHA256: w.SHA256}
}

// writtenText says what landed: "wrote 5 bytes to /a (size checked)".
func writtenText(w sandbox.Written, appended bool) string {
	verb := "wrote"
	if appended {
		verb = "appended"
	}
	t := fmt.Sprintf("%s %d bytes to %s", verb, w.Bytes, w.Path)
	switch {
	case w.Size < 0:
		t += " (a kernel file: its size and content cannot be checked)"
	case appended:
		t += fmt.Sprintf(" (size checked: the file now holds %d bytes)", w.Size)
	default:
		t += " (size checked)"
	}
	if w.SHA256 != "" {
		t += "; sha256 checked"
	}
	return t
}

func (s *Server) readFileTool() tool {
	return tool{group: "core", handler: s.handleReadFile, def: newTool[FileContent]("read_file", "Read a file",
		"Read a regular file from a sandbox, at most 1 MiB a call (page with offset/length or line/lines); "+
			"encoding=base64 for non-UTF-8.",
		readOnly(),
		mcp.WithString("path", mcp.Required(), mcp.Description("File path in the sandbox.")),
		sandboxParam(),
		encodingParam("text, or base64 for exact bytes."),
		mcp.WithInteger("offset", mcp.Description("Byte offset to start at."), mcp.Min(0), mcp.DefaultNumber(0)),
		mcp.WithInteger("length", mcp.Description("Bytes to read (default: to the end)."), mcp.Min(0), mcp.Max(sandbox.MaxReadFile)),
		mcp.WithInteger("line", mcp.Description("First line (1-based)."), mcp.Min(1)),
		mcp.WithInteger("lines", mcp.Description("Line count (default: all)."), mcp.Min(1)),
	)}
}

// FileContent is the structured result of read_file.
type FileContent struct {
	Sandbox  string `json:"sandbox"`
	Path     string `json:"path"`
	Content  string `json:"content"`
	Encoding string `json:"encoding"`
	Bytes    int    `json:"bytes"`
	Offset   int64  `json:"offset,omitempty"`
	ValidUTF bool   `json:"valid_utf8"`
}

func (s *Server) handleReadFile(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("read_file: %v", err), nil
	}
	path, err := req.RequireString("path")
	if err != nil || path == "" {
		return argError("read_file: `path` is required"), nil
	}
	encoding := req.GetString("encoding", "text")
	if encoding != "text" && encoding != "base64" {
		return argError("read_file: encoding must be text or base64"), nil
	}
	// Read as whole numbers in range: GetInt would wrap 1e19 to a negative
	// number, and a line past any file would read from its start.
	var n [4]int64
	for i, key := range []string{"offset", "length", "line", "lines"} {
		if n[i], err = intArg(req, key, 0, 0, maxOffset); err != nil {
			return argError("read_file: %v", err), nil
		}
	}
	offset, length, line, lines := n[0], n[1], n[2], n[3]
	var data []byte
	switch {
	case line > 0 && (offset > 0 || length > 0):
		return argError("read_file: give either offset and length (bytes) or line and lines, not both"), nil
	case lines > 0 && line == 0:
		return argError("read_file: lines needs line, the first line to read (1-based)"), nil
	case line > 0:
		data, err = s.m.ReadLines(ctx, name, path, line, lines)
	default:
		data, err = s.m.ReadFile(ctx, name, path, offset, length)
	}
	if err != nil {
		return failure(ctx, fmt.Sprintf("read_file in sandbox %q", name), err), nil
	}
	valid := utf8.Valid(data)
	out := FileContent{Sandbox: name, Path: path, Encoding: encoding, Bytes: len(data), Offset: offset, ValidUTF: valid,
		Content: encodeBytes(data, encoding)}
	text := out.Content
	if encoding == "text" && !valid {
		text += "\n[file is not valid UTF-8; invalid bytes shown as \uFFFD; use encoding=base64 for exact bytes]"
	}
	return mcp.NewToolResultStructured(out, text), nil
}

func (s *Server) batchWriteTool() tool {
	return tool{group: "core", handler: s.handleBatchWrite, def: newTool[FilesWritten]("batch_write", "Write several files",
		"Write several text files in a sandbox in one call, making parent directories: all or none. "+
			"Checks each file; on a failure says which and why, and changes nothing.",
		mutating(true),
		mcp.WithObject("files", mcp.Required(), mcp.Description("Map of path to file content."),
			mcp.AdditionalProperties(map[string]any{"type": "string"})),
		sandboxParam(),
	)}
}

// FilesWritten is the structured result of batch_write: the files that
// landed whole, and those that did not.
type FilesWritten struct {
	Sandbox string        `json:"sandbox"`
	Files   []FileWritten `json:"files"`
	Failed  []FileFailed  `json:"failed,omitempty"`
}

// FileFailed is a file of batch_write that did not land whole.
type FileFailed struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}

func (s *Server) handleBatchWrite(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("batch_write: %v", err), nil
	}
	raw, ok := req.GetArguments()["files"].(map[string]any)
	if !ok || len(raw) == 0 {
		return argError("batch_write: `files` must be a non-empty object of path to content"), nil
	}
	reqs := make([]sandbox.WriteRequest, 0, len(raw))
	for p, v := range raw {
		content, ok := v.(string)
		if !ok {
			return argError("batch_write: content of %q must be a string", p), nil
		}
		reqs = append(reqs, sandbox.WriteRequest{Path: p, Data: []byte(content)})
	}
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].Path < reqs[j].Path })
	outs, err := s.m.WriteFiles(ctx, name, reqs)
	if err != nil && !anyLanded(outs) {
		return failure(ctx, fmt.Sprintf("batch_write in sandbox %q (no file was written)", name), err), nil
	}
	out := FilesWritten{Sandbox: name, Files: []FileWritten{}}
	var landed, bad, undone []string
	for _, o := range outs {
		if o.Err == nil {
			out.Files = append(out.Files, fileWritten(name, o.Written))
			landed = append(landed, fmt.Sprintf("%s (%d bytes)", o.Path, o.Bytes))
			continue
		}
		msg := o.Err.Error()
		out.Failed = append(out.Failed, FileFailed{Path: o.Path, Error: msg})
		if errors.Is(o.Err, sandbox.ErrBatchUndone) {
			undone = append(undone, o.Path)
			continue
		}
		bad = append(bad, o.Path+": "+strings.TrimPrefix(msg, o.Path+": "))
	}
	if len(bad) == 0 {
		return mcp.NewToolResultStructured(out, fmt.Sprintf("wrote %d files (sizes checked): %s", len(landed), strings.Join(landed, ", "))), nil
	}
	text := fmt.Sprintf("batch_write in sandbox %q: %d of %d files failed", name, len(bad), len(outs))
	text += "\nfailed:\n  " + strings.Join(bad, "\n  ")
	switch {
	case len(landed) > 0:
		// Only files written in place after the others can fail so.
		text += "\nwritten (sizes checked):\n  " + strings.Join(landed, "\n  ")
	case len(undone) > 0:
		text += "\nno file was written: the batch is all or none, so these were left as they were too:\n  " + strings.Join(undone, "\n  ")
	default:
		text += "\nno file was written"
	}
	res := mcp.NewToolResultStructured(out, text)
	res.IsError = true
	return res, nil
}

func anyLanded(outs []sandbox.WriteOutcome) bool {
	for _, o := range outs {
		if o.Err == nil {
			return true
		}
	}
	return false
}
