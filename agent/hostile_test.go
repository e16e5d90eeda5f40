package agent

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// rawFrame encodes one yamux frame.
func rawFrame(typ byte, flags uint16, id, length uint32, body []byte) []byte {
	b := make([]byte, headerSize, headerSize+len(body))
	b[0], b[1] = 0, typ
	binary.BigEndian.PutUint16(b[2:], flags)
	binary.BigEndian.PutUint32(b[4:], id)
	binary.BigEndian.PutUint32(b[8:], length)
	return append(b, body...)
}

// hostileAgent speaks raw yamux to a real Client: it answers the hello,
// then hands the test its writing end. keepReading says whether it goes
// on draining what the server writes.
func hostileAgent(t *testing.T, keepReading bool) (*Client, io.Writer) {
	t.Helper()
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	helloSeen := make(chan struct{})
	go func() {
		hdr := make([]byte, headerSize)
		seen := false
		for {
			if _, err := io.ReadFull(toAgentR, hdr); err != nil {
				return
			}
			if hdr[1] != typeData {
				continue
			}
			if _, err := io.CopyN(io.Discard, toAgentR, int64(binary.BigEndian.Uint32(hdr[8:]))); err != nil {
				return
			}
			if !seen && binary.BigEndian.Uint32(hdr[4:]) == 1 {
				seen = true
				close(helloSeen)
				if !keepReading {
					return // reads nothing the server writes from now on
				}
			}
		}
	}()
	go func() {
		<-helloSeen
		rep, _ := json.Marshal(Reply{OK: true, Version: Version})
		rep = append(rep, '\n')
		_, _ = fromAgentW.Write(rawFrame(typeData, 2 /* ACK */, 1, uint32(len(rep)), rep))
	}()
	c, err := NewClient(fromAgentR, toAgentW, func() error {
		toAgentW.Close()
		fromAgentW.Close()
		return fromAgentR.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, fromAgentW
}

// A sandbox whose agent stops reading and sends pings does not grow the
// server's goroutines: yamux would answer each from a goroutine of its
// own that waits to write.
func TestPingFloodCostsNoGoroutines(t *testing.T) {
	c, w := hostileAgent(t, false)
	before := runtime.NumGoroutine()
	const pings = 30000
	batch := make([]byte, 0, headerSize*1000)
	for i := 0; i < pings; i += 1000 {
		batch = batch[:0]
		for j := range 1000 {
			batch = append(batch, rawFrame(typePing, 1 /* SYN */, 0, uint32(i+j), nil)...)
		}
		if _, err := w.Write(batch); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if grown := runtime.NumGoroutine() - before; grown > 100 {
		t.Fatalf("%d pings from the sandbox left %d more goroutines", pings, grown)
	}
	select {
	case <-c.Done():
		t.Fatal("the session ended")
	default:
	}
}

// A stream from the agent that does not open as a control connection ends
// the session, and with it what the sandbox sent into its streams' windows,
// which a stream closed alone would hold for a minute.
func TestStreamFloodEndsTheSession(t *testing.T) {
	c, w := hostileAgent(t, true)
	c.ServeCtl(func(conn net.Conn) { conn.Close() })
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	junk := make([]byte, 256*1024) // no newline: the first line is too long
	for i := range junk {
		junk[i] = 'x'
	}
	for i := range 256 {
		id := uint32(2 * (i + 1))
		if _, err := w.Write(rawFrame(1 /* window update */, 1 /* SYN */, id, 0, nil)); err != nil {
			break // the session ended: nothing reads any more
		}
		if _, err := w.Write(rawFrame(typeData, 0, id, uint32(len(junk)), junk)); err != nil {
			break
		}
	}
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the session goes on")
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	if held := int64(ms.HeapInuse) - int64(before); held > 16<<20 {
		t.Fatalf("the sandbox's bytes hold %d MiB", held>>20)
	}
}

// A dial the agent does not answer ends with its context, and the session
// stays: the caller gave up, which says nothing against the agent.
func TestDialEndsWithItsContext(t *testing.T) {
	c, _ := hostileAgent(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := c.Dial(ctx, 8000); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("dial: %v", err)
		}
	case <-time.After(20 * time.Second): // the reply timeout is 30 s
		t.Fatal("the dial outlived its context")
	}
	select {
	case <-c.Done():
		t.Fatal("the session ended")
	default:
	}
}
