package pysession

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
)

// local runs the driver with this machine's python3, as a sandbox's
// engine exec would run it.
func local(t *testing.T) Starter {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on this machine to run the driver with (the engine suites run it in sandboxes)")
	}
	outputs := t.TempDir() // not the driver's default, /tmp/outputs, on this machine
	return func() (proc.Process, func(int), error) {
		cmd := exec.Command("sh", "-c", guest.PythonSessionScript, "sh", guest.PythonDriver)
		cmd.Env = append(os.Environ(), "SANDBOX_OUTPUTS="+outputs)
		cmd.WaitDelay = 2 * time.Second // as the engine CLIs' own commands have: a process the driver left holding the pipes
		return proc.FromCmd(cmd), func(int) {}, nil
	}
}

// hostSh is script run by this machine's sh, as an engine's exec of it
// would be.
func hostSh(script string) proc.Process {
	cmd := exec.Command("sh", "-c", script)
	cmd.WaitDelay = 2 * time.Second
	return proc.FromCmd(cmd)
}

func start(t *testing.T, st Starter) *Session {
	t.Helper()
	s, err := Start(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close("test over") })
	return s
}

func run(t *testing.T, s *Session, code string) Result {
	t.Helper()
	r, err := s.Run(t.Context(), Request{Code: code, Timeout: time.Minute, Limit: 16 << 10})
	if err != nil {
		t.Fatalf("%q: %v", code, err)
	}
	return r
}

func value(r Result) string {
	if r.Value == nil {
		return "<none>"
	}
	return *r.Value
}

// TestStateSurvivesCalls: variables, imports and functions stay; the last
// expression's value comes back as its repr; output of the code and of
// the processes it starts is captured per call.
func TestStateSurvivesCalls(t *testing.T) {
	s := start(t, local(t))
	run(t, s, "import math\nx = 41\ndef f(v):\n    return v + 1")
	r := run(t, s, "f(x)")
	if value(r) != "42" || r.Count != 2 {
		t.Fatalf("value %s count %d", value(r), r.Count)
	}
	r = run(t, s, "print('out', math.pi > 3)\nimport sys, subprocess\nprint('err', file=sys.stderr)\nsubprocess.run(['echo', 'child'])\nNone")
	if r.Stdout.Text() != "out True\nchild\n" || r.Stderr.Text() != "err\n" || r.Value != nil {
		t.Fatalf("stdout %q stderr %q value %s", r.Stdout.Text(), r.Stderr.Text(), value(r))
	}
	r = run(t, s, "'x' * 3")
	if value(r) != "'xxx'" {
		t.Fatalf("repr: %s", value(r))
	}
	r = run(t, s, "import asyncio\nawait asyncio.sleep(0)\n6 * 7")
	if value(r) != "42" || r.Error != nil {
		t.Fatalf("top-level await: %s %+v", value(r), r.Error)
	}
	r = run(t, s, "import pickle\nclass P: pass\npickle.loads(pickle.dumps(P())).__class__.__name__")
	if value(r) != "'P'" {
		t.Fatalf("pickle of a class the code defined: %s %+v", value(r), r.Error)
	}
}

// TestErrorsKeepTheSession: an exception comes back with its type and a
// traceback of the user's lines (not the driver's), and the session goes
// on; SystemExit and a syntax error too.
func TestErrorsKeepTheSession(t *testing.T) {
	s := start(t, local(t))
	run(t, s, "kept = 1")
	r := run(t, s, "def g():\n    return 1 / 0\ng()")
	if r.Error == nil || r.Error.Type != "ZeroDivisionError" || !strings.Contains(r.Error.Traceback, "return 1 / 0") ||
		strings.Contains(r.Error.Traceback, "pydriver") || strings.Contains(r.Error.Traceback, "execute") {
		t.Fatalf("%+v", r.Error)
	}
	for code, want := range map[string]string{"raise SystemExit(3)": "SystemExit", "x = (": "SyntaxError", "input()": "EOFError"} {
		r := run(t, s, code)
		if r.Error == nil || r.Error.Type != want {
			t.Fatalf("%q: %+v", code, r.Error)
		}
	}
	if r := run(t, s, "kept"); value(r) != "1" {
		t.Fatalf("state lost: %+v", r)
	}
}

