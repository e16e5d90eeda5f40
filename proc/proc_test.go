package proc

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"
)

// A Handing command's process reads and writes the very pipes Start was
// given, as descriptors 3, 4 and 5, and what the command itself says goes
// to the same stdout and stderr.
func TestHandingPassesTheStreamsOn(t *testing.T) {
	pipe := func() (*os.File, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		return r, w
	}
	inR, inW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	p := Handing(exec.Command("sh", "-c", `read l <&3; echo "got $l" >&4; echo from-5 >&5; echo from-2 >&2; read nothing; exit 3`))
	if err := p.Start(inR, outW, errW); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	errW.Close()
	if _, err := inW.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	inW.Close()
	out, _ := io.ReadAll(outR)
	errs, _ := io.ReadAll(errR)
	var ee *ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.Code != 3 || p.ExitCode() != 3 {
		t.Fatalf("Wait = %v, ExitCode = %d; want exit status 3", err, p.ExitCode())
	}
	if string(out) != "got hello\n" {
		t.Errorf("stdout = %q, want %q", out, "got hello\n")
	}
	if string(errs) != "from-5\nfrom-2\n" {
		t.Errorf("stderr = %q, want what the process wrote on 5, then what the command wrote on 2", errs)
	}
}

// A stdin that is not a file cannot be handed on: Start refuses before it
// runs anything. A stdout or stderr that is not a file gets a pipe of its
// own, whose bytes have arrived by the time Wait returns.
func TestHandingCopiesWritersThatAreNotFiles(t *testing.T) {
	_, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ran := t.TempDir() + "/ran"
	p := Handing(exec.Command("touch", ran))
	if err := p.Start(bytes.NewReader(nil), w, w); !errors.Is(err, ErrNotFiles) {
		t.Fatalf("Start with a reader that is not a file = %v, want ErrNotFiles", err)
	}
	if err := p.Start(nil, w, w); !errors.Is(err, ErrNotFiles) {
		t.Fatalf("Start with no stdin = %v, want ErrNotFiles", err)
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Fatalf("the command ran after all (%v)", err)
	}

	r, _, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out, errs bytes.Buffer
	p = Handing(exec.Command("sh", "-c", `seq 1 50000 >&4; echo handed >&5; echo own >&2`))
	if err := p.Start(r, &out, &errs); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(out.Bytes(), []byte("\n")); n != 50000 {
		t.Errorf("stdout has %d lines, want 50000", n)
	}
	if errs.String() != "handed\nown\n" {
		t.Errorf("stderr = %q", errs.String())
	}
}

// A process left behind that holds a copied pipe does not hold Wait past
// the command's WaitDelay.
func TestHandingWaitsForCopiesNoLongerThanWaitDelay(t *testing.T) {
	r, _, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var errs bytes.Buffer
	cmd := exec.Command("sh", "-c", `echo said >&5; sleep 60 >&5 5>&- & exit 0`)
	cmd.WaitDelay = 100 * time.Millisecond
	p := Handing(cmd)
	if err := p.Start(r, io.Discard, &errs); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait waited for the process left behind")
	}
	if errs.String() != "said\n" {
		t.Errorf("stderr = %q, want what came before the exit", errs.String())
	}
}
