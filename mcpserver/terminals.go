package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/terminal"
)

// Terminals keeps the terminal sessions (*terminal.Sessions).
type Terminals interface {
	OpenIn(ctx context.Context, c terminal.Commander, sandbox, command string, cols, rows int) (*terminal.Session, error)
	Get(id string) (*terminal.Session, error)
	Close(id string) (terminal.Info, error)
	List() []terminal.Info
}

// TerminalList is the structured result of terminal_list.
type TerminalList struct {
	Sessions []terminal.Info `json:"sessions"`
}

// TerminalSent is the structured result of terminal_send: what was typed,
// and the screen when the call waited for it.
type TerminalSent struct {
	ID     string           `json:"id"`
	Bytes  int              `json:"bytes"`
	Screen *terminal.Screen `json:"screen,omitempty"`
}

var errNoTerminals = errors.New("terminal sessions are not available in this server")

// maxWaitMS bounds a read's wait.
const maxWaitMS = 30000

const idDesc = "Session id from terminal_open."

func (s *Server) terminalOpenTool() tool {
	return tool{group: "terminals", handler: s.handleTerminalOpen, def: newTool[terminal.Screen]("terminal_open", "Open a terminal session",
		"Run a program behind a terminal in a sandbox (a REPL, a prompting installer, git rebase -i, vi, a curses program) and return its id "+
			"and first screen. Type with terminal_send, look with terminal_read; end it with terminal_close. For commands that need no terminal, use exec.",
		openWorld(mutating(false)),
		sandboxParam(),
		mcp.WithString("command", mcp.Description("Command line, run by sh (default: the login shell).")),
		mcp.WithNumber("cols", mcp.Description("Columns (default 120)."), mcp.Min(1), mcp.Max(terminal.MaxCols)),
		mcp.WithNumber("rows", mcp.Description("Rows (default 40)."), mcp.Min(1), mcp.Max(terminal.MaxRows)),
	)}
}

func (s *Server) terminalSendTool() tool {
	return tool{group: "terminals", handler: s.handleTerminalSend, def: newTool[TerminalSent]("terminal_send", "Type into a terminal",
		"Type text as is, then the named keys in order. With wait_ms, also return the screen as terminal_read does.",
		openWorld(mutating(false)),
		mcp.WithString("id", mcp.Required(), mcp.Description(idDesc)),
		mcp.WithString("text", mcp.Description("Text to type (no Enter is added).")),
		mcp.WithArray("keys", mcp.WithStringItems(), mcp.Description("Keys after the text: Enter, Tab, Esc, Backspace, Up, Down, Left, Right, Home, End, PageUp, PageDown, Ctrl-A … Ctrl-Z.")),
		mcp.WithNumber("wait_ms", mcp.Description("Then wait up to this long for output and return the screen (default 0: do not)."), mcp.Min(0), mcp.Max(maxWaitMS)),
	)}
}

func (s *Server) terminalReadTool() tool {
	return tool{group: "terminals", handler: s.handleTerminalRead, def: newTool[terminal.Screen]("terminal_read", "Read a terminal's screen",
		"Wait up to wait_ms for new output and for it to settle, then return the screen (rows as text, cursor), the output new since the last read "+
			"without control sequences, and whether the program has exited, with its status.",
		readOnly(),
		mcp.WithString("id", mcp.Required(), mcp.Description(idDesc)),
		mcp.WithNumber("wait_ms", mcp.Description("Longest wait for new output (default 1000)."), mcp.Min(0), mcp.Max(maxWaitMS)),
	)}
}

func (s *Server) terminalResizeTool() tool {
	return tool{group: "terminals", handler: s.handleTerminalResize, def: newTool[terminal.Info]("terminal_resize", "Resize a terminal",
		"Change a terminal's size; the program is told.",
		mutating(true),
		mcp.WithString("id", mcp.Required(), mcp.Description(idDesc)),
		mcp.WithNumber("cols", mcp.Required(), mcp.Description("Columns."), mcp.Min(1), mcp.Max(terminal.MaxCols)),
		mcp.WithNumber("rows", mcp.Required(), mcp.Description("Rows."), mcp.Min(1), mcp.Max(terminal.MaxRows)),
	)}
}

