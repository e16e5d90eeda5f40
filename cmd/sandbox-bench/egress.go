package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// benchEgress: what going out through the host's proxy costs against a
// direct route, side by side, to an upstream of the bench's own on this
// host: time to first byte (plain HTTP through the proxy, and a CONNECT
// tunnel) against an open sandbox's direct request; 16 parallel 100 MB
// downloads; and the server's memory for 1,000 open proxied connections.
func (b *bench) benchEgress() error {
	host, err := benchHostAddr()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host.String(), "0"))
	if err != nil {
		return err
	}
	zeros := make([]byte, 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", strconv.Itoa(100<<20))
			for i := 0; i < 100; i++ {
				if _, err := w.Write(zeros); err != nil {
					return
				}
			}
			return
		}
		io.WriteString(w, "ok\n")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	hosts := filepath.Join(b.dir, "egress-hosts")
	if err := os.WriteFile(hosts, []byte(host.String()+" up.bench\n"), 0o600); err != nil {
		return err
	}
	s, err := b.launch.start(b.ctx, filepath.Join(b.dir, "state-egress"), "--egress-hosts", hosts,
		"--allow", fmt.Sprintf("up.bench:%d", port), "--allow", fmt.Sprintf("%s/32:%d", host, port), "--profile", "direct:network=open")
	if err != nil {
		return err
	}
	defer s.close()
	sh := func(box, cmd string) (string, error) {
		res, _, err := s.call(b.ctx, "exec", map[string]any{"sandbox": box, "command": cmd, "timeout": 600})
		if err != nil {
			return "", err
		}
		out, _ := res.StructuredContent.(map[string]any)["stdout"].(string)
		return out, nil
	}
	defer s.call(b.ctx, "destroy", map[string]any{"sandbox": "proxied"})
	defer s.call(b.ctx, "destroy", map[string]any{"sandbox": "direct"})
	proxied := fmt.Sprintf("http://up.bench:%d", port)
	direct := fmt.Sprintf("--noproxy '*' http://%s:%d", host, port)

	ttfb := func(box, args string) (time.Duration, error) {
		out, err := sh(box, fmt.Sprintf(`for i in $(seq 60); do curl -s -o /dev/null -w '%%{time_starttransfer}\n' %s/; done`, args))
		if err != nil {
			return 0, err
		}
		var ds []time.Duration
		for _, f := range strings.Fields(out)[10:] { // the first ten warm up
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				return 0, fmt.Errorf("curl printed %q", f)
			}
			ds = append(ds, time.Duration(v*float64(time.Second)))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2], nil
	}
	for _, box := range []string{"proxied", "direct"} {
		if _, err := sh(box, "true"); err != nil {
			return err
		}
	}
	dDirect, err := ttfb("direct", direct)
	if err != nil {
		return err
	}
	dPlain, err := ttfb("proxied", proxied)
	if err != nil {
		return err
	}
	dTunnel, err := ttfb("proxied", "-p "+proxied)
	if err != nil {
		return err
	}
	bound := time.Duration(1.2*float64(dDirect)) + 2*time.Millisecond
	report("egress: first byte, plain HTTP, p50 of 50", ms3(dPlain), ms3(dDirect)+" (open sandbox, direct)", ratio(dPlain, dDirect), "<= 1.2x + 2 ms", dPlain <= bound)
	report("egress: first byte, CONNECT tunnel, p50 of 50", ms3(dTunnel), ms3(dDirect)+" (open sandbox, direct)", ratio(dTunnel, dDirect), "<= 1.2x + 2 ms", dTunnel <= bound)

	bulk := func(box, args string) (float64, error) {
		out, err := sh(box, fmt.Sprintf(`s=$(date +%%s%%N); seq 16 | xargs -P16 -I{} curl -s -o /dev/null -w '%%{size_download}\n' %s/big | awk '{n+=$1} END {printf "%%d ", n}'; echo $(( $(date +%%s%%N) - s ))`, args))
		if err != nil {
			return 0, err
		}
		f := strings.Fields(out)
		if len(f) != 2 {
			return 0, fmt.Errorf("downloads printed %q", out)
		}
		n, _ := strconv.ParseFloat(f[0], 64)
		ns, _ := strconv.ParseFloat(f[1], 64)
		if n != 16*100<<20 {
			return 0, fmt.Errorf("downloads got %.0f bytes of %d", n, 16*100<<20)
		}
		return n / (ns / 1e9) / 1e6, nil
	}
	// Five rounds, each direct then plain then CONNECT back to back, and
	// the median of each round's ratio: a run of this machine's noise
	// lands on both sides of a ratio taken in one round.
	var rDirect, rProxied, rTunnel, plainX, tunnelX []float64
	for range bulkRounds {
		d, err := bulk("direct", direct)
		if err != nil {
			return err
		}
		p, err := bulk("proxied", proxied)
		if err != nil {
			return err
		}
		// Through CONNECT, as HTTPS goes (pip, npm, git and apt over
		// https all tunnel).
		t, err := bulk("proxied", "-p "+proxied)
		if err != nil {
			return err
		}
		rDirect, rProxied, rTunnel = append(rDirect, d), append(rProxied, p), append(rTunnel, t)
		plainX, tunnelX = append(plainX, p/d), append(tunnelX, t/d)
	}
	px, tx := medianOf(plainX), medianOf(tunnelX)
	name := fmt.Sprintf("16 parallel 100 MB downloads, median of %d", bulkRounds)
	report("egress: "+name+", plain HTTP", fmt.Sprintf("%.0f MB/s", medianOf(rProxied)), fmt.Sprintf("%.0f MB/s (direct)", medianOf(rDirect)), px, ">= 0.7x", px >= 0.7)
	report("egress: "+name+", CONNECT", fmt.Sprintf("%.0f MB/s", medianOf(rTunnel)), fmt.Sprintf("%.0f MB/s (direct)", medianOf(rDirect)), tx, ">= 0.7x", tx >= 0.7)

	// 1,000 connections held open through the proxy.
	before := rssKB(s.pid(), "VmRSS")
	hold := fmt.Sprintf(`ulimit -n 8192; python3 -c '
import socket, time, sys
cs = []
for i in range(1000):
    c = socket.create_connection(("127.0.0.1", 3128))
    c.sendall(b"CONNECT up.bench:%d HTTP/1.1\r\nHost: up.bench\r\n\r\n")
    if not c.recv(4096).startswith(b"HTTP/1.1 200"):
        sys.exit("refused at %%d" %% i)
    cs.append(c)
open("/tmp/held", "w").write("held")
time.sleep(60)
' >/tmp/hold.log 2>&1 &
for i in $(seq 600); do [ -e /tmp/held ] && break; grep -q refused /tmp/hold.log && break; sleep 0.1; done; cat /tmp/hold.log; ls /tmp/held`, port)
	out, err := sh("proxied", hold)
	if err != nil || !strings.Contains(out, "/tmp/held") {
		return fmt.Errorf("hold 1,000 connections: %v %q", err, out)
	}
	time.Sleep(time.Second)
	after := rssKB(s.pid(), "VmRSS")
	grew := float64(after-before) / 1024
	report("egress: server RSS for 1,000 open connections", fmt.Sprintf("+%.1f MiB", grew), fmt.Sprintf("%.1f MiB before", float64(before)/1024), 0, "<= 32 MiB", grew <= 32)
	_, _ = sh("proxied", "pkill -f 'time.sleep(60)' || true; rm -f /tmp/held")
	return nil
}

// bulkRounds is how many times the bulk downloads are timed.
const bulkRounds = 5

// medianOf is the middle of vs (which it sorts).
func medianOf(vs []float64) float64 {
	sort.Float64s(vs)
	return vs[len(vs)/2]
}

// benchHostAddr is an IPv4 address of this host besides the loopback.
func benchHostAddr() (netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			return p.Addr(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("this host has no IPv4 address besides the loopback")
}
