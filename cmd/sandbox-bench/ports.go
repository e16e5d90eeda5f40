package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// portsServer answers every connection with one byte at once, then echoes
// (first byte), or, on port 8802, streams zeros until the client closes
// (bulk).
const portsServer = `import socket, threading
def first(c):
    c.sendall(b"!")
    while c.recv(65536): pass
    c.close()
def bulk(c):
    z = bytes(1 << 20)
    try:
        while True: c.sendall(z)
    except Exception: c.close()
def listen(port, fn):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port)); s.listen(256)
    while True:
        c, _ = s.accept(); threading.Thread(target=fn, args=(c,), daemon=True).start()
threading.Thread(target=listen, args=(8801, first), daemon=True).start()
threading.Thread(target=listen, args=(8802, bulk), daemon=True).start()
import http.server, socketserver
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "3"); self.end_headers(); self.wfile.write(b"ok\n")
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True; request_queue_size = 256
S(("127.0.0.1", 8803), H).serve_forever()
`

// benchPorts: a new connection to its first byte through a forward against
// one `exec -i ctr nc 127.0.0.1 PORT` per connection (what the original
// does); a 500 MB stream against an `exec -i ctr cat` pipe; 100 HTTP
// clients doing 20 requests each.
func (b *bench) benchPorts() error {
	const box = "portsbench"
	if _, err := b.main.execTrue(b.ctx, box); err != nil {
		return err
	}
	defer b.call("destroy", map[string]any{"sandbox": box})
	if _, _, err := b.call("write_file", map[string]any{"sandbox": box, "path": "/tmp/pb.py", "content": portsServer}); err != nil {
		return err
	}
	if _, _, err := b.call("bg", map[string]any{"sandbox": box, "command": "exec python3 /tmp/pb.py"}); err != nil {
		return err
	}
	expose := func(port int) (string, error) {
		res, _, err := b.call("expose", map[string]any{"sandbox": box, "port": port})
		if err != nil {
			return "", err
		}
		var info struct {
			URL string `json:"url"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &info); err != nil || info.URL == "" {
			return "", fmt.Errorf("expose %d: %v %s", port, err, raw)
		}
		return strings.TrimPrefix(info.URL, "http://"), nil
	}
	firstAddr, err := expose(8801)
	if err != nil {
		return err
	}
	firstByte := func() (time.Duration, error) {
		t := time.Now()
		c, err := net.Dial("tcp", firstAddr)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			return 0, err
		}
		return time.Since(t), nil
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, err := firstByte(); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the server in the sandbox: %w", err)
		}
	}
	ctr := b.launch.prefix + "-" + box
	var fwd, ncs []time.Duration
	for range 20 {
		d, err := firstByte()
		if err != nil {
			return err
		}
		fwd = append(fwd, d)
		t := time.Now()
		nc := exec.Command(b.engine, "exec", "-i", ctr, "nc", "127.0.0.1", "8801")
		out, _ := nc.StdoutPipe()
		in, _ := nc.StdinPipe()
		if err := nc.Start(); err != nil {
			return err
		}
		if _, err := bufio.NewReader(out).ReadByte(); err != nil {
			return fmt.Errorf("nc: %w", err)
		}
		ncs = append(ncs, time.Since(t))
		in.Close()
		_ = nc.Process.Kill()
		_ = nc.Wait()
	}
	f, n := median(fwd), median(ncs)
	report("new connection to first byte, p50 of 20", ms3(f), ms(n)+" (exec -i nc per conn)", ratio(f, n), "<= 5 ms, >= 20x faster", f <= 5*time.Millisecond && ratio(n, f) >= 20)

	bulkAddr, err := expose(8802)
	if err != nil {
		return err
	}
	const total = 500 << 20
	c, err := net.Dial("tcp", bulkAddr)
	if err != nil {
		return err
	}
	t := time.Now()
	got, err := io.CopyN(io.Discard, c, total)
	c.Close()
	took := time.Since(t)
	if err != nil {
		return fmt.Errorf("bulk through the forward: %d bytes: %w", got, err)
	}
	cat := exec.Command(b.engine, "exec", "-i", ctr, "sh", "-c", fmt.Sprintf("head -c %d /dev/zero", total))
	t = time.Now()
	out, err := cat.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cat.Start(); err != nil {
		return err
	}
	n2, _ := io.Copy(io.Discard, out)
	_ = cat.Wait()
	floor := time.Since(t)
	fwdRate, pipeRate := float64(total)/took.Seconds()/1e6, float64(n2)/floor.Seconds()/1e6
	report("500 MB stream through a forward", fmt.Sprintf("%.0f MB/s", fwdRate), fmt.Sprintf("%.0f MB/s (exec -i pipe)", pipeRate), fwdRate/pipeRate, ">= 0.5x", fwdRate/pipeRate >= 0.5)

	httpAddr, err := expose(8803)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	failures := 0
	var firstErr error
	t = time.Now()
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				resp, err := client.Get("http://" + httpAddr + "/")
				if err == nil {
					body, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					if rerr != nil || string(body) != "ok\n" {
						err = fmt.Errorf("body %q %v", body, rerr)
					}
				}
				if err != nil {
					mu.Lock()
					failures++
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	msg := fmt.Sprintf("%d errors in %.1f s", failures, time.Since(t).Seconds())
	if firstErr != nil {
		msg += ": " + firstErr.Error()
	}
	report("100 HTTP clients x 20 requests", msg, "", 0, "no error", failures == 0)
	return nil
}

func ms3(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
