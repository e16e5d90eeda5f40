package mcpserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func (s *Server) writeFileTool() tool {
	return tool{group: "core", handler: s.handleWriteFile, def: newTool[FileWritten]("write_file", "Write a file",
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
	if err := s.m.WriteFile(ctx, name, path, data, req.GetBool("append", false)); err != nil {
		return failure(ctx, fmt.Sprintf("write_file in sandbox %q", name), err), nil
	}
	out := FileWritten{Sandbox: name, Path: path, Bytes: len(data)}
	return mcp.NewToolResultStructured(out, fmt.Sprintf("wrote %d bytes to %s", len(data), path)), nil
}

func (s *Server) readFileTool() tool {
	return tool{group: "core", handler: s.handleReadFile, def: newTool[FileContent]("read_file", "Read a file",
		"Read a regular file from a sandbox (not a device or fifo; at most 1 MiB per call; use offset and length for larger files). "+
			"Non-UTF-8 content needs encoding=base64 to come back exactly.",
		readOnly(),
		mcp.WithString("path", mcp.Required(), mcp.Description("File path in the sandbox.")),
		sandboxParam(),
		encodingParam("text, or base64 for exact bytes."),
		mcp.WithInteger("offset", mcp.Description("Byte offset to start at."), mcp.Min(0), mcp.DefaultNumber(0)),
		mcp.WithInteger("length", mcp.Description("Bytes to read (default: to the end, at most 1 MiB)."), mcp.Min(0), mcp.Max(sandbox.MaxReadFile)),
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
	data, err := s.m.ReadFile(ctx, name, path, offset, length)
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
	files := make(map[string][]byte, len(raw))
	for p, v := range raw {
		content, ok := v.(string)
		if !ok {
			return argError("batch_write: content of %q must be a string", p), nil
		}
		files[p] = []byte(content)
	}
	done, err := s.m.WriteFiles(ctx, name, files)
	out := FilesWritten{Sandbox: name, Files: []FileWritten{}}
	for _, p := range done {
		out.Files = append(out.Files, FileWritten{Sandbox: name, Path: p, Bytes: len(files[p])})
	}
	if err != nil {
		return failure(ctx, fmt.Sprintf("batch_write in sandbox %q (wrote %d of %d files before this failure)", name, len(done), len(files)), err), nil
	}
	paths := done
	return mcp.NewToolResultStructured(out, fmt.Sprintf("wrote %d files: %s", len(out.Files), strings.Join(paths, ", "))), nil
}
