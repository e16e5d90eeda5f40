package locks

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// hangGuard bounds a wait whose only failure is a hang.
const hangGuard = 30 * time.Second

func TestTryLockIsExclusiveAndNamesTheHolder(t *testing.T) {
	d := Dir{Path: filepath.Join(t.TempDir(), "locks")}
	h, err := d.TryLock("sbx-web", "reset")
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.TryLock("sbx-web", "destroy")
	if !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())+" (reset)") {
		t.Fatalf("second TryLock: %v", err)
	}
	other, err := d.TryLock("sbx-db", "boot")
	if err != nil {
		t.Fatalf("another key: %v", err)
	}
	other.Release()
	h.Release()
	h.Release() // twice is harmless
	h2, err := d.TryLock("sbx-web", "destroy")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	h2.Release()
	st, err := os.Stat(d.Path)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("lock dir mode: %v %v", st.Mode(), err)
	}
	st, err = os.Stat(d.path("sbx-web"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("lock file mode: %v %v", st.Mode(), err)
	}
}

func TestLockWaitsForRelease(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	h, err := d.TryLock("k", "first")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		h2, err := d.Lock(context.Background(), "k", "second")
		if err == nil {
			h2.Release()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Lock returned while held: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	h.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Lock never got the released lock")
	}
}

func TestLockGivesUpWithContext(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	h, _ := d.TryLock("k", "boot")
	defer h.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := d.Lock(ctx, "k", "destroy")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "(boot)") {
		t.Fatalf("err = %v", err)
	}
}

func TestBadKeys(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	for _, k := range []string{"", "a/b", "..", "x\x00"} {
		if _, err := d.TryLock(k, ""); err == nil {
			t.Errorf("key %q accepted", k)
		}
	}
}

func TestSymlinkAtLockPathIsRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := Dir{Path: dir}
	if err := os.Symlink(target, d.path("k")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.TryLock("k", "boot"); err == nil {
		t.Fatal("lock through a symlink accepted")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("symlink target changed: %q", b)
	}
}

func TestZeroDirLocksNothing(t *testing.T) {
	var d Dir
	a, err := d.TryLock("k", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.TryLock("k", "")
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	b.Release()
}

// TestLeaseTakenOverWhenHolderDies runs the holder in another process and
// kills it: the lease passes to this one.
func TestLeaseTakenOverWhenHolderDies(t *testing.T) {
	if os.Getenv("LOCKS_HOLDER") != "" {
		d := Dir{Path: os.Getenv("LOCKS_HOLDER")}
		if _, err := d.TryLock("duty", "holder"); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("held\n")
		time.Sleep(time.Hour)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseTakenOverWhenHolderDies$")
	cmd.Env = append(os.Environ(), "LOCKS_HOLDER="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf) != "held\n" {
		t.Fatalf("holder did not start: %q %v", buf, err)
	}
	d := Dir{Path: dir}
	if h := d.Holder("duty"); h.PID != cmd.Process.Pid || h.Purpose != "holder" {
		t.Fatalf("holder = %+v", h)
	}
	var ran atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Lease(ctx, "duty", "taker", 20*time.Millisecond, func(context.Context) { ran.Add(1) })
	}()
	time.Sleep(150 * time.Millisecond)
	if ran.Load() != 0 {
		t.Fatal("duty ran while another process held the lease")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	<-done
	if ran.Load() != 1 {
		t.Fatalf("duty ran %d times after the holder died", ran.Load())
	}
}

// HeldBy tells a lock held now from one whose file only names its last
// holder, and leaves it free to take.
func TestHeldByTellsHeldFromLastHeld(t *testing.T) {
	d := Dir{Path: filepath.Join(t.TempDir(), "locks")}
	if _, held := d.HeldBy("sbx-web"); held {
		t.Fatal("a lock never taken is held")
	}
	h, err := d.TryLock("sbx-web", "forward")
	if err != nil {
		t.Fatal(err)
	}
	if who, held := d.HeldBy("sbx-web"); !held || who.PID != os.Getpid() || who.Purpose != "forward" {
		t.Fatalf("held: %v %+v", held, who)
	}
	h.Release()
	if d.Holder("sbx-web").PID != os.Getpid() {
		t.Fatal("Holder should still name the last holder")
	}
	if who, held := d.HeldBy("sbx-web"); held {
		t.Fatalf("a released lock is held by %+v", who)
	}
	h, err = d.TryLock("sbx-web", "again")
	if err != nil {
		t.Fatalf("after HeldBy: %v", err)
	}
	h.Release()
}

// TestLockSharedBesideReaders: shared holders hold the lock together; an
// exclusive TryLock is refused while any of them holds it, and a shared
// one waits for an exclusive holder (or gives up with its context).
func TestLockSharedBesideReaders(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	ctx := context.Background()
	a, err := d.LockShared(ctx, "k", "restore a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.LockShared(ctx, "k", "restore b")
	if err != nil {
		t.Fatalf("a second shared holder: %v", err)
	}
	if _, err := d.TryLock("k", "delete"); !errors.Is(err, ErrHeld) {
		t.Fatalf("an exclusive lock beside shared holders: %v", err)
	}
	a.Release()
	// No one holder is named: the last to take it may be the one gone.
	if _, err := d.TryLock("k", "delete"); !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), "one or more processes, to restore b") {
		t.Fatalf("an exclusive lock beside one shared holder: %v", err)
	}
	if h := d.Holder("k"); !h.Shared || h.PID != 0 {
		t.Fatalf("the holder of a shared lock: %+v", h)
	}
	b.Release()
	x, err := d.TryLock("k", "delete")
	if err != nil {
		t.Fatalf("an exclusive lock once the shared holders left: %v", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := d.LockShared(sctx, "k", "restore c"); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "(delete)") {
		t.Fatalf("a shared lock beside an exclusive holder: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		h, err := d.LockShared(ctx, "k", "restore d")
		if err == nil {
			h.Release()
		}
		got <- err
	}()
	x.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangGuard):
		t.Fatal("LockShared never got the released lock")
	}
}
