package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// floorConcurrency is the concurrent case of the exec-vs-floor figures.
const floorConcurrency = 8

// execFloor: a warm exec through MCP cannot beat one framed round trip over
// the engine's `exec -i sh` plus one MCP round trip (ping). Both floors and
// exec are measured here, in the same run, sequentially and 8 at a time.
func (b *bench) execFloor() error {
	ctr := b.launch.prefix + "-default"
	if _, err := b.main.execTrue(b.ctx, "default"); err != nil {
		return err
	}
	// The server's own figures come from a minimal JSON-RPC client (one
	// line out, one line back), so neither a client library's work nor its
	// checks of the result count; the go-sdk client's rows follow.
	raw, err := startRawClient(b.launch, filepath.Join(b.dir, "state"))
	if err != nil {
		return err
	}
	defer raw.close()
	for _, client := range []string{"raw", "go-sdk"} {
		for _, conc := range []int{1, floorConcurrency} {
			if err := b.floorRows(ctr, client, raw, conc); err != nil {
				return err
			}
		}
	}
	return b.serverCPU(raw)
}

// serverCPU prints the CPU time the server process spends on one warm
// exec (the minimal client's calls, nothing else meanwhile), sequential
// and 8 at a time: a figure the machine's load moves much less than a
// latency.
func (b *bench) serverCPU(raw *rawClient) error {
	pid := raw.cmd.Process.Pid
	var per []string
	for _, conc := range []int{1, floorConcurrency} {
		before := cpuTime(pid)
		lat, err := timeParallel(conc, b.n, func(int) (func() error, func(), error) {
			return func() error { return raw.call(rawExecTrue) }, func() {}, nil
		})
		if err != nil {
			return err
		}
		// timeParallel's warm-up (20 calls a worker) is counted too.
		calls := len(lat) + 20*conc
		per = append(per, us((cpuTime(pid)-before)/time.Duration(calls)))
	}
	fmt.Printf("%-44s %-22s %-26s %-9s %-18s\n", "  server CPU a warm exec, seq. / 8-way", strings.Join(per, " / "), "", "", "breakdown")
	return nil
}

