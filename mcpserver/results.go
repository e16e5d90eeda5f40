package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
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

// openWorld marks a tool that reaches outside the sandbox: package mirrors,
// or a program of the agent's, which has the network a sandbox has.
func openWorld(opts []mcp.ToolOption) []mcp.ToolOption {
	return append(opts, mcp.WithOpenWorldHintAnnotation(true))
}

// newTool defines a tool whose structured content is an Out.
func newTool[Out any](name, title, desc string, ann []mcp.ToolOption, params ...mcp.ToolOption) mcp.Tool {
	opts := append([]mcp.ToolOption{mcp.WithToolTitle(title), mcp.WithDescription(desc), mcp.WithOutputSchema[Out]()}, params...)
	t := mcp.NewTool(name, append(opts, ann...)...)
	t.InputSchema.AdditionalProperties = false // unknown arguments are refused (validate.go)
	// An output schema describes what the server sends: "no other
	// properties" tells a client nothing, and every byte of tools/list is
	// sent on every turn.
	t.OutputSchema.AdditionalProperties = nil
	for _, p := range t.OutputSchema.Properties {
		dropClosed(p)
	}
	return t
}

// dropClosed removes additionalProperties:false from a schema and those
// under it.
func dropClosed(s any) {
	m, ok := s.(map[string]any)
	if !ok {
		return
	}
	if m["additionalProperties"] == false {
		delete(m, "additionalProperties")
	}
	for _, k := range []string{"properties", "$defs"} {
		if sub, ok := m[k].(map[string]any); ok {
			for _, v := range sub {
				dropClosed(v)
			}
		}
	}
	dropClosed(m["items"])
}

// sandboxParam is the optional sandbox name of a tool that acts on one
// sandbox.
func sandboxParam() mcp.ToolOption {
	return mcp.WithString("sandbox", mcp.Description(`Sandbox name (default "default").`),
		mcp.Pattern(sandboxPattern), mcp.MaxLength(sandbox.MaxNameLen))
}

// sandboxPattern is the schema's form of sandbox.ValidateName.
const sandboxPattern = `^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`

// sandboxArg returns the sandbox argument, validated. Omitted (or null)
// means the default sandbox; an empty name or a value that is not a string
// is an error, so a typo never lands in "default" silently.
func sandboxArg(req mcp.CallToolRequest) (string, error) {
	v, ok := req.GetArguments()["sandbox"]
	if !ok || v == nil {
		return sandbox.DefaultName, nil
	}
	name, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("sandbox must be a string (a sandbox name), not %s; omit it for %q", jsonKindOf(v), sandbox.DefaultName)
	}
	if name == "" {
		return "", fmt.Errorf("sandbox must not be empty; omit it for %q", sandbox.DefaultName)
	}
	if err := sandbox.ValidateName(name); err != nil {
		return "", fmt.Errorf("%w; names are 1-63 letters, digits, '_', '.', '-', starting with a letter or digit", err)
	}
	return name, nil
}

// numberArg returns the number argument key, or def when it is omitted or
// null. A value that is not a number, or outside [lo, hi], is an error that
// states the range (unit, if any, follows it: "seconds").
func numberArg(req mcp.CallToolRequest, key string, def, lo, hi float64, unit string) (float64, error) {
	v, ok := req.GetArguments()[key]
	if !ok || v == nil {
		return def, nil
	}
	rangeText := fmt.Sprintf("between %g and %g", lo, hi)
	if unit != "" {
		rangeText += " " + unit
	}
	n, ok := v.(float64)
	if !ok {
		if i, isInt := v.(int); isInt { // in-process callers
			n, ok = float64(i), true
		}
	}
	if !ok {
		return 0, fmt.Errorf("%s must be a number %s, not %s", key, rangeText, jsonKindOf(v))
	}
	if math.IsNaN(n) || n < lo || n > hi {
		return 0, fmt.Errorf("%s must be %s, not %g", key, rangeText, n)
	}
	return n, nil
}

// intArg is numberArg for whole numbers.
func intArg(req mcp.CallToolRequest, key string, def, lo, hi int64) (int64, error) {
	n, err := numberArg(req, key, float64(def), float64(lo), float64(hi), "")
	if err != nil {
		return 0, err
	}
	if n != math.Trunc(n) {
		return 0, fmt.Errorf("%s must be a whole number between %d and %d, not %g", key, lo, hi, n)
	}
	return int64(n), nil
}

// maxOffset is the largest byte offset an argument may name: the largest
// whole number a JSON number carries exactly.
const maxOffset = 1 << 53

// offsetArg returns a byte-offset argument (a whole number >= 0) and whether
// it was given. A reader that answers with a next offset should clamp it to
// the data's real size, so an offset past the end comes back as the end.
func offsetArg(req mcp.CallToolRequest, key string) (int64, bool, error) {
	if v, ok := req.GetArguments()[key]; !ok || v == nil {
		return 0, false, nil
	}
	n, err := intArg(req, key, 0, 0, maxOffset)
	return n, err == nil, err
}

// jsonKindOf names a decoded JSON value's type as a caller knows it.
func jsonKindOf(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case float64, int, int64:
		return "a number"
	case bool:
		return "true or false"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
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