// TestHangingCodeIsInterrupted: past its timeout the code gets
// KeyboardInterrupt and the session keeps its state; code that ignores
// it ends the session, which says so.
func TestHangingCodeIsInterrupted(t *testing.T) {
	s := start(t, local(t))
	s.grace = time.Second
	run(t, s, "kept = 'yes'")
	r, err := s.Run(t.Context(), Request{Code: "import time\ntime.sleep(60)", Timeout: 300 * time.Millisecond, Limit: 1024})
	if err != nil || !r.Interrupted || r.Error == nil || r.Error.Type != "KeyboardInterrupt" || !strings.Contains(r.InterruptedBy, "timeout") {
		t.Fatalf("%+v %v", r, err)
	}
	if tb := r.Error.Traceback; !strings.Contains(tb, "time.sleep(60)") || strings.Contains(tb, "on_sigint") || strings.Contains(tb, "<string>") {
		t.Fatalf("the traceback is not the user's code alone:\n%s", tb)
	}
	if r := run(t, s, "kept"); value(r) != "'yes'" {
		t.Fatalf("state lost after an interrupt: %+v", r)
	}
	_, err = s.Run(t.Context(), Request{Code: "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass", Timeout: 300 * time.Millisecond, Limit: 1024})
	var stop *StopError
	if !errors.As(err, &stop) {
		t.Fatalf("want a StopError, got %v", err)
	}
	if over, _ := s.Ended(); !over {
		t.Fatal("the session runs on")
	}
	if _, err := s.Run(t.Context(), Request{Code: "1"}); !errors.Is(err, ErrEnded) {
		t.Fatalf("a call on the ended session: %v", err)
	}
}

// TestBadCodeCannotBreakTheDriver: huge output is bounded, a fork's child
// does not answer for its parent, and os._exit ends the session with a
// reason the next Get gives.
func TestBadCodeCannotBreakTheDriver(t *testing.T) {
	st := local(t)
	set := NewSet()
	defer set.Close("test over")
	s, ended, err := set.Get(t.Context(), "default", st)
	if err != nil || ended != "" {
		t.Fatal(err, ended)
	}
	r, err := s.Run(t.Context(), Request{Code: "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * (1 << 20))\nprint('END')", Timeout: time.Minute, Limit: 4096})
	if err != nil || r.Stdout.Total != 100<<20+4 || !r.Stdout.Truncated() || len(r.Stdout.Text()) > 4096+100 || !strings.HasSuffix(r.Stdout.Text(), "END\n") {
		t.Fatalf("100 MiB: total %d, kept %d, err %v", r.Stdout.Total, len(r.Stdout.Text()), err)
	}
	r = run(t, s, "import os\npid = os.fork()\nif pid == 0:\n    print('child')\nelse:\n    os.waitpid(pid, 0)\npid > 0")
	if value(r) != "True" {
		t.Fatalf("fork: %+v", r)
	}
	if r := run(t, s, "'after fork'"); value(r) != "'after fork'" {
		t.Fatalf("%+v", r)
	}
	if _, err := s.Run(t.Context(), Request{Code: "import os\nos._exit(3)", Timeout: time.Minute}); !errors.Is(err, ErrEnded) || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("os._exit: %v", err)
	}
	s2, ended, err := set.Get(t.Context(), "default", st)
	if err != nil || s2 == s || !strings.Contains(ended, "exited") {
		t.Fatalf("after os._exit: %v, ended %q", err, ended)
	}
}

// TestCallsOnOneSessionQueue: two calls at once run one after the other,
// never interleaved.
func TestCallsOnOneSessionQueue(t *testing.T) {
	s := start(t, local(t))
	var wg sync.WaitGroup
	results := make([]Result, 2)
	for i, code := range []string{"import time\nseen = []\nfor i in range(5):\n    seen.append(i)\n    time.sleep(0.05)\nlen(seen)", "import time\ntime.sleep(0.01)\nlen(seen)"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				time.Sleep(50 * time.Millisecond)
			}
			results[i] = run(t, s, code)
		}()
	}
	wg.Wait()
	if value(results[0]) != "5" || value(results[1]) != "5" {
		t.Fatalf("interleaved: %s, %s (%+v)", value(results[0]), value(results[1]), results[1].Error)
	}
}

