package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

const (
	keepOutputs   = 20            // full outputs kept for the output tool
	outputMaxAge  = 2 * time.Hour // and no older than this
	maxOutputRead = 256 << 10
)

// outputStore keeps the full output of the last few commands whose output
// exceeded its cap, as private files, so the omitted middle can be fetched.
type outputStore struct {
	dir    string
	mkdir  sync.Once // the directory is made once, off the exec path
	dirErr error

	mu   sync.Mutex
	kept []string // ids, oldest first
}

func newOutputStore(dir string) *outputStore { return &outputStore{dir: dir} }

// reserve names the spill files of a new command ("" paths when disabled).
func (o *outputStore) reserve() (id, stdoutPath, stderrPath string) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	id = hex.EncodeToString(b[:])
	o.mkdir.Do(func() { o.dirErr = os.MkdirAll(o.dir, 0o700) })
	if o.dir == "" || o.dirErr != nil {
		return id, "", ""
	}
	return id, o.path(id, "stdout"), o.path(id, "stderr")
}

func (o *outputStore) path(id, stream string) string {
	return filepath.Join(o.dir, id+"."+stream)
}

// keep retains id's files and drops the oldest beyond the limits.
func (o *outputStore) keep(id string) {
	o.mu.Lock()
	o.kept = append(o.kept, id)
	var drop []string
	if len(o.kept) > keepOutputs {
		drop = append(drop, o.kept[:len(o.kept)-keepOutputs]...)
		o.kept = append([]string(nil), o.kept[len(o.kept)-keepOutputs:]...)
	}
	o.mu.Unlock()
	for _, d := range drop {
		o.discard(d)
	}
	o.sweepOld()
}

// sweepOld removes files of any server process older than outputMaxAge.
func (o *outputStore) sweepOld() {
	entries, err := os.ReadDir(o.dir)
	if err != nil {
		return
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > outputMaxAge {
			_ = os.Remove(filepath.Join(o.dir, e.Name()))
		}
	}
}

func (o *outputStore) discard(id string) {
	if o.dir == "" {
		return
	}
	_ = os.Remove(o.path(id, "stdout"))
	_ = os.Remove(o.path(id, "stderr"))
}

func validID(id string) bool {
	if len(id) != 12 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

func (s *Server) outputTool() tool {
	return tool{group: "core", handler: s.handleOutput, def: newTool[OutputChunk]("output", "Fetch omitted output",
		"Fetch bytes of an earlier command's full output that were omitted from its result (by output_id). Kept for the last 20 truncated commands.",
		readOnly(),
		mcp.WithString("id", mcp.Required(), mcp.Description("output_id from an exec, python or install result.")),
		mcp.WithString("stream", mcp.Enum("stdout", "stderr"), mcp.DefaultString("stdout")),
		mcp.WithInteger("offset", mcp.Description("Byte offset to start at."), mcp.Min(0), mcp.DefaultNumber(0)),
		mcp.WithInteger("length", mcp.Description("Bytes to return."), mcp.Min(1), mcp.Max(maxOutputRead), mcp.DefaultNumber(65536)),
		encodingParam("text, or base64 for exact bytes."),
	)}
}

// OutputChunk is the structured result of the output tool.
type OutputChunk struct {
	ID       string `json:"id"`
	Stream   string `json:"stream"`
	Offset   int64  `json:"offset"`
	Data     string `json:"data"`
	Encoding string `json:"encoding"`
	Total    int64  `json:"total_bytes"`
	More     bool   `json:"more"`
}

func (s *Server) handleOutput(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id := req.GetString("id", "")
	stream := req.GetString("stream", "stdout")
	offset := int64(req.GetInt("offset", 0))
	length := req.GetInt("length", 65536)
	encoding := req.GetString("encoding", "text")
	if !validID(id) || (stream != "stdout" && stream != "stderr") || offset < 0 || length < 1 || length > maxOutputRead {
		return argError("output: need an id from a truncated result, stream stdout|stderr, offset >= 0, 1 <= length <= %d", maxOutputRead), nil
	}
	if s.outputs.dir == "" {
		return argError("output: full outputs are not kept by this server (no state directory)"), nil
	}
	f, err := os.Open(s.outputs.path(id, stream))
	if err != nil {
		return argError("output: no saved %s for id %q: only the last %d truncated outputs are kept, and only when they were truncated", stream, id, keepOutputs), nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return argError("output: %v", err), nil
	}
	buf := make([]byte, length)
	n, err := f.ReadAt(buf, offset)
	if err != nil && err != io.EOF {
		return argError("output: %v", err), nil
	}
	data := encodeBytes(buf[:n], encoding)
	out := OutputChunk{ID: id, Stream: stream, Offset: offset, Data: data, Encoding: encoding,
		Total: st.Size(), More: offset+int64(n) < st.Size()}
	text := fmt.Sprintf("%s bytes %d-%d of %d\n%s", stream, offset, offset+int64(n), st.Size(), data)
	return mcp.NewToolResultStructured(out, text), nil
}
