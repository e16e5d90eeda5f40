package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/pysession"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// PythonOutput is the python tool's result.
type PythonOutput struct {
	Sandbox string `json:"sandbox"`
	Session string `json:"session"`
	// Count numbers the session's calls from 1: 1 is a new interpreter.
	Count  int    `json:"count"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Truncated is set when output over max_output was cut to its head
	// and tail (the text says how many bytes were left out).
	Truncated bool `json:"truncated,omitempty"`
	// Result is the repr of the last expression's value (not None).
	Result *string `json:"result,omitempty"`
	// Error is the exception the code raised.
	Error       *pysession.Exception `json:"error,omitempty"`
	Interrupted bool                 `json:"interrupted,omitempty"`
	DurationMS  int64                `json:"duration_ms"`
}

func (s *Server) pythonTool() tool {
	return tool{group: "core", handler: s.handlePython, def: newTool[PythonOutput]("python", "Run Python",
		"Run Python 3 in a session keeping variables and imports; timeouts raise KeyboardInterrupt. "+
			"Returns output, the last expression's repr, tracebacks, matplotlib figures as images.",
		openWorld(mutating(false)),
		mcp.WithString("code", mcp.Required(), mcp.Description("Python source.")),
		mcp.WithString("session", mcp.Description("Session (default: default).")),
		mcp.WithBoolean("reset", mcp.Description("Restart the session first.")),
		sandboxParam(),
		timeoutParam(),
		maxOutputParam(),
	)}
}

func (s *Server) handlePython(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	code, err := req.RequireString("code")
	if err != nil {
		return argError("python: `code` is required"), nil
	}
	name, timeout, limit, bad := commandArgs(req, "python", defaultTimeout)
	if bad != nil {
		return bad, nil
	}
	session := req.GetString("session", sandbox.DefaultPythonSession)
	if err := pysession.ValidateName(session); err != nil {
		return argError("python: %v", err), nil
	}
	if req.GetBool("reset", false) {
		ended, err := s.m.ResetPython(name, session)
		if err != nil {
			return failure(ctx, "python", err), nil
		}
		if strings.TrimSpace(code) == "" { // only the end of the session was asked for
			text := fmt.Sprintf("session %q of sandbox %q ended; its processes are gone", session, name)
			if !ended {
				text = fmt.Sprintf("no session %q runs in sandbox %q", session, name)
			}
			return mcp.NewToolResultStructured(PythonOutput{Sandbox: name, Session: session}, text), nil
		}
	}
	var seen atomic.Pointer[string]
	none := "no output yet"
	seen.Store(&none)
	stop := s.reportProgress(ctx, req, func(running time.Duration) string {
		return fmt.Sprintf("running %s; %s", running.Round(time.Second), *seen.Load())
	})
	res, err := s.m.RunPython(ctx, name, session, pysession.Request{Code: code, Timeout: time.Duration(timeout * float64(time.Second)), Limit: limit,
		Progress: func(total int64, newest string) {
			msg := fmt.Sprintf("%d bytes of output", total)
			if newest != "" {
				msg += "; newest: " + newest
			}
			seen.Store(&msg)
		}})
	stop()
	if err != nil {
		var stop *pysession.StopError
		if errors.As(err, &stop) {
			return mcp.NewToolResultError(fmt.Sprintf("python in sandbox %q, session %q: %v", name, session, err)), nil
		}
		if errors.Is(err, pysession.ErrTooMany) {
			return mcp.NewToolResultError(fmt.Sprintf("python in sandbox %q, session %q: %v: run in one of them, or end one with reset=true and empty code", name, session, err)), nil
		}
		return failure(ctx, fmt.Sprintf("python in sandbox %q, session %q", name, session), err), nil
	}
	out := PythonOutput{
		Sandbox: name, Session: session, Count: res.Count,
		Stdout: res.Stdout.Text(), Stderr: res.Stderr.Text(), Truncated: res.Stdout.Truncated() || res.Stderr.Truncated(),
		Result: res.Value, Error: res.Error, Interrupted: res.Interrupted,
		DurationMS: int64(res.Seconds * 1000),
	}
	images, names, notes := pythonImages(res.Images)
	s.notePythonFiles(name, res.Images)

	var text strings.Builder
	fmt.Fprintf(&text, "python %s · session %q #%d · %s", res.Version, session, res.Count, fmtDuration(time.Duration(res.Seconds*float64(time.Second))))
	if booted := bootWord(res.Boot); booted != "" {
		fmt.Fprintf(&text, " · sandbox %q %s", name, booted)
	}
	text.WriteByte('\n')
	switch {
	case res.Count == 1 && res.Ended != "":
		fmt.Fprintf(&text, "[a new interpreter: the session's previous one ended (%s); its variables and imports are gone]\n", res.Ended)
	case res.Count == 1:
		text.WriteString("[a new interpreter]\n")
	}
	text.WriteString(out.Stdout)
	if out.Stderr != "" {
		if out.Stdout != "" && !strings.HasSuffix(out.Stdout, "\n") {
			text.WriteByte('\n')
		}
		text.WriteString("--- stderr ---\n")
		text.WriteString(out.Stderr)
	}
	if res.Value != nil {
		if text.Len() > 0 && !strings.HasSuffix(text.String(), "\n") {
			text.WriteByte('\n')
		}
		fmt.Fprintf(&text, "Out[%d]: %s", res.Count, *res.Value)
	}
	if res.Error != nil {
		if !strings.HasSuffix(text.String(), "\n") {
			text.WriteByte('\n')
		}
		text.WriteString(res.Error.Traceback)
	}
	if res.Interrupted {
		fmt.Fprintf(&text, "\n[interrupted with KeyboardInterrupt at %s; the session keeps its state. Run long work with bg, or raise timeout]", res.InterruptedBy)
	}
	if out.Truncated {
		text.WriteString("\n[output over max_output: its head and tail are shown]")
	}
	for _, n := range notes {
		fmt.Fprintf(&text, "\n[%s]", n)
	}
	if len(images) > 0 {
		fmt.Fprintf(&text, "\n[attached as images: %s]", strings.Join(names, ", "))
	}
	result := mcp.NewToolResultStructured(out, text.String())
	for _, img := range images {
		result.Content = append(result.Content, img)
	}
	result.IsError = res.Error != nil
	return result, nil
}

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// pythonImages turns the driver's figures into image content, keeping
// only well-formed PNGs within pysession.MaxImage: they come from the
// sandbox.
func pythonImages(imgs []pysession.Image) (out []mcp.ImageContent, names, notes []string) {
	for _, img := range imgs {
		if img.Error != "" {
			notes = append(notes, "an image could not be attached: "+printable(img.Error, 300))
			continue
		}
		if len(img.Data) > base64.StdEncoding.EncodedLen(pysession.MaxImage) {
			notes = append(notes, "an image over 1 MiB was left out")
			continue
		}
		data, err := base64.StdEncoding.DecodeString(img.Data)
		if err != nil || img.Format != "png" || !bytes.HasPrefix(data, pngSignature) {
			notes = append(notes, "an image that is not a PNG was left out")
			continue
		}
		out = append(out, mcp.NewImageContent(img.Data, "image/png"))
		names = append(names, printable(img.Name, 200))
	}
	return out, names, notes
}

// notePythonFiles records the files of the outputs directory a python
// call sent as images, so that exec's next look does not send them again.
func (s *Server) notePythonFiles(box string, imgs []pysession.Image) {
	for _, img := range imgs {
		if f := img.File; f != nil && img.Error == "" && path.Dir(img.Name) == guest.OutputsDir {
			s.attached.first(box, path.Base(img.Name), f.Ino, f.Size, f.MtimeNs)
		}
	}
}
