package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/units"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/diskguard"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// Spilled output. A command whose output passes its max_output keeps head
// and tail in memory (shell.Capture) and, here, the whole stream in
// <outputs>/<id>.stdout and <id>.stderr, so the output tool can fetch the
// omitted middle. The host pays for that disk, so it is bounded three ways:
//
//   - per call: both streams of one call together save at most callCap
//     bytes. Past it the saved copy is cut (the result says at which byte)
//     while the command runs on and its head and tail stay exact.
//   - per directory: the spills of every server sharing the directory hold
//     at most totalCap bytes. A spill that needs room removes the oldest
//     finished spills first, and is cut when only spills still being
//     written are left.
//   - by age: spills older than outputMaxAge are removed when the server
//     starts and, while spills are made, at most once a minute.
//
// A spill being written holds a shared flock on its file; removal takes an
// exclusive one without waiting, so no server removes a file that another
// is still writing.

const (
	// DefaultOutputsCap is the default size cap of the outputs directory.
	DefaultOutputsCap = 256 << 20
	// DefaultOutputCallCap is the default cap of one call's saved output.
	DefaultOutputCallCap = 64 << 20
	// outputMaxAge is how long a spill is kept at most, whatever the cap: a
	// day covers going back to an output within a working session without
	// keeping last week's builds.
	outputMaxAge = 24 * time.Hour
	// spillChunk is how many bytes a spill reserves of the directory cap at
	// a time; another server sharing the directory may see the directory
	// this much over the cap per spill being written.
	spillChunk = 4 << 20
	// sweepEvery spaces the age sweeps made while spilling.
	sweepEvery    = time.Minute
	maxOutputRead = 256 << 10
)

// outputStore is the outputs directory of one server: it reserves room for
// spills against the caps and removes old and evicted ones.
type outputStore struct {
	dir               string
	callCap, totalCap int64
	dirErr            error // the directory could not be made: no spills
	// free reports the host's free and total bytes where dir is; saving
	// stops before the free space falls under diskguard.Floor.
	free func(dir string) (free, total int64, err error)

	mu        sync.Mutex
	active    map[string]int64 // ids this server is writing -> bytes reserved
	lastSweep time.Time
}

// newOutputStore returns the store of dir and tidies it: the directory is
// made (0700), spills older than outputMaxAge removed, and the oldest
// removed until the rest fits totalCap. dir "" or a cap <= 0 disables
// spilling. free (nil: statfs) tells the host's free space there.
func newOutputStore(dir string, callCap, totalCap int64, free func(string) (int64, int64, error)) *outputStore {
	if free == nil {
		free = diskguard.FreeSpace
	}
	o := &outputStore{dir: dir, callCap: callCap, totalCap: totalCap, active: map[string]int64{}, free: free}
	if !o.enabled() {
		return o
	}
	if o.dirErr = os.MkdirAll(dir, 0o700); o.dirErr != nil {
		return o
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sweepOld()
	o.room("", 0)
	return o
}

func (o *outputStore) enabled() bool {
	return o.dir != "" && o.callCap > 0 && o.totalCap > 0 && o.dirErr == nil
}

func (o *outputStore) path(id, stream string) string {
	return filepath.Join(o.dir, id+"."+stream)
}

// spillGroup is one call's spill files on disk.
type spillGroup struct {
	id    string
	paths []string
	size  int64
	mod   time.Time // the newest file's
}

// scan lists the spills in the directory, oldest first. Files that are
// not spills are left alone and not counted.
func (o *outputStore) scan() []*spillGroup {
	entries, err := os.ReadDir(o.dir)
	if err != nil {
		return nil
	}
	byID := map[string]*spillGroup{}
	var groups []*spillGroup
	for _, e := range entries {
		id, stream, ok := strings.Cut(e.Name(), ".")
		if !ok || !validID(id) || (stream != "stdout" && stream != "stderr") || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		g := byID[id]
		if g == nil {
			g = &spillGroup{id: id}
			byID[id] = g
			groups = append(groups, g)
		}
		g.paths = append(g.paths, filepath.Join(o.dir, e.Name()))
		g.size += info.Size()
		if info.ModTime().After(g.mod) {
			g.mod = info.ModTime()
		}
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].mod.Before(groups[j].mod) })
	return groups
}

// room reserves up to want bytes of the directory cap for id's spill and
// returns how many it got, removing the oldest spills no one is writing
// while the directory would be over the cap. want 0 only makes the
// directory fit. Called with o.mu held.
func (o *outputStore) room(id string, want int64) int64 {
	groups := o.scan()
	var used int64
	for _, g := range groups {
		if _, mine := o.active[g.id]; !mine {
			used += g.size
		}
	}
	for _, r := range o.active {
		used += r
	}
	for _, g := range groups {
		if used+want <= o.totalCap {
			break
		}
		if _, mine := o.active[g.id]; mine {
			continue
		}
		if removeUnlocked(g.paths) {
			used -= g.size
		}
	}
	got := min(want, o.totalCap-used)
	if got <= 0 {
		return 0
	}
	o.active[id] += got
	return got
}