func (s *Server) terminalCloseTool() tool {
	return tool{group: "terminals", handler: s.handleTerminalClose, def: newTool[terminal.Info]("terminal_close", "Close a terminal",
		"End a terminal session's program (hang-up, then kill) and forget the session.",
		destructive(false),
		mcp.WithString("id", mcp.Required(), mcp.Description(idDesc)),
	)}
}

func (s *Server) terminalListTool() tool {
	return tool{group: "terminals", handler: s.handleTerminalList, def: newTool[TerminalList]("terminal_list", "List terminal sessions",
		"List this server's terminal sessions (they do not outlive it).",
		readOnly(),
	)}
}

// sizeArgs reads cols and rows.
func sizeArgs(req mcp.CallToolRequest, defCols, defRows int64) (int, int, error) {
	cols, err := intArg(req, "cols", defCols, 1, terminal.MaxCols)
	if err != nil {
		return 0, 0, err
	}
	rows, err := intArg(req, "rows", defRows, 1, terminal.MaxRows)
	if err != nil {
		return 0, 0, err
	}
	return int(cols), int(rows), nil
}

func (s *Server) handleTerminalOpen(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("terminal_open: %v", err), nil
	}
	cols, rows, err := sizeArgs(req, terminal.DefaultCols, terminal.DefaultRows)
	if err != nil {
		return argError("terminal_open: %v", err), nil
	}
	if s.terminals == nil {
		return failure(ctx, "terminal_open", errNoTerminals), nil
	}
	command := req.GetString("command", "")
	if strings.IndexByte(command, 0) >= 0 {
		return argError("terminal_open: the command contains a NUL byte"), nil
	}
	sess, err := s.terminals.OpenIn(ctx, s.m, name, command, cols, rows)
	if err != nil {
		return failure(ctx, "terminal_open", err), nil
	}
	sc := sess.Read(time.Second, ctx.Done())
	return mcp.NewToolResultStructured(sc, fmt.Sprintf("terminal %s open in sandbox %q\n%s", sc.ID, name, renderScreen(sc))), nil
}

func (s *Server) session(req mcp.CallToolRequest, tool string) (*terminal.Session, *mcp.CallToolResult) {
	id := req.GetString("id", "")
	if id == "" {
		return nil, argError("%s: id is required (terminal_list lists the sessions)", tool)
	}
	if s.terminals == nil {
		return nil, mcp.NewToolResultError(tool + ": " + errNoTerminals.Error())
	}
	sess, err := s.terminals.Get(id)
	if err != nil {
		return nil, mcp.NewToolResultError(tool + ": " + err.Error())
	}
	return sess, nil
}

func (s *Server) handleTerminalSend(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	wait, err := intArg(req, "wait_ms", 0, 0, maxWaitMS)
	if err != nil {
		return argError("terminal_send: %v", err), nil
	}
	sess, bad := s.session(req, "terminal_send")
	if bad != nil {
		return bad, nil
	}
	text := req.GetString("text", "")
	keys := req.GetStringSlice("keys", nil)
	if err := sess.Send(text, keys); err != nil {
		return failure(ctx, "terminal_send", err), nil
	}
	out := TerminalSent{ID: sess.ID, Bytes: len(text)}
	msg := fmt.Sprintf("typed %d bytes and %d keys into %s", len(text), len(keys), sess.ID)
	if wait > 0 {
		sc := sess.Read(time.Duration(wait)*time.Millisecond, ctx.Done())
		out.Screen = &sc
		msg += "\n" + renderScreen(sc)
	}
	return mcp.NewToolResultStructured(out, msg), nil
}

