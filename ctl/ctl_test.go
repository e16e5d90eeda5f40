package ctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// listen serves s on a unix socket as caller "parent" and returns its path.
func listen(t *testing.T, s *Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.Serve(context.Background(), "parent", c)
		}
	}()
	return path
}

// echo answers ping with the caller, streams for "talk", blocks for
// "wait" until the call ends, and knows nothing else.
type echo struct {
	ended  chan struct{}
	active atomic.Int32
	most   atomic.Int32
}

func (e *echo) Handle(ctx context.Context, caller string, req Request, out Output) (any, error) {
	n := e.active.Add(1)
	defer e.active.Add(-1)
	for m := e.most.Load(); n > m && !e.most.CompareAndSwap(m, n); m = e.most.Load() {
	}
	switch req.Method {
	case MethodPing:
		return map[string]any{"ok": true, "parent": caller}, nil
	case "talk":
		fmt.Fprint(out.Stdout(), "one\n")
		fmt.Fprint(out.Stderr(), "two\n")
		fmt.Fprint(out.Stdout(), "three\n")
		return map[string]int{"exit_code": 3}, nil
	case "wait":
		select {
		case <-ctx.Done():
			if e.ended != nil {
				close(e.ended)
			}
			return nil, ctx.Err()
		case <-time.After(time.Minute):
			return nil, nil
		}
	case "hold":
		time.Sleep(300 * time.Millisecond)
		return nil, nil
	case "flood":
		defer close(e.ended)
		line := strings.Repeat("x", 4096) + "\n"
		for ctx.Err() == nil {
			if _, err := io.WriteString(out.Stdout(), line); err != nil {
				return nil, err
			}
		}
		return nil, ctx.Err()
	}
	return nil, Errorf(CodeInvalidRequest, "unknown method %q", req.Method)
}

func raw(t *testing.T, path, line string) map[string]any {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go io.WriteString(c, line)
	l, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("no reply to %.60q: %v", line, err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(l), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func TestCallAndStream(t *testing.T) {
	path := listen(t, &Server{Handler: &echo{}})
	res, err := Call(context.Background(), path, MethodPing, nil, io.Discard, io.Discard)
	if err != nil || !strings.Contains(string(res), `"parent":"parent"`) {
		t.Fatalf("ping: %s %v", res, err)
	}
	var so, se strings.Builder
	res, err = Call(context.Background(), path, "talk", map[string]any{}, &so, &se)
	if err != nil || string(res) != `{"exit_code":3}` || so.String() != "one\nthree\n" || se.String() != "two\n" {
		t.Fatalf("talk: %s %v %q %q", res, err, so.String(), se.String())
	}
	_, err = Call(context.Background(), path, "fly", nil, io.Discard, io.Discard)
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != CodeInvalidRequest || !strings.Contains(ce.Message, "fly") {
		t.Fatalf("unknown method: %v", err)
	}
}

func TestBadRequests(t *testing.T) {
	path := listen(t, &Server{Handler: &echo{}, ReadTimeout: 300 * time.Millisecond})
	for name, tc := range map[string]struct{ line, code string }{
		"malformed":  {"{not json\n", CodeInvalidRequest},
		"no id":      {`{"method":"ping"}` + "\n", CodeInvalidRequest},
		"object id":  {`{"id":{},"method":"ping"}` + "\n", CodeInvalidRequest},
		"no method":  {`{"id":1}` + "\n", CodeInvalidRequest},
		"10 MB line": {`{"id":1,"method":"ping","params":"` + strings.Repeat("x", 10<<20) + "\"}\n", CodeInvalidRequest},
		"half line":  {`{"id":1,"meth`, CodeInvalidRequest},
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			m := raw(t, path, tc.line)
			wantID := any(nil)
			if name == "no method" {
				wantID = float64(1) // known, so answered with it
			}
			if errCode(m) != tc.code || m["id"] != wantID {
				t.Fatalf("%v", m)
			}
			if name == "half line" && time.Since(start) < 250*time.Millisecond {
				t.Fatalf("a half line was answered before the read timeout: %v", m)
			}
		})
	}
	if m := raw(t, path, `{"id":"a","method":"ping"}`+"\n"); m["id"] != "a" || m["error"] != nil {
		t.Fatalf("after the bad ones: %v", m)
	}
}

// TestManyConnections: 200 connections at once from one sandbox: at most
// MaxConns are served at a time, the rest are refused at once, none hangs.
func TestManyConnections(t *testing.T) {
	h := &echo{}
	path := listen(t, &Server{Handler: h, MaxConns: 8})
	var wg sync.WaitGroup
	var ok, refused atomic.Int32
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := raw(t, path, `{"id":1,"method":"hold"}`+"\n")
			switch {
			case m["error"] == nil:
				ok.Add(1)
			case errCode(m) == CodeLimitReached:
				refused.Add(1)
			default:
				t.Errorf("%v", m)
			}
		}()
	}
	wg.Wait()
	if ok.Load() < 8 || ok.Load()+refused.Load() != 200 || h.most.Load() > 8 {
		t.Fatalf("%d served, %d refused, %d at most at once", ok.Load(), refused.Load(), h.most.Load())
	}
}

// TestClientGoneEndsTheCall: a client that closes its end ends the call.
func TestClientGoneEndsTheCall(t *testing.T) {
	h := &echo{ended: make(chan struct{})}
	path := listen(t, &Server{Handler: h})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Call(ctx, path, "wait", nil, io.Discard, io.Discard)
		done <- err
	}()
	for h.active.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-h.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the call went on after its client left")
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client: %v", err)
	}
}

// TestClientThatStopsReadingEndsTheCall: a client that sends a request
// and then never reads its output (nor closes) does not hold the call: once
// a line waits longer than WriteStall, the connection is closed and the
// handler's writes fail.
func TestClientThatStopsReadingEndsTheCall(t *testing.T) {
	h := &echo{ended: make(chan struct{})}
	path := listen(t, &Server{Handler: h, WriteStall: 200 * time.Millisecond})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, `{"id":1,"method":"flood"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the call went on while its client did not read")
	}
}