// removeUnlocked removes paths unless a writer holds one of them.
func removeUnlocked(paths []string) bool {
	var held []*os.File
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	for _, p := range paths {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false
		}
		held = append(held, f)
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return false
		}
	}
	for _, p := range paths {
		_ = os.Remove(p)
	}
	return true
}

// sweepOld removes spills of any server older than outputMaxAge. Called
// with o.mu held.
func (o *outputStore) sweepOld() {
	o.lastSweep = time.Now()
	for _, g := range o.scan() {
		if time.Since(g.mod) <= outputMaxAge {
			break // oldest first
		}
		if _, mine := o.active[g.id]; !mine {
			removeUnlocked(g.paths)
		}
	}
}

// finish ends id's spill: kept, its files count by their size from now on
// (and an age sweep runs if one is due); else they are removed, if made.
func (o *outputStore) finish(id string, keep, made bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.active, id)
	if !keep && made {
		_ = os.Remove(o.path(id, "stdout"))
		_ = os.Remove(o.path(id, "stderr"))
	}
	if time.Since(o.lastSweep) > sweepEvery {
		o.sweepOld()
	}
}

// spillCall is one call's spill: both streams draw on its per-call cap.
// A nil *spillCall spills nothing.
type spillCall struct {
	o  *outputStore
	id string

	mu   sync.Mutex
	left int64  // bytes of the per-call cap not yet reserved
	cut  string // why a saved copy stopped short
	// made is set once a stream has created its file: most calls make
	// none, and their end removes nothing.
	made atomic.Bool
}

// newCall starts a call's spill, or returns nil when spilling is off.
func (o *outputStore) newCall() *spillCall {
	if !o.enabled() {
		return nil
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &spillCall{o: o, id: hex.EncodeToString(b[:]), left: o.callCap}
}

// reserve returns up to n more bytes the call may save.
func (c *spillCall) reserve(n int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n = min(n, c.left)
	if n <= 0 {
		c.setCut(fmt.Sprintf("one command saves at most %s", sizeText(c.o.callCap)))
		return 0
	}
	if f, total, err := c.o.free(c.o.dir); err == nil && f-n < diskguard.Floor(total) {
		c.setCut(fmt.Sprintf("the host's disk holding the saved outputs has %s free, and %s must stay free for the host",
			units.Human(f), units.Human(diskguard.Floor(total))))
		return 0
	}
	c.o.mu.Lock()
	got := c.o.room(c.id, n)
	c.o.mu.Unlock()
	if got == 0 {
		c.setCut(fmt.Sprintf("saved outputs are at their cap of %s", sizeText(c.o.totalCap)))
	}
	c.left -= got
	return got
}

// chunk is how much a stream reserves at a time: small enough that one
// stream does not hold the call's whole cap while the other needs some.
func (c *spillCall) chunk() int64 {
	return min(spillChunk, max(c.o.callCap/16, 64<<10))
}

// release gives back reserved bytes that were not written.
func (c *spillCall) release(n int64) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	c.left += n
	c.mu.Unlock()
	c.o.mu.Lock()
	defer c.o.mu.Unlock()
	if r, ok := c.o.active[c.id]; ok {
		c.o.active[c.id] = r - n
	}
}

func (c *spillCall) setCut(why string) {
	if c.cut == "" {
		c.cut = why
	}
}

// finish keeps the call's files for the output tool, or removes them.
func (c *spillCall) finish(keep bool) {
	if c != nil {
		c.o.finish(c.id, keep, c.made.Load())
	}
}

// spillStream is one output stream of a call: it fills a capture (head and
// tail in memory) and, once the stream passes the capture's limit, saves
// the whole stream to the call's spill file as far as the caps allow. Like
// the capture, it takes one writer; a save that stops short never stops
// the command or its capture.
type spillStream struct {
	c      *shell.Capture
	call   *spillCall
	stream string

	mu       sync.Mutex // for the close and result after a late write
	f        *os.File
	spilling bool  // saving to f
	started  bool  // the stream passed the limit
	saved    int64 // bytes in the file
	room     int64 // reserved and not yet written
	cut      string
}

func newSpillStream(call *spillCall, stream string, limit int) *spillStream {
	return &spillStream{c: &shell.Capture{Limit: limit}, call: call, stream: stream}
}

// Write implements io.Writer; it never fails.
func (s *spillStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started && s.c.Total()+int64(len(p)) > int64(s.limit()) {
		s.started = true
		if s.call != nil {
			head, _, _ := s.c.Parts() // everything so far: the capture has not cut yet
			s.open()
			s.save(head)
		}
	}
	if s.spilling {
		s.save(p)
	}
	return s.c.Write(p)
}

