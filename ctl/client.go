package ctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// EnvSocket names the socket in a sandbox's environment; DefaultSocket is
// where it is otherwise.
const (
	EnvSocket     = "SANDBOX_CTL_SOCK"
	DefaultSocket = "/run/sandbox-ctl.sock"
)

// maxReplyLine bounds a reply line the client reads (output comes in
// pieces far smaller).
const maxReplyLine = 16 << 20

// Call sends one request over a new connection to the socket at path and
// returns its result, writing streamed output to stdout and stderr as it
// comes. A refusal is returned as an *Error.
func Call(ctx context.Context, path, method string, params any, stdout, stderr io.Writer) (json.RawMessage, error) {
	c, err := dial(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("reach the host at %s: %w", path, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	req, _ := json.Marshal(Request{ID: json.RawMessage("1"), Method: method, Params: p})
	if _, err := c.Write(append(req, '\n')); err != nil {
		return nil, fmt.Errorf("send the request: %w", err)
	}
	r := bufio.NewReaderSize(c, 64<<10)
	for {
		line, err := readReply(r)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("read the reply: %w", err)
		}
		var rep struct {
			Result json.RawMessage `json:"result"`
			Error  *Error          `json:"error"`
			Stdout *string         `json:"stdout"`
			Stderr *string         `json:"stderr"`
		}
		if err := json.Unmarshal(line, &rep); err != nil {
			return nil, fmt.Errorf("the host sent a line that is not JSON: %w", err)
		}
		switch {
		case rep.Error != nil:
			return nil, rep.Error
		case rep.Stdout != nil:
			if _, err := io.WriteString(stdout, *rep.Stdout); err != nil {
				return nil, err
			}
		case rep.Stderr != nil:
			if _, err := io.WriteString(stderr, *rep.Stderr); err != nil {
				return nil, err
			}
		case rep.Result != nil:
			return rep.Result, nil
		default:
			return nil, fmt.Errorf("the host sent a reply with neither result nor error")
		}
	}
}

// socketWait is how long a client waits for a socket that is not there
// yet: the host starts serving it just after the sandbox boots, and a
// server that adopts a running sandbox (after a restart) lets commands
// run while its agent starts, which a loaded engine can take seconds for.
const socketWait = 10 * time.Second

func dial(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	deadline := time.Now().Add(socketWait)
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil ||
			!(errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)) {
			return c, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readReply(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > maxReplyLine {
			return nil, fmt.Errorf("a reply line over %d MiB", maxReplyLine>>20)
		}
		if err == nil {
			return line, nil
		}
		if err != bufio.ErrBufferFull {
			return nil, err
		}
	}
}
