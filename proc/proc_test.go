package proc

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"testing"
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

// Streams that are not files cannot be handed on: Start refuses before it
// runs anything.
func TestHandingNeedsFiles(t *testing.T) {
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
}