func (s *spillStream) limit() int {
	if s.c.Limit <= 0 {
		return 16 << 10 // shell.Capture's default
	}
	return s.c.Limit
}

func (s *spillStream) open() {
	s.call.made.Store(true) // set first: a file half made is removed too
	f, err := os.OpenFile(s.call.o.path(s.call.id, s.stream), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		s.stop(fmt.Sprintf("the output could not be saved: %v", err))
		return
	}
	// Shared: held while writing, so no server removes the file under us.
	_ = unix.Flock(int(f.Fd()), unix.LOCK_SH)
	s.f, s.spilling = f, true
}

func (s *spillStream) save(p []byte) {
	for len(p) > 0 && s.spilling {
		if s.room == 0 {
			if s.room = s.call.reserve(s.call.chunk()); s.room == 0 {
				s.stop("")
				return
			}
		}
		k := min(int64(len(p)), s.room)
		n, err := s.f.Write(p[:k])
		s.saved += int64(n)
		s.room -= int64(n)
		if err != nil {
			s.stop(fmt.Sprintf("writing the saved copy failed: %v", err))
			return
		}
		p = p[k:]
	}
}

// stop ends saving; why "" takes the call's reason (a cap).
func (s *spillStream) stop(why string) {
	s.spilling = false
	if why == "" {
		s.call.mu.Lock()
		why = s.call.cut
		s.call.mu.Unlock()
	}
	s.cut = why
}

// close closes the spill file and gives back unused room. Call it once the
// command has ended.
func (s *spillStream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
	if s.call != nil {
		s.call.release(s.room)
	}
	s.room = 0
}

// retrievable reports whether the saved copy holds omitted bytes.
func (s *spillStream) retrievable() bool {
	ok, _, _ := s.savedCopy()
	return ok
}

// savedCopy reports whether the saved copy holds omitted bytes, how many
// bytes it holds, and why it stops short of the stream ("" if it does not).
func (s *spillStream) savedCopy() (retrievable bool, saved int64, cut string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	head, _, omitted := s.c.Parts()
	return omitted > 0 && s.saved > int64(len(head)), s.saved, s.cut
}

// sizeText renders a byte count as people write caps: 256 MiB, 1.5 GiB.
func sizeText(n int64) string { return units.Approx(n) }

func validID(id string) bool {
	if len(id) != 12 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

func (s *Server) outputTool() tool {
	return tool{group: "core", handler: s.handleOutput, def: newTool[OutputChunk]("output", "Fetch omitted output",
		"Fetch the bytes omitted from an earlier command's result by its output_id (kept a day, up to a disk cap).",
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
	Total    int64  `json:"total_bytes"` // bytes saved, which may stop short of the stream (see the command's result)
	More     bool   `json:"more"`
}

func (s *Server) handleOutput(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id := req.GetString("id", "")
	stream := req.GetString("stream", "stdout")
	encoding := req.GetString("encoding", "text")
	if !validID(id) {
		return argError("output: unknown id %q: ids are the output_id of a truncated exec or python result (12 hex digits)", id), nil
	}
	offset, _, err := offsetArg(req, "offset")
	if err != nil {
		return argError("output: %v", err), nil
	}
	length, err := intArg(req, "length", 65536, 1, maxOutputRead)
	if err != nil {
		return argError("output: %v", err), nil
	}
	if !s.outputs.enabled() {
		return argError("output: full outputs are not kept by this server (no state directory, or a cap of 0)"), nil
	}
	f, err := os.Open(s.outputs.path(id, stream))
	if err != nil {
		return argError("output: no saved %s for id %q: outputs are saved only for truncated results, "+
			"and the oldest are removed past a disk cap of %s or after a day", stream, id, sizeText(s.outputs.totalCap)), nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return argError("output: %v", err), nil
	}
	buf := make([]byte, min(length, max(st.Size()-offset, 0)))
	n, err := f.ReadAt(buf, offset)
	if err != nil && err != io.EOF {
		return argError("output: %v", err), nil
	}
	if encoding == "text" && offset+int64(n) < st.Size() {
		// End the page on a character, so the next starts on one.
		if k := shell.PartialRuneEnd(buf[:n]); k < n {
			n -= k
		}
	}
	data := encodeBytes(buf[:n], encoding)
	out := OutputChunk{ID: id, Stream: stream, Offset: offset, Data: data, Encoding: encoding,
		Total: st.Size(), More: offset+int64(n) < st.Size()}
	text := fmt.Sprintf("%s bytes %d-%d of %d saved\n%s", stream, offset, offset+int64(n), st.Size(), data)
	return mcp.NewToolResultStructured(out, text), nil
}
