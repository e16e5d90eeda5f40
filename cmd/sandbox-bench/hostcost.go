package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// What a hostile sandbox can make the host hold.
const (
	hogDisk = 1 << 30  // the hostile sandbox's disk limit
	hogTar  = 10 << 30 // what its tar writes
	// 999 directories of 1,000 symlinks, the directories and the top:
	// 1,000,000 entries, the most a download takes.
	manyDirs = 999
)

// benchHostCost runs a server of its own: a snapshot of a sandbox whose tar
// writes 10 GiB while its disk limit is 1G (the most the snapshot
// directory held), and a download of 1,000,000 entries, 999,000 of them
// symlinks with long names (the server's RSS growth).
func (b *bench) benchHostCost() error {
	stateDir := filepath.Join(b.dir, "hostcost-state")
	s, err := b.launch.start(b.ctx, stateDir, "--profile", "hog:disk=1G")
	if err != nil {
		return err
	}
	defer s.close()
	defer s.call(b.ctx, "destroy", map[string]any{"sandbox": "hog"})
	py := fmt.Sprintf(`import sys, tarfile; o = sys.stdout.buffer; ti = tarfile.TarInfo("./big"); ti.size = %d; o.write(ti.tobuf(tarfile.GNU_FORMAT)); z = bytes(1 << 20)
for _ in range(%d): o.write(z)`, int64(hogTar), hogTar>>20)
	replace := "mkdir -p /usr/local/bin && cat > /usr/local/bin/tar <<'SH'\n#!/bin/sh\n" +
		"case \"$*\" in *--version*) echo 'tar (GNU tar) 1.34'; exit 0 ;; esac\nexec python3 -c '" + py + "'\nSH\nchmod +x /usr/local/bin/tar"
	if _, _, err := s.call(b.ctx, "exec", map[string]any{"sandbox": "hog", "command": replace}); err != nil {
		return err
	}
	snaps := filepath.Join(stateDir, "snapshots")
	var snapErr error
	peak, err := sampleDir(snaps, func() error {
		_, _, snapErr = s.call(b.ctx, "snapshot", map[string]any{"sandbox": "hog", "snapshot_name": "hog1"})
		return nil
	})
	if err != nil {
		return err
	}
	if snapErr == nil || !strings.Contains(snapErr.Error(), "disk limit") {
		return fmt.Errorf("a snapshot of a 10 GiB tar from a 1G sandbox: want the disk limit's error, got %v", snapErr)
	}
	limit := int64(hogDisk) * 11 / 10
	report("snapshot, tar writes 10 GiB, disk 1G: host bytes", mib(peak), fmt.Sprintf("left after: %s", mib(duBytes(snaps))),
		float64(peak)/float64(hogDisk), "<= 1.1 GiB", peak <= limit && duBytes(snaps) == 0)

	// 999 directories of 1,000 symlinks each, with 200-character names.
	mk := fmt.Sprintf(`python3 -c 'import os
n = "n" * 200
for d in range(%d):
    p = "/tmp/many/%%s%%d" %% ("d" * 50, d)
    os.makedirs(p)
    for i in range(1000): os.symlink("../" + n, "%%s/%%s%%d" %% (p, n, i))'`, manyDirs)
	if _, _, err := s.call(b.ctx, "exec", map[string]any{"sandbox": "links", "command": mk, "timeout": 1800}); err != nil {
		return err
	}
	defer s.call(b.ctx, "destroy", map[string]any{"sandbox": "links"})
	host := filepath.Join(b.launch.allow, "many-links")
	defer os.RemoveAll(host)
	start, hwm, after, err := memoryOf(s, s.pid(), func() error {
		_, _, err := s.call(b.ctx, "download", map[string]any{"sandbox": "links", "sandbox_path": "/tmp/many", "local_path": host})
		return err
	})
	if err != nil {
		return err
	}
	report("download of 1,000,000 entries (999,000 symlinks): RSS growth", mib(hwm-start), "before "+mib(start)+", after "+mib(after), 0,
		"<= 64 MiB", hwm-start <= 64<<20)
	return nil
}