// floorRows measures the two floors and warm exec with one client at one
// concurrency, and reports exec against the floors' sum.
func (b *bench) floorRows(ctr, client string, raw *rawClient, conc int) error {
	n := b.n
	pingCall := func() error { return b.main.cs.Ping(b.ctx, nil) }
	execCall := func() error { _, err := b.main.execTrue(b.ctx, "default"); return err }
	if client == "raw" {
		pingCall = func() error { return raw.call(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`) }
		execCall = func() error {
			return raw.call(rawExecTrue)
		}
	}
	var frame, ping, execs []time.Duration
	if conc == 1 {
		// One call of each in turn, so that the machine's drift during
		// the run weighs on the three alike.
		frameCall, closeFrame, err := openFrameShell(b.engine, ctr)
		if err != nil {
			return fmt.Errorf("framing floor: %w", err)
		}
		lat, err := timeInterleaved(n, frameCall, pingCall, execCall)
		closeFrame()
		if err != nil {
			return err
		}
		frame, ping, execs = lat[0], lat[1], lat[2]
	} else {
		// Each worker makes one call of each in turn too, on a framing
		// shell of its own: timed as three blocks, the floor's own p50
		// moved by up to 5x between blocks of one run.
		lat, err := timeParallelInterleaved(conc, n, func(int) ([]func() error, func(), error) {
			frameCall, closeFrame, err := openFrameShell(b.engine, ctr)
			if err != nil {
				return nil, nil, fmt.Errorf("framing floor: %w", err)
			}
			return []func() error{frameCall, pingCall, execCall}, closeFrame, nil
		})
		if err != nil {
			return err
		}
		frame, ping, execs = lat[0], lat[1], lat[2]
	}
	{
		how := client + ", sequential"
		if conc > 1 {
			how = fmt.Sprintf("%s, %d-way", client, conc)
		}
		for _, q := range []struct {
			name string
			at   float64
		}{{"p50", 0.50}, {"p95", 0.95}} {
			f, p, e := pct(frame, q.at), pct(ping, q.at), pct(execs, q.at)
			floor := f + p
			report(fmt.Sprintf("warm exec %s, %s", q.name, how), us(e),
				fmt.Sprintf("%s frame + %s ping", us(f), us(p)), ratio(e, floor), "<= 1.5x", ratio(e, floor) <= 1.5)
		}
	}
	return nil
}

// rawStdioProtocol is the protocol revision a rawClient initializes.
const rawStdioProtocol = "2025-06-18"

// rawExecTrue is a rawClient's request (its id a %d) of an exec of `true`
// in the default sandbox.
const rawExecTrue = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"exec","arguments":{"command":"true"}}}`

// rawClient is a minimal JSON-RPC client of its own server process: it
// writes one request line and reads lines until the response with its id.
type rawClient struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	mu  sync.Mutex
	id  int
	// waiting maps request ids to the channel their response line goes to.
	waiting map[int]chan []byte
	// out, when set, is read by each call itself (see startSyncRawClient),
	// with no reader goroutine and no waiting.
	out     *bufio.Reader
	outFile *os.File
}

// startRawClient starts a rawClient whose calls may run at once: a reader
// goroutine hands each answer to the call waiting for it.
func startRawClient(l launcher, stateDir string) (*rawClient, error) {
	return startRaw(l, stateDir, false)
}

// startSyncRawClient starts a rawClient for calls one at a time, each of
// which reads its own answer from the server's stdout: no goroutine of
// the client's stands between the pipe and the call, as none stands
// between the connection and the call in the HTTP section's minimal
// client (see syncHTTPCaller), so the two faces are compared alike.
func startSyncRawClient(l launcher, stateDir string) (*rawClient, error) {
	return startRaw(l, stateDir, true)
}

func startRaw(l launcher, stateDir string, syncCalls bool) (*rawClient, error) {
	cmd := exec.Command(l.bin, "serve", "--runtime", l.engine, "--image", l.image, "--prefix", l.prefix,
		"--state-dir", stateDir, "--no-boot-default", "--log-level", "warn")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &rawClient{cmd: cmd, in: in, waiting: map[int]chan []byte{}}
	if syncCalls {
		c.out = bufio.NewReaderSize(out, 1<<20)
		c.outFile, _ = out.(*os.File)
	} else {
		go c.readLoop(bufio.NewReaderSize(out, 1<<20))
	}
	if err := c.call(`{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"` + rawStdioProtocol + `","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}`); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *rawClient) readLoop(r *bufio.Reader) {
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		id, ok := answerID(line)
		if !ok {
			continue
		}
		c.mu.Lock()
		ch := c.waiting[id]
		delete(c.waiting, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- line
		}
	}
}

// call sends format (with %d for the id) and waits for its response.
func (c *rawClient) call(format string) error {
	if c.out != nil {
		return c.callSync(format)
	}
	ch := make(chan []byte, 1)
	c.mu.Lock()
	c.id++
	id := c.id
	c.waiting[id] = ch
	_, err := fmt.Fprintf(c.in, format+"\n", id)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case line := <-ch:
		return answerErr(line)
	case <-time.After(time.Minute):
		return fmt.Errorf("raw call %d: no answer", id)
	}
}

// callSync is call for a client without a reader goroutine: it reads
// lines itself until the response with its id.
func (c *rawClient) callSync(format string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id++
	if _, err := fmt.Fprintf(c.in, format+"\n", c.id); err != nil {
		return err
	}
	if c.outFile != nil {
		_ = c.outFile.SetReadDeadline(time.Now().Add(time.Minute))
	}
	for {
		line, err := c.out.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("raw call %d: %w", c.id, err)
		}
		if id, ok := answerID(line); ok && id == c.id {
			return answerErr(line)
		}
	}
}

// answerID is the id of a message line, when it has one (an answer).
func answerID(line []byte) (int, bool) {
	var msg struct {
		ID *int `json:"id"`
	}
	if json.Unmarshal(line, &msg) != nil || msg.ID == nil {
		return 0, false
	}
	return *msg.ID, true
}

// answerErr reports an answer line that is an error, or a tool's error
// result.
func answerErr(line []byte) error {
	if bytes.Contains(line, []byte(`"isError":true`)) || bytes.Contains(line, []byte(`"error":{`)) {
		return fmt.Errorf("raw call: %s", line)
	}
	return nil
}

func (c *rawClient) close() {
	_ = c.in.Close()
	if c.out != nil {
		if c.outFile != nil {
			_ = c.outFile.SetReadDeadline(time.Now().Add(time.Minute))
		}
		_, _ = io.Copy(io.Discard, c.out)
	}
	_ = c.cmd.Wait()
}

