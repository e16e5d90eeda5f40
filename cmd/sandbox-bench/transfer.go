package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

// benchTransfer: upload and download of a 300 MB file against `cp` of the
// engine, with the server's memory growth, and an upload of 10,000 small
// files against `tar -c | exec -i tar -x`.
func (b *bench) benchTransfer() error {
	if _, err := b.main.execTrue(b.ctx, "default"); err != nil {
		return err
	}
	ctr := b.launch.prefix + "-default"
	host := filepath.Join(b.dir, "xfer")
	big := filepath.Join(host, "big.bin")
	if err := os.MkdirAll(host, 0o755); err != nil {
		return err
	}
	if err := writeRandom(big, 300<<20); err != nil {
		return err
	}
	pid := b.main.pid()

	var up time.Duration
	start, hwm, _, err := memoryOf(b.main, pid, func() error {
		_, took, err := b.call("upload", map[string]any{"local_path": big, "sandbox_path": "/tmp/up.bin"})
		up = took
		return err
	})
	if err != nil {
		return err
	}
	cpUp, err := timeCmd(b.engine, "cp", big, ctr+":/tmp/floor.bin")
	if err != nil {
		return err
	}
	tarUp, err := timePipe(exec.Command("tar", "-c", "-C", host, "big.bin"), exec.Command(b.engine, "exec", "-i", ctr, "tar", "-x", "-C", "/tmp"))
	if err != nil {
		return err
	}
	report("upload 300 MB: throughput vs engine cp", mbps(300<<20, up), mbps(300<<20, cpUp)+" ("+b.engine+" cp)", ratio(cpUp, up), ">= 0.7x", ratio(cpUp, up) >= 0.7)
	fmt.Printf("%-44s tar | %s exec -i tar -x: %s\n", "", b.engine, mbps(300<<20, tarUp))
	report("upload 300 MB: server peak RSS growth", mib(hwm-start), "", 0, "<= 40 MB", hwm-start <= 40<<20)

	var down time.Duration
	start, hwm, _, err = memoryOf(b.main, pid, func() error {
		_, took, err := b.call("download", map[string]any{"sandbox_path": "/tmp/up.bin", "local_path": filepath.Join(host, "down.bin")})
		down = took
		return err
	})
	if err != nil {
		return err
	}
	cpDown, err := timeCmd(b.engine, "cp", ctr+":/tmp/up.bin", filepath.Join(host, "floor-down.bin"))
	if err != nil {
		return err
	}
	report("download 300 MB: throughput vs engine cp", mbps(300<<20, down), mbps(300<<20, cpDown)+" ("+b.engine+" cp)", ratio(cpDown, down), ">= 0.7x", ratio(cpDown, down) >= 0.7)
	report("download 300 MB: server peak RSS growth", mib(hwm-start), "", 0, "<= 40 MB", hwm-start <= 40<<20)
	os.Remove(filepath.Join(host, "down.bin"))
	os.Remove(filepath.Join(host, "floor-down.bin"))
	os.Remove(big)
	_ = exec.Command(b.engine, "exec", ctr, "rm", "-f", "/tmp/up.bin", "/tmp/floor.bin", "/tmp/big.bin").Run()

	tree := filepath.Join(host, "small")
	for d := range 100 {
		dir := filepath.Join(tree, fmt.Sprintf("d%03d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.txt", f)), []byte(fmt.Sprintf("file %d/%d\n", d, f)), 0o644); err != nil {
				return err
			}
		}
	}
	var ours, floors []time.Duration
	for i := range 3 {
		_, took, err := b.call("upload", map[string]any{"local_path": tree, "sandbox_path": fmt.Sprintf("/tmp/ours%d", i)})
		if err != nil {
			return err
		}
		ours = append(ours, took)
		_ = exec.Command(b.engine, "exec", ctr, "mkdir", "-p", fmt.Sprintf("/tmp/floor%d", i)).Run()
		fl, err := timePipe(exec.Command("tar", "-c", "-C", host, "small"), exec.Command(b.engine, "exec", "-i", ctr, "tar", "-x", "-C", fmt.Sprintf("/tmp/floor%d", i)))
		if err != nil {
			return err
		}
		floors = append(floors, fl)
	}
	o, f := median(ours), median(floors)
	report("upload 10,000 small files (median of 3)", ms(o), ms(f)+" (tar | exec -i tar)", ratio(o, f), "<= 1.5x", ratio(o, f) <= 1.5)
	_ = exec.Command(b.engine, "exec", ctr, "sh", "-c", "rm -rf /tmp/ours* /tmp/floor*").Run()
	return nil
}

func writeRandom(path string, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := os.Open("/dev/urandom")
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.CopyN(f, r, n)
	return err
}

func timeCmd(name string, args ...string) (time.Duration, error) {
	start := time.Now()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%s %v: %v: %s", name, args, err, out)
	}
	return time.Since(start), nil
}

// timePipe times `a | b`.
func timePipe(a, b *exec.Cmd) (time.Duration, error) {
	start := time.Now()
	pipe, err := a.StdoutPipe()
	if err != nil {
		return 0, err
	}
	b.Stdin = pipe
	if err := a.Start(); err != nil {
		return 0, err
	}
	if out, err := b.CombinedOutput(); err != nil {
		_ = a.Wait()
		return 0, fmt.Errorf("%v: %v: %s", b.Args, err, out)
	}
	if err := a.Wait(); err != nil {
		return 0, fmt.Errorf("%v: %w", a.Args, err)
	}
	return time.Since(start), nil
}

func mbps(n int64, d time.Duration) string {
	return fmt.Sprintf("%.0f MB/s", float64(n)/1e6/d.Seconds())
}

// benchSync: how soon a file saved on the host is readable in the
// sandbox, over 20 saves, with live sync running. The original polls once
// a second.
func (b *bench) benchSync() error {
	if _, err := b.main.execTrue(b.ctx, "default"); err != nil {
		return err
	}
	dir := filepath.Join(b.dir, "synced")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	res, _, err := b.call("sync_start", map[string]any{"local_dir": dir, "sandbox_dir": "/tmp/synced"})
	if err != nil {
		return err
	}
	id, _ := res.StructuredContent.(map[string]any)["id"].(string)
	defer b.call("sync_stop", map[string]any{"job_id": id})
	var lat []time.Duration
	for i := range 20 {
		want := fmt.Sprintf("save %d %s", i, randHex(4))
		start := time.Now()
		if err := os.WriteFile(filepath.Join(dir, "file.txt"), []byte(want), 0o644); err != nil {
			return err
		}
		for {
			res, _, err := b.call("exec", map[string]any{"command": "cat /tmp/synced/file.txt 2>/dev/null || true"})
			if err != nil {
				return err
			}
			if out, _ := res.StructuredContent.(map[string]any)["stdout"].(string); out == want {
				break
			}
			if time.Since(start) > 30*time.Second {
				return fmt.Errorf("save %d never reached the sandbox", i)
			}
		}
		lat = append(lat, time.Since(start))
		time.Sleep(100 * time.Millisecond)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p95 := lat[len(lat)/2], lat[len(lat)*95/100]
	report("sync: save on host → readable in sandbox p95", ms(p95), "1000 ms (the original polls each second)", 0, "<= 300 ms", p95 <= 300*time.Millisecond)
	fmt.Printf("%-44s p50 %s over %d saves\n", "", ms(p50), len(lat))
	return nil
}
