package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/kube"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// cloneWorkspaceMB is the size of the workspace the kubeclone section
// clones.
const cloneWorkspaceMB = 200

// benchKubeClone: a clone of a sandbox with a 200 MB workspace on
// Kubernetes, its workspace copied by the storage (--kube-snapshot-class:
// a VolumeSnapshot and a claim made from it, by the test cluster's CSI
// driver and the real external-provisioner and external-snapshotter)
// against the same clone with the workspace as a tar through the server,
// on the same storage, alternately; then a snapshot of that workspace and
// a restore from it, the same two ways. The kubelet stand-in runs the
// pods.
func (b *bench) benchKubeClone() error {
	kube.RouteClientLogs(nil)
	c, stop, why, err := kubetest.Start()
	if err != nil {
		return err
	}
	if c == nil {
		return errors.New("kubeclone: " + why)
	}
	defer stop()
	_, stopCSI, why, err := c.StartCSI()
	if err != nil {
		return err
	}
	if why != "" {
		return errors.New("kubeclone: " + why)
	}
	defer stopCSI()
	ctx := b.ctx
	ns := "bench-" + randHex(3)
	token, drop, err := c.MakeNamespace(ctx, ns, "deploy/kubernetes/rbac.yaml")
	if err != nil {
		return err
	}
	defer drop()
	admin, err := c.AdminClient()
	if err != nil {
		return err
	}
	_, stopKubelet, err := c.StartKubelet(admin, ns, "bc"+randHex(3))
	if err != nil {
		return err
	}
	defer stopKubelet()
	const image = "localhost/sandbox-mcp-minimal:latest"
	managers := map[string]*sandbox.Manager{}
	for _, mode := range []string{"tar", "snapshot"} {
		opt := kube.Options{Namespace: ns, StartTimeout: 2 * time.Minute, VolumeSize: "1Gi", StorageClass: kubetest.CSIStorageClass}
		if mode == "snapshot" {
			opt.SnapshotClass = kubetest.CSISnapshotClass
		}
		rt, err := kube.New(c.Config(token), opt)
		if err != nil {
			return err
		}
		dir := filepath.Join(b.dir, "kubeclone-"+mode)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		store, err := state.New(filepath.Join(dir, "state"))
		if err != nil {
			return err
		}
		m := sandbox.NewManager(rt, sandbox.Config{Prefix: "bc" + mode[:1], Defaults: sandbox.Profile{Image: image},
			Snapshots: store, SnapshotDir: filepath.Join(dir, "snapshots"), Intents: store, Sandboxes: store, LockDir: dir})
		defer m.Close()
		defer func() {
			for _, n := range []string{"src", "copy"} {
				_, _ = m.Destroy(context.Background(), n)
			}
		}()
		res, err := m.Exec(ctx, "src", shell.Request{Command: fmt.Sprintf("dd if=/dev/urandom of=/workspace/big bs=1048576 count=%d 2>/dev/null && sync", cloneWorkspaceMB), Timeout: 5 * time.Minute})
		if err != nil || res.ExitCode != 0 {
			return fmt.Errorf("kubeclone: fill the workspace: %v %+v", err, res)
		}
		managers[mode] = m
	}
	took := map[string][]time.Duration{}
	for range 3 {
		for _, mode := range []string{"tar", "snapshot"} {
			m := managers[mode]
			t0 := time.Now()
			info, err := m.CloneSandbox(ctx, "src", "copy", nil)
			if err != nil {
				return fmt.Errorf("kubeclone: clone (%s): %w", mode, err)
			}
			took[mode] = append(took[mode], time.Since(t0))
			if (info.WorkspaceCopy != "") != (mode == "snapshot") {
				return fmt.Errorf("kubeclone: clone (%s) copied its workspace as %q", mode, info.WorkspaceCopy)
			}
			res, err := m.Exec(ctx, "copy", shell.Request{Command: fmt.Sprintf("test $(wc -c </workspace/big) -eq %d", cloneWorkspaceMB<<20), Timeout: time.Minute})
			if err != nil || res.ExitCode != 0 {
				return fmt.Errorf("kubeclone: the clone's workspace (%s): %v %+v", mode, err, res)
			}
			if _, err := m.Destroy(ctx, "copy"); err != nil {
				return err
			}
		}
	}
	vs, tar := median(took["snapshot"]), median(took["tar"])
	report(fmt.Sprintf("kube: clone of %d MB, by VolumeSnapshot", cloneWorkspaceMB), ms(vs), ms(tar)+" (by tar through the server)", ratio(vs, tar), "< 1x", vs < tar)
	// A snapshot of the same workspace and a restore from it, the same
	// two ways.
	saved, restored := map[string][]time.Duration{}, map[string][]time.Duration{}
	for i := range 3 {
		for _, mode := range []string{"tar", "snapshot"} {
			m, snap := managers[mode], fmt.Sprintf("s%d", i)
			t0 := time.Now()
			rec, err := m.Snapshot(ctx, "src", sandbox.SnapshotRequest{Name: snap, IncludeWorkspace: true})
			if err != nil {
				return fmt.Errorf("kubeclone: snapshot (%s): %w", mode, err)
			}
			saved[mode] = append(saved[mode], time.Since(t0))
			if (rec.VolumeSnapshot != "") != (mode == "snapshot") {
				return fmt.Errorf("kubeclone: snapshot (%s) kept its workspace as %+v", mode, rec)
			}
			if res, err := m.Exec(ctx, "src", shell.Request{Command: "rm /workspace/big", Timeout: time.Minute}); err != nil || res.ExitCode != 0 {
				return fmt.Errorf("kubeclone: change the workspace (%s): %v %+v", mode, err, res)
			}
			t0 = time.Now()
			if _, _, err := m.Restore(ctx, snap, "src"); err != nil {
				return fmt.Errorf("kubeclone: restore (%s): %w", mode, err)
			}
			restored[mode] = append(restored[mode], time.Since(t0))
			res, err := m.Exec(ctx, "src", shell.Request{Command: fmt.Sprintf("test $(wc -c </workspace/big) -eq %d", cloneWorkspaceMB<<20), Timeout: time.Minute})
			if err != nil || res.ExitCode != 0 {
				return fmt.Errorf("kubeclone: the restored workspace (%s): %v %+v", mode, err, res)
			}
			if _, err := m.DeleteSnapshot(ctx, snap); err != nil {
				return err
			}
		}
	}
	vs, tar = median(saved["snapshot"]), median(saved["tar"])
	report(fmt.Sprintf("kube: snapshot of %d MB, by VolumeSnapshot", cloneWorkspaceMB), ms(vs), ms(tar)+" (a tar on the host)", ratio(vs, tar), "< 1x", vs < tar)
	vs, tar = median(restored["snapshot"]), median(restored["tar"])
	report(fmt.Sprintf("kube: restore of %d MB, by VolumeSnapshot", cloneWorkspaceMB), ms(vs), ms(tar)+" (from a tar on the host)", ratio(vs, tar), "< 1x", vs < tar)
	return nil
}