// TestHostileDriver: a driver the sandbox replaced cannot make the host
// hold an unbounded line or a call wait for ever.
func TestHostileDriver(t *testing.T) {
	for name, script := range map[string]string{
		"endless line":  `echo '{"op":"ready","pid":1}'; read x; head -c 80000000 /dev/zero | tr '\0' a`,
		"not json":      `echo '{"op":"ready","pid":1}'; read x; echo 'hello'; sleep 60`,
		"out of turn":   `echo '{"op":"ready","pid":1}'; read x; echo '{"op":"ready"}'; sleep 60`,
		"never ready":   `echo '{"op":"result","id":1}'; sleep 60`,
		"no python3":    `echo 'python3 is not installed in this sandbox' >&2; exit 127`,
		"never answers": `echo '{"op":"ready","pid":1}'; while read x; do :; done`,
	} {
		t.Run(name, func(t *testing.T) {
			st := func() (proc.Process, func(int), error) { return hostSh(script), func(int) {}, nil }
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			s, err := Start(ctx, st)
			if err != nil {
				if name != "never ready" && name != "no python3" {
					t.Fatal(err)
				}
				if name == "no python3" && !strings.Contains(err.Error(), "not installed") {
					t.Fatalf("the reason is lost: %v", err)
				}
				return
			}
			defer s.Close("test over")
			s.grace = 200 * time.Millisecond
			_, err = s.Run(ctx, Request{Code: "1", Timeout: 500 * time.Millisecond})
			if err == nil {
				t.Fatal("a call on a hostile driver succeeded")
			}
			if ctx.Err() != nil {
				t.Fatal("the call waited for the test's bound")
			}
		})
	}
}

// TestOutputsComeBackAsImages: PNG files the code writes into the outputs
// directory during its call come back as images; older files and other
// kinds do not.
func TestOutputsComeBackAsImages(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on this machine to run the driver with (the engine suites run it in sandboxes)")
	}
	dir := t.TempDir()
	s := start(t, func() (proc.Process, func(int), error) {
		cmd := exec.Command("sh", "-c", guest.PythonSessionScript, "sh", guest.PythonDriver)
		cmd.Env = append(os.Environ(), "SANDBOX_OUTPUTS="+dir)
		cmd.WaitDelay = 2 * time.Second
		return proc.FromCmd(cmd), func(int) {}, nil
	})
	const png = "import os\ndef png(name):\n    with open(os.path.join(os.environ['SANDBOX_OUTPUTS'], name), 'wb') as f:\n        f.write(b'\\x89PNG\\r\\n\\x1a\\n' + b'x' * 10)\n"
	r := run(t, s, png+"png('old.png')")
	if len(r.Images) != 1 || r.Images[0].Name != dir+"/old.png" {
		t.Fatalf("first call: %+v", r.Images)
	}
	time.Sleep(20 * time.Millisecond)
	r = run(t, s, "png('new.png')\nopen(os.path.join(os.environ['SANDBOX_OUTPUTS'], 'notes.txt'), 'w').write('x')")
	if len(r.Images) != 1 || r.Images[0].Name != dir+"/new.png" || r.Images[0].Format != "png" {
		t.Fatalf("second call: %+v", r.Images)
	}
	if r := run(t, s, "1"); len(r.Images) != 0 {
		t.Fatalf("images again: %+v", r.Images)
	}
	// A file written again in a later call is new again.
	if r := run(t, s, "png('old.png')"); len(r.Images) != 1 || r.Images[0].Name != dir+"/old.png" {
		t.Fatalf("a rewritten file: %+v", r.Images)
	}
	r = run(t, s, "for i in range(10):\n    png('many-%d.png' % i)")
	if len(r.Images) != 9 || r.Images[8].Error == "" || !strings.Contains(r.Images[8].Error, "2 more PNG files") {
		t.Fatalf("ten files: %d images, last %+v", len(r.Images), r.Images[len(r.Images)-1])
	}
}

// TestProgressWhileRunning: a call that asked for progress is told, while
// its code runs, how much it wrote and its newest output.
func TestProgressWhileRunning(t *testing.T) {
	s := start(t, local(t))
	var mu sync.Mutex
	var seen []string
	r, err := s.Run(t.Context(), Request{Code: "import time\nprint('first', flush=True)\ntime.sleep(2.5)\nprint('last')", Timeout: time.Minute, Limit: 4096,
		Progress: func(total int64, newest string) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, fmt.Sprintf("%d:%s", total, newest))
		}})
	if err != nil || r.Stdout.Text() != "first\nlast\n" {
		t.Fatalf("%+v %v", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 || !strings.Contains(seen[0], "6:first") {
		t.Fatalf("progress: %q", seen)
	}
}
