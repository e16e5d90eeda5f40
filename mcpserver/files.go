package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

const (
	maxReadFile   = 1 << 20
	fileOpTimeout = 60 * time.Second
)

// runInternal runs a tool-built command and returns its output, or an
// isError result that says what went wrong.
func (s *Server) runInternal(ctx context.Context, name, label, command string, stdin []byte, limit int) (stdout []byte, code int, errRes *mcp.CallToolResult) {
	var out bytes.Buffer
	errb := &shell.Capture{Limit: 4096}
	capOut := &limitWriter{w: &out, n: limit}
	res, err := s.m.ExecAs(ctx, name, label, shell.Request{
		Command: command, Stdin: stdin, Timeout: fileOpTimeout, Stdout: capOut, Stderr: errb,
	})
	if err != nil {
		return nil, -1, failure(ctx, fmt.Sprintf("%s in sandbox %q", label, name), err)
	}
	if res.TimedOut {
		return nil, -1, argError("%s in sandbox %q: timed out after %s", label, name, fileOpTimeout)
	}
	if res.ExitCode != 0 {
		head, _, _ := errb.Parts()
		return nil, res.ExitCode, argError("%s in sandbox %q: %s", label, name, strings.TrimSpace(string(head)))
	}
	if capOut.over {
		return out.Bytes(), 0, argError("%s in sandbox %q: more than %d bytes; read it in parts with offset and length", label, name, limit)
	}
	return out.Bytes(), 0, nil
}

// limitWriter keeps the first n bytes and notes whether more came.
type limitWriter struct {
	w    *bytes.Buffer
	n    int
	over bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if room := l.n - l.w.Len(); room < len(p) {
		l.over = true
		if room > 0 {
			l.w.Write(p[:room])
		}
		return len(p), nil
	}
	return l.w.Write(p)
}

func (s *Server) writeFileTool() tool {
	return tool{group: "files", handler: s.handleWriteFile, def: newTool("write_file",
		"Write a file in a sandbox, creating parent directories; relative paths are from the shell's current directory. Overwrites unless append is set.",
		mutating(true),
		mcp.WithString("path", mcp.Required(), mcp.Description("File path in the sandbox.")),
		mcp.WithString("content", mcp.Required(), mcp.Description("File content (text, or base64 with encoding=base64).")),
		sandboxParam(),
		encodingParam("How content is encoded; base64 writes exact bytes."),
		mcp.WithBoolean("append", mcp.Description("Append instead of overwriting."), mcp.DefaultBool(false)),
	)}
}

// FileWritten is the structured result of write_file.
type FileWritten struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path"`
	Bytes   int    `json:"bytes"`
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
	script, err := guest.WriteFileScript(path, req.GetBool("append", false))
	if err != nil {
		return argError("write_file: %v", err), nil
	}
	if _, _, errRes := s.runInternal(ctx, name, "write_file "+path, script, data, 4096); errRes != nil {
		return errRes, nil
	}
	out := FileWritten{Sandbox: name, Path: path, Bytes: len(data)}
	return mcp.NewToolResultStructured(out, fmt.Sprintf("wrote %d bytes to %s", len(data), path)), nil
}

func (s *Server) readFileTool() tool {
	return tool{group: "files", handler: s.handleReadFile, def: newTool("read_file",
		"Read a file from a sandbox (at most 1 MiB per call; use offset and length for larger files). "+
			"Non-UTF-8 content needs encoding=base64 to come back exactly.",
		readOnly(),
		mcp.WithString("path", mcp.Required(), mcp.Description("File path in the sandbox.")),
		sandboxParam(),
		encodingParam("text, or base64 for exact bytes."),
		mcp.WithInteger("offset", mcp.Description("Byte offset to start at."), mcp.Min(0), mcp.DefaultNumber(0)),
		mcp.WithInteger("length", mcp.Description("Bytes to read (default: to the end, at most 1 MiB)."), mcp.Min(0), mcp.Max(maxReadFile)),
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
	offset, length := int64(req.GetInt("offset", 0)), int64(req.GetInt("length", 0))
	if length > maxReadFile {
		return argError("read_file: length is at most %d", maxReadFile), nil
	}
	script, err := guest.ReadFileScript(path, offset, length)
	if err != nil {
		return argError("read_file: %v", err), nil
	}
	data, _, errRes := s.runInternal(ctx, name, "read_file "+path, script, nil, maxReadFile)
	if errRes != nil {
		return errRes, nil
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
	return tool{group: "files", handler: s.handleBatchWrite, def: newTool("batch_write",
		"Write several text files in a sandbox in one call, creating parent directories.",
		mutating(true),
		mcp.WithObject("files", mcp.Required(), mcp.Description("Map of path to file content."),
			mcp.AdditionalProperties(map[string]any{"type": "string"})),
		sandboxParam(),
	)}
}

// FilesWritten is the structured result of batch_write.
type FilesWritten struct {
	Sandbox string        `json:"sandbox"`
	Files   []FileWritten `json:"files"`
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
	paths := make([]string, 0, len(raw))
	for p, v := range raw {
		if _, ok := v.(string); !ok {
			return argError("batch_write: content of %q must be a string", p), nil
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	out := FilesWritten{Sandbox: name}
	for _, p := range paths {
		content := raw[p].(string)
		script, err := guest.WriteFileScript(p, false)
		if err != nil {
			return argError("batch_write %s: %v (wrote %d of %d files)", p, err, len(out.Files), len(paths)), nil
		}
		if _, _, errRes := s.runInternal(ctx, name, "batch_write "+p, script, []byte(content), 4096); errRes != nil {
			errRes.Content = append(errRes.Content, mcp.NewTextContent(fmt.Sprintf("wrote %d of %d files before this one", len(out.Files), len(paths))))
			return errRes, nil
		}
		out.Files = append(out.Files, FileWritten{Sandbox: name, Path: p, Bytes: len(content)})
	}
	return mcp.NewToolResultStructured(out, fmt.Sprintf("wrote %d files: %s", len(out.Files), strings.Join(paths, ", "))), nil
}