// startEngineShell starts `engine exec -i ctr sh` with its three streams
// piped.
func startEngineShell(engine, ctr string) (*exec.Cmd, io.WriteCloser, *bufio.Reader, *bufio.Reader, error) {
	cmd := exec.Command(engine, "exec", "-i", ctr, "sh")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, nil, err
	}
	return cmd, in, bufio.NewReader(outPipe), bufio.NewReader(errPipe), nil
}

// exchangeLines writes script to a shell's stdin and reads its stdout and
// stderr (at once) up to the first line each end function accepts.
func exchangeLines(in io.Writer, out, errs *bufio.Reader, script []byte, outEnd, errEnd func(line []byte) bool) error {
	until := func(r *bufio.Reader, end func([]byte) bool) error {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return err
			}
			if end(line) {
				return nil
			}
		}
	}
	if _, err := in.Write(script); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- until(errs, errEnd) }()
	if err := until(out, outEnd); err != nil {
		return err
	}
	return <-done
}

// closeEngineShell returns what ends a shell of startEngineShell's: its
// stdin closed, its stdout drained, the process waited for.
func closeEngineShell(cmd *exec.Cmd, in io.Closer, out io.Reader) func() {
	return func() {
		_ = in.Close()
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}
}

// openFrameShell starts `engine exec -i ctr sh` and returns a function that
// does one minimal framed round trip on it: run `true`, then an end marker
// on stdout and on stderr, read back from both.
func openFrameShell(engine, ctr string) (func() error, func(), error) {
	cmd, in, out, errs, err := startEngineShell(engine, ctr)
	if err != nil {
		return nil, nil, err
	}
	const marker = "sbxfloor0123456789"
	script := []byte("true\nprintf '\\n%s %d\\n' " + marker + " $? ; printf '\\n%s\\n' " + marker + " >&2\n")
	isEnd := func(line []byte) bool { return bytes.HasPrefix(line, []byte(marker)) }
	once := func() error { return exchangeLines(in, out, errs, script, isEnd, isEnd) }
	closeFn := closeEngineShell(cmd, in, out)
	return once, closeFn, nil
}

// timeParallel runs n calls spread over conc workers (each with its own
// setup) after a short warm-up, and returns every call's time.
func timeParallel(conc, n int, setup func(worker int) (func() error, func(), error)) ([]time.Duration, error) {
	lat, err := timeParallelInterleaved(conc, n, func(w int) ([]func() error, func(), error) {
		call, closeFn, err := setup(w)
		return []func() error{call}, closeFn, err
	})
	if err != nil {
		return nil, err
	}
	return lat[0], nil
}

// timeParallelInterleaved is timeParallel for several kinds of call:
// each worker makes one call of each kind in turn (the kinds its setup
// returns, in that order), so that every kind is timed under the same
// load, and n rounds are spread over the workers. It returns each kind's
// sorted times.
func timeParallelInterleaved(conc, n int, setup func(worker int) ([]func() error, func(), error)) ([][]time.Duration, error) {
	var (
		mu   sync.Mutex
		lat  [][]time.Duration
		wg   sync.WaitGroup
		errc = make(chan error, conc)
	)
	calls := make([][]func() error, conc)
	for w := range conc {
		kinds, closeFn, err := setup(w)
		if err != nil {
			return nil, err
		}
		defer closeFn()
		calls[w] = kinds
		for range 20 { // warm-up
			for _, call := range kinds {
				if err := call(); err != nil {
					return nil, err
				}
			}
		}
	}
	lat = make([][]time.Duration, len(calls[0]))
	per := n / conc
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([][]time.Duration, len(calls[w]))
			for range per {
				for k, call := range calls[w] {
					start := time.Now()
					if err := call(); err != nil {
						errc <- err
						return
					}
					mine[k] = append(mine[k], time.Since(start))
				}
			}
			mu.Lock()
			for k := range mine {
				lat[k] = append(lat[k], mine[k]...)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	for _, l := range lat {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	}
	return lat, nil
}

// timeInterleaved times n rounds of calls, one call of each per round in
// turn, after a short warm-up, and returns each call's sorted times.
func timeInterleaved(n int, calls ...func() error) ([][]time.Duration, error) {
	for range 20 {
		for _, c := range calls {
			if err := c(); err != nil {
				return nil, err
			}
		}
	}
	lat := make([][]time.Duration, len(calls))
	for range n {
		for i, c := range calls {
			start := time.Now()
			if err := c(); err != nil {
				return nil, err
			}
			lat[i] = append(lat[i], time.Since(start))
		}
	}
	for _, l := range lat {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	}
	return lat, nil
}

// pct is the q quantile of sorted durations.
func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * q)
	return sorted[i]
}
