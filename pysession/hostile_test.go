package pysession

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/proc"
)

// TestCancelledCallKeepsTheSession: a call whose context is already over
// (the client cancelled it while it waited for the session's turn) sends
// nothing and leaves the session as it was.
func TestCancelledCallKeepsTheSession(t *testing.T) {
	s := start(t, local(t))
	run(t, s, "kept = 1")
	for i := range 20 {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, _ = s.Run(ctx, Request{Code: "kept += 1", Timeout: time.Minute})
		if over, why := s.Ended(); over {
			t.Fatalf("attempt %d: a call cancelled before it began ended the session: %s", i, why)
		}
	}
}

// TestBackgroundProcessesOutliveTheCall: a process the code started in the
// background goes on writing after the call ended (its output is
// dropped, never part of a later call's), never killed by SIGPIPE; the
// calls meanwhile and after give their own output whole.
func TestBackgroundProcessesOutliveTheCall(t *testing.T) {
	s := start(t, local(t))
	mark := filepath.Join(t.TempDir(), "mark")
	code := fmt.Sprintf("import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 0.5; echo one; sleep 0.5; echo two; touch %s'])", mark)
	run(t, s, code)
	deadline := time.Now().Add(2500 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		r := run(t, s, fmt.Sprintf("print('call %d')", i))
		if got, want := r.Stdout.Text(), fmt.Sprintf("call %d\n", i); got != want {
			t.Fatalf("a call while a background process of an earlier one writes: stdout %q, want %q", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatal("the background process was killed after the call ended (SIGPIPE on its stdout)")
	}
}

// TestSlowReprIsInterrupted: the last expression's repr is the code's
// too: past the timeout it gets KeyboardInterrupt, and the session lives.
func TestSlowReprIsInterrupted(t *testing.T) {
	s := start(t, local(t))
	s.grace = time.Second
	run(t, s, "kept = 1\nclass Slow:\n    def __repr__(self):\n        import time\n        time.sleep(30)\n        return 'slow'")
	r, err := s.Run(t.Context(), Request{Code: "Slow()", Timeout: 300 * time.Millisecond, Limit: 1024})
	var stop *StopError
	if errors.As(err, &stop) {
		t.Fatalf("a slow __repr__ ended the session instead of being interrupted: %v", err)
	}
	if err != nil || !r.Interrupted {
		t.Fatalf("%+v %v", r, err)
	}
}

// TestHostBoundsForgedResults: code in the sandbox can write a result
// line of its own on the driver's protocol fd (found in /proc/self/fd, or
// the driver's globals); the host holds it to the call's limits.
func TestHostBoundsForgedResults(t *testing.T) {
	s := start(t, local(t))
	forge := func(size int) string {
		return fmt.Sprintf(`import sys, json, os
g = sys._getframe().f_back.f_globals   # the driver's run() frame
big = 'A' * %d
os.write(g['PROTO_OUT'], (json.dumps({"op": "result", "id": g['State'].running, "count": 1,
    "stdout": {"head": big, "tail": big, "total": 3}, "value": big, "duration": 1e300}) + "\n").encode())
import time; time.sleep(0.3)`, size)
	}
	// Within the line's bound: held to the limits.
	r, err := s.Run(t.Context(), Request{Code: forge(2 << 20), Timeout: time.Minute, Limit: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.Stdout.Text()); n > 4096+100 || r.Stdout.Total < 4<<20 || !r.Stdout.Truncated() {
		t.Errorf("stdout of %d bytes (total %d) for a Limit of 4096", n, r.Stdout.Total)
	}
	if r.Value == nil || len(*r.Value) > valueLimit+100 {
		t.Errorf("value of %d bytes", len(*r.Value))
	}
	if r.Seconds > 1e7 {
		t.Errorf("duration %g", r.Seconds)
	}
	// Past it: the session ends, the host reads no more of it.
	if _, err := s.Run(t.Context(), Request{Code: forge(25 << 20), Timeout: time.Minute, Limit: 4096}); !errors.Is(err, ErrEnded) {
		t.Fatalf("a 50 MiB line: %v", err)
	}
}

// TestStartSaysWhyItFailed: what the driver's command said on stderr
// (why python3 is missing) is in the error, every time: it is read once
// the command was waited for.
func TestStartSaysWhyItFailed(t *testing.T) {
	script := `echo 'python3 is not installed in this sandbox' >&2; exit 127`
	for i := range 200 {
		_, err := Start(t.Context(), func() (proc.Process, func(int), error) {
			return hostSh(script), func(int) {}, nil
		})
		if err == nil || !strings.Contains(err.Error(), "not installed") {
			t.Fatalf("attempt %d: the reason is lost: %v", i, err)
		}
	}
}

// TestInterruptAsCodeEnds: an interrupt that lands as the code ends gives
// either the value or KeyboardInterrupt, and never ends or wedges the
// session.
func TestInterruptAsCodeEnds(t *testing.T) {
	s := start(t, local(t))
	s.grace = 2 * time.Second
	for i := range 150 {
		d := time.Duration(20+i%10) * time.Millisecond
		r, err := s.Run(t.Context(), Request{Code: "import time\ntime.sleep(0.02)\n42", Timeout: d, Limit: 1024})
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		if value(r) != "42" && !r.Interrupted {
			t.Fatalf("attempt %d: neither value nor interrupted: %+v", i, r)
		}
	}
	if r := run(t, s, "'alive'"); value(r) != "'alive'" {
		t.Fatalf("%+v", r)
	}
}

// TestExceptionWithBadStrKeepsOutput: an exception whose __str__ raises is
// still reported by its type, with the call's output.
func TestExceptionWithBadStrKeepsOutput(t *testing.T) {
	s := start(t, local(t))
	r := run(t, s, "print('printed before')\nclass E(Exception):\n    def __str__(self):\n        raise ValueError('no str')\nraise E()")
	if !strings.Contains(r.Stdout.Text(), "printed before") || r.Error == nil || r.Error.Type != "E" {
		t.Fatalf("stdout %q error %+v", r.Stdout.Text(), r.Error)
	}
}

// TestSetUnderConcurrentUse: Get+Run, Reset and CloseIdle at once,
// then Close; nothing hangs, and no call gets another's answer.
func TestSetUnderConcurrentUse(t *testing.T) {
	st := local(t)
	set := NewSet()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	done := make(chan struct{})
	errs := make(chan error, 100)
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 15 {
				name := fmt.Sprintf("s%d", (w+i)%3)
				sess, _, err := set.Get(ctx, name, st)
				if err != nil {
					continue
				}
				want := fmt.Sprintf("%d", w*1000+i)
				r, err := sess.Run(ctx, Request{Code: want, Timeout: 10 * time.Second, Limit: 1024})
				if err == nil && value(r) != want {
					errs <- fmt.Errorf("asked %s, got %s", want, value(r))
				}
				switch i % 5 {
				case 1:
					set.Reset(name)
				case 2:
					set.CloseIdle(0)
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	set.Close("over")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ctx.Err() != nil {
		t.Fatal("hung")
	}
}

// TestIdleReapSparesASessionJustGot: Get marks the session used, so the
// idle reaper running between Get and Run leaves it to its call.
func TestIdleReapSparesASessionJustGot(t *testing.T) {
	set := NewSet()
	defer set.Close("over")
	sess, _, err := set.Get(t.Context(), "a", local(t))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	sess2, _, _ := set.Get(t.Context(), "a", local(t)) // the call that now wants it
	set.CloseIdle(10 * time.Millisecond)               // the ticker, just then
	if _, err := sess2.Run(t.Context(), Request{Code: "1"}); err != nil {
		t.Fatalf("a call given the session by Get failed: %v (same session %v)", err, sess == sess2)
	}
}

// TestDriverThatEndsSlowly: a driver that hangs up its output but has
// not exited by the time the call gives up waiting for it ends the call
// with the reason it has and no exit status; one that exits at once has
// its status told. Under -race, the slow one shows that the status is not
// read while the command is still being waited for.
func TestDriverThatEndsSlowly(t *testing.T) {
	for name, slow := range map[string]bool{"slow": true, "quick": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The slow driver exits only once the test lets it, after the
			// call has returned.
			gate := filepath.Join(t.TempDir(), "gate")
			script := `echo '{"op":"ready","pid":1}'; read x; exit 3`
			if slow {
				script = `echo '{"op":"ready","pid":1}'; read x; exec >&-; while [ ! -e "$0" ]; do sleep 0.1; done; exit 3`
			}
			st := func() (proc.Process, func(int), error) {
				cmd := exec.Command("sh", "-c", script, gate)
				cmd.WaitDelay = 2 * time.Second
				return proc.FromCmd(cmd), func(int) {}, nil
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			s, err := Start(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close("test over")
			_, err = s.Run(ctx, Request{Code: "1", Timeout: 30 * time.Second})
			if werr := os.WriteFile(gate, nil, 0o600); werr != nil {
				t.Fatal(werr)
			}
			if !errors.Is(err, ErrEnded) {
				t.Fatalf("a driver that hung up: %v", err)
			}
			if told := strings.Contains(err.Error(), "exit status 3"); told == slow {
				t.Fatalf("exit status told %v for a driver that exits %s: %v", told, name, err)
			}
			// The slow one's command is waited for behind the call.
			if !s.wait(30 * time.Second) {
				t.Fatal("the driver's command was never waited for")
			}
		})
	}
}

// TestOutputThreadsDoNotPileUp: the driver's threads that read calls'
// output are kept between calls, but not more than a few: after many
// calls that each left a process holding their output, and those
// processes' end, the session holds few threads (threads count against
// the sandbox's process limit).
func TestOutputThreadsDoNotPileUp(t *testing.T) {
	s := start(t, local(t))
	for i := range 30 {
		run(t, s, fmt.Sprintf("import subprocess\nsubprocess.Popen(['sleep', '1'])\nprint('h%d')", i))
	}
	time.Sleep(1500 * time.Millisecond)
	r := run(t, s, "import threading\nthreading.active_count()")
	n, err := strconv.Atoi(value(r))
	if err != nil || n > 8 {
		t.Fatalf("threads after the held pipes ended: %q %v", value(r), err)
	}
}
