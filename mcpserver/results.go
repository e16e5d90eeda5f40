package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Annotation presets: every tool uses exactly one.
func readOnly() []mcp.ToolOption {
	return []mcp.ToolOption{
		mcp.WithReadOnlyHintAnnotation(true), mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true), mcp.WithOpenWorldHintAnnotation(false),
	}
}

// mutating tools change the sandbox but destroy nothing the user cannot redo.
func mutating(idempotent bool) []mcp.ToolOption {
	return []mcp.ToolOption{
		mcp.WithReadOnlyHintAnnotation(false), mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(idempotent), mcp.WithOpenWorldHintAnnotation(false),
	}
}

// destructive tools may delete what cannot be recovered.
func destructive(idempotent bool) []mcp.ToolOption {
	return []mcp.ToolOption{
		mcp.WithReadOnlyHintAnnotation(false), mcp.WithDestructiveHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(idempotent), mcp.WithOpenWorldHintAnnotation(false),
	}
}

// openWorld marks a tool that reaches outside the sandbox (package mirrors).
func openWorld(opts []mcp.ToolOption) []mcp.ToolOption {
	return append(opts, mcp.WithOpenWorldHintAnnotation(true))
}

// newTool defines a tool whose structured content is an Out.
func newTool[Out any](name, title, desc string, ann []mcp.ToolOption, params ...mcp.ToolOption) mcp.Tool {
	opts := append([]mcp.ToolOption{mcp.WithToolTitle(title), mcp.WithDescription(desc), mcp.WithOutputSchema[Out]()}, params...)
	return mcp.NewTool(name, append(opts, ann...)...)
}

// sandboxParam is the optional sandbox name every tool takes.
func sandboxParam() mcp.ToolOption {
	return mcp.WithString("sandbox", mcp.Description(`Sandbox name (default "default").`),
		mcp.Pattern(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`), mcp.MaxLength(sandbox.MaxNameLen))
}

// sandboxArg returns the sandbox argument, validated.
func sandboxArg(req mcp.CallToolRequest) (string, error) {
	name := req.GetString("sandbox", "")
	if name == "" {
		name = sandbox.DefaultName
	}
	if err := sandbox.ValidateName(name); err != nil {
		return "", fmt.Errorf("%w; names are 1-63 letters, digits, '_', '.', '-', starting with a letter or digit", err)
	}
	return name, nil
}

// failure turns an error from the Manager into an isError result. Engine
// errors already carry their hint ("try: …"), so the model can tell the
// user what to run.
func failure(ctx context.Context, what string, err error) *mcp.CallToolResult {
	if ctx.Err() != nil && !errors.Is(err, sandbox.ErrCutShort) {
		return mcp.NewToolResultError(what + ": canceled")
	}
	return mcp.NewToolResultError(what + ": " + err.Error())
}

func argError(format string, args ...any) *mcp.CallToolResult {
	return mcp.NewToolResultError(fmt.Sprintf(format, args...))
}

// encodeBytes renders bytes as text (invalid UTF-8 replaced) or base64.
func encodeBytes(b []byte, encoding string) string {
	if encoding == "base64" {
		return base64.StdEncoding.EncodeToString(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