func (s *Server) handleTerminalRead(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	wait, err := intArg(req, "wait_ms", 1000, 0, maxWaitMS)
	if err != nil {
		return argError("terminal_read: %v", err), nil
	}
	sess, bad := s.session(req, "terminal_read")
	if bad != nil {
		return bad, nil
	}
	sc := sess.Read(time.Duration(wait)*time.Millisecond, ctx.Done())
	return mcp.NewToolResultStructured(sc, renderScreen(sc)), nil
}

func (s *Server) handleTerminalResize(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	for _, k := range []string{"cols", "rows"} {
		if v, ok := req.GetArguments()[k]; !ok || v == nil {
			return argError("terminal_resize: %s is required", k), nil
		}
	}
	cols, rows, err := sizeArgs(req, 0, 0)
	if err != nil {
		return argError("terminal_resize: %v", err), nil
	}
	sess, bad := s.session(req, "terminal_resize")
	if bad != nil {
		return bad, nil
	}
	if err := sess.Resize(cols, rows); err != nil {
		return failure(ctx, "terminal_resize", err), nil
	}
	return mcp.NewToolResultStructured(sess.Info(), fmt.Sprintf("%s is now %dx%d", sess.ID, cols, rows)), nil
}

func (s *Server) handleTerminalClose(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id := req.GetString("id", "")
	if id == "" {
		return argError("terminal_close: id is required (terminal_list lists the sessions)"), nil
	}
	if s.terminals == nil {
		return failure(ctx, "terminal_close", errNoTerminals), nil
	}
	in, err := s.terminals.Close(id)
	if err != nil {
		return failure(ctx, "terminal_close", err), nil
	}
	msg := "closed " + id
	if in.ExitCode != nil {
		msg += fmt.Sprintf(" (exit %d)", *in.ExitCode)
	}
	return mcp.NewToolResultStructured(in, msg), nil
}

func (s *Server) handleTerminalList(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	out := TerminalList{Sessions: []terminal.Info{}}
	if s.terminals == nil {
		return mcp.NewToolResultStructured(out, "no terminal sessions (not available in this server)"), nil
	}
	out.Sessions = s.terminals.List()
	if len(out.Sessions) == 0 {
		return mcp.NewToolResultStructured(out, "no terminal sessions"), nil
	}
	var b strings.Builder
	for _, in := range out.Sessions {
		state := "running"
		if in.ExitCode != nil {
			state = fmt.Sprintf("exited %d", *in.ExitCode)
		}
		fmt.Fprintf(&b, "%s  %s  %dx%d  %s  %s\n", in.ID, in.Sandbox, in.Cols, in.Rows, state, in.Command)
	}
	return mcp.NewToolResultStructured(out, strings.TrimSuffix(b.String(), "\n")), nil
}

// renderScreen is a read's text: a header, the screen between rules, and
// the new output.
func renderScreen(sc terminal.Screen) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s %dx%d, cursor row %d col %d", sc.ID, sc.Cols, sc.Rows, sc.CursorRow, sc.CursorCol)
	if sc.Exited && sc.ExitCode != nil {
		fmt.Fprintf(&b, ", exited with status %d", *sc.ExitCode)
		if sc.ExitNote != "" {
			b.WriteString(" (" + sc.ExitNote + ")")
		}
	}
	b.WriteString("]\n--- screen ---\n")
	for _, l := range sc.Lines {
		b.WriteString(l + "\n")
	}
	b.WriteString("--- end of screen ---")
	if strings.Count(sc.Output, "\n") >= sc.Rows {
		// More than a screenful came: what scrolled by is in the output.
		tail := sc.Output
		if len(tail) > 4096 {
			tail = "…" + strings.ToValidUTF8(tail[len(tail)-4096:], "")
		}
		b.WriteString("\n--- new output (the screen shows its end) ---\n" + tail)
	}
	if sc.OutputDropped > 0 {
		fmt.Fprintf(&b, "\n(%d bytes of earlier output dropped)", sc.OutputDropped)
	}
	return b.String()
}
