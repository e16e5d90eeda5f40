package terminal

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hinshun/vt10x"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
)

// hang bounds waits whose failure is a hang.
const hang = 30 * time.Second

func start(t *testing.T, script string) *Session {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh on this host")
	}
	s, err := Start("t1", "box", script, proc.FromCmd(exec.Command("sh", "-c", script)), 80, 24)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(time.Second) })
	return s
}

// readUntil reads until the screen or output holds want.
func readUntil(t *testing.T, s *Session, want string) Screen {
	t.Helper()
	var all strings.Builder
	for deadline := time.Now().Add(hang); time.Now().Before(deadline); {
		sc := s.Read(time.Second, nil)
		all.WriteString(sc.Output)
		if strings.Contains(strings.Join(sc.Lines, "\n"), want) || strings.Contains(all.String(), want) {
			return sc
		}
		if sc.Exited {
			t.Fatalf("the program ended before %q showed: %+v (output %q)", want, sc, all.String())
		}
	}
	t.Fatalf("%q never showed (output %q)", want, all.String())
	return Screen{}
}

// TestTypeAndRead: typed text and named keys reach the program; its
// answer shows on the rendered screen and in the new output, without
// control sequences; the cursor follows.
func TestTypeAndRead(t *testing.T) {
	s := start(t, `printf '\033[1;31mready\033[0m\n'; read -r line; echo "got:$line"; read -r x`)
	readUntil(t, s, "ready")
	if err := s.Send("abc", []string{"Backspace", "Enter"}); err != nil {
		t.Fatal(err)
	}
	sc := readUntil(t, s, "got:ab")
	if strings.Contains(sc.Output, "\x1b") {
		t.Fatalf("control sequences in the output: %q", sc.Output)
	}
	if sc.Lines[0] != "ready" || sc.CursorRow != 3 || sc.CursorCol != 0 {
		t.Fatalf("screen: %q cursor %d,%d", sc.Lines, sc.CursorRow, sc.CursorCol)
	}
	if err := s.Send("", []string{"Ctrl-D", "Nope"}); err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Fatalf("an unknown key: %v", err)
	}
}

// TestEndedSession: a read of an ended session answers at once with its
// exit status; typing into it is refused.
func TestEndedSession(t *testing.T) {
	s := start(t, "echo bye; exit 3")
	var sc Screen
	for deadline := time.Now().Add(hang); !sc.Exited; {
		if time.Now().After(deadline) {
			t.Fatal("the session never ended")
		}
		sc = s.Read(time.Second, nil)
	}
	if sc.ExitCode == nil || *sc.ExitCode != 3 {
		t.Fatalf("exit: %+v", sc)
	}
	// A read that waited for new output would hang here for ten minutes.
	read := make(chan Screen, 1)
	go func() { read <- s.Read(10*time.Minute, nil) }()
	select {
	case sc := <-read:
		if !sc.Exited {
			t.Fatalf("a read of an ended session: %+v", sc)
		}
	case <-time.After(hang):
		t.Fatal("a read of an ended session waited for output")
	}
	if err := s.Send("x", nil); !errors.Is(err, ErrEnded) {
		t.Fatalf("typing into an ended session: %v", err)
	}
	if err := s.Resize(100, 30); !errors.Is(err, ErrEnded) {
		t.Fatalf("resizing an ended session: %v", err)
	}
}

// TestResize: the program sees the new size; sizes out of range are
// refused.
func TestResize(t *testing.T) {
	if _, err := exec.LookPath("stty"); err != nil {
		t.Skip("no stty on this host")
	}
	s := start(t, `read -r x; stty size; read -r x`)
	if err := s.Resize(100, 30); err != nil {
		t.Fatal(err)
	}
	if err := s.Send("", []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
	if sc := readUntil(t, s, "30 100"); sc.Cols != 100 || sc.Rows != 30 {
		t.Fatalf("size: %dx%d", sc.Cols, sc.Rows)
	}
	for _, sz := range [][2]int{{0, 0}, {500, 500}, {-1, 10}, {MaxCols + 1, 10}} {
		if err := s.Resize(sz[0], sz[1]); err == nil {
			t.Errorf("%dx%d accepted", sz[0], sz[1])
		}
	}
}

// TestFloodIsBounded: a program that prints far more than OutputCap
// leaves at most OutputCap of new output, and the read says how much was
// dropped.
func TestFloodIsBounded(t *testing.T) {
	s := start(t, `i=0; while [ $i -lt 2000 ]; do printf '%01000d\n' $i; i=$((i+1)); done; echo END`)
	var got, dropped int64
	for deadline := time.Now().Add(hang); ; {
		sc := s.Read(time.Second, nil)
		got += int64(len(sc.Output))
		dropped += sc.OutputDropped
		if len(sc.Output) > OutputCap {
			t.Fatalf("a read of %d bytes", len(sc.Output))
		}
		if sc.Exited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the flood never ended")
		}
	}
	if got+dropped != 2000*1001+4 {
		t.Fatalf("kept %d + dropped %d bytes, want %d in all", got, dropped, 2000*1001+4)
	}
}

// TestAppCursorKeys: arrows follow the cursor-key mode the program set.
func TestAppCursorKeys(t *testing.T) {
	s := start(t, `printf '\033[?1h'; echo set; read -r x`)
	readUntil(t, s, "set")
	if !s.appCursor() {
		t.Fatal("application cursor mode not seen")
	}
	if v, _ := keyBytes("up", true); v != "\x1bOA" {
		t.Fatalf("Up in application mode: %q", v)
	}
	if v, _ := keyBytes("Ctrl-C", false); v != "\x03" {
		t.Fatalf("Ctrl-C: %q", v)
	}
}

// TestSplitRune: a character split across two reads renders whole.
func TestSplitRune(t *testing.T) {
	s := &Session{vt: vt10x.New(vt10x.WithSize(20, 2)), changed: make(chan struct{}), done: make(chan struct{})}
	s.feed([]byte("caf\xc3"))
	s.feed([]byte("\xa9!"))
	if sc := s.snapshot(); sc.Lines[0] != "café!" || sc.Output != "café!" {
		t.Fatalf("screen %q output %q", sc.Lines, sc.Output)
	}
}

func TestStrip(t *testing.T) {
	for in, want := range map[string]string{
		"plain\n":                        "plain\n",
		"\x1b[1;31mred\x1b[0m":           "red",
		"\x1b]0;title\x07after":          "after",
		"\x1b]8;;http://x\x1b\\link":     "link",
		"a\rb":                           "ab",
		"ab\x08c":                        "ac",
		"\x1b(Bx\x1b=y":                  "xy",
		"tab\there":                      "tab\there",
		"\x1b[?1049h\x1b[H\x1b[2Jscreen": "screen",
	} {
		var st stripper
		if got := st.strip(nil, []byte(in)); !bytes.Equal(got, []byte(want)) {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
	// A sequence split across writes.
	var st stripper
	got := st.strip(nil, []byte("x\x1b[3"))
	got = st.strip(got, []byte("1my"))
	if string(got) != "xy" {
		t.Fatalf("split sequence: %q", got)
	}
}

// TestSessionsLimit: past the limit a new session is refused until one
// ends or is closed; unknown ids are errors.
func TestSessionsLimit(t *testing.T) {
	m := &Sessions{Max: 2}
	t.Cleanup(m.CloseAll)
	open := func(script string) (*Session, error) {
		return m.Open("box", script, proc.FromCmd(exec.Command("sh", "-c", script)), 80, 24)
	}
	a, err := open("read -r x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open("read -r x"); err != nil {
		t.Fatal(err)
	}
	if _, err := open("read -r x"); err == nil || !strings.Contains(err.Error(), "terminal_close") {
		t.Fatalf("a third session: %v", err)
	}
	if _, err := m.Close(a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(a.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a closed session: %v", err)
	}
	if _, err := open("read -r x"); err != nil {
		t.Fatalf("after a close: %v", err)
	}
	if _, err := m.Open("box", "x", proc.FromCmd(exec.Command("true")), 0, 0); err == nil {
		t.Fatal("a 0x0 session opened")
	}
}

// TestProcessGroupAsked: a command built to lead a process group of its
// own (as the engine CLI's commands are) still starts behind the terminal.
func TestProcessGroupAsked(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo grouped")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s, err := Start("t1", "box", "sh", proc.FromCmd(cmd), 80, 24)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(time.Second) })
	readUntil(t, s, "grouped")
}

// TestHostileOutput: control sequences that crash or hang a terminal
// emulator trusting their numbers (negative counts, a billion tabs, the
// same written with runes whose low byte is a digit or '-', a colour map
// grown without end, a string left open) leave the session
// working: the text after them shows, and reads and closes return.
func TestHostileOutput(t *testing.T) {
	script := `printf 'a\033[-5@b\033[-5P\033[999999999999999999Ic\033[999999999999999999Z'
printf '\033[9\304\271\304\271\304\271\304\271\304\271\304\271\304\271\304\271\304\271\304\271\304\271\304\271\304\271\304\271\304\271\304\271\304\271I\033[\304\2555@'
i=0; while [ $i -lt 300 ]; do printf '\033]4;%d;rgb:00/00/00\007' $((i*50000)); i=$((i+1)); done
printf '\033Pnever ended'; head -c 5000 /dev/zero | tr '\0' x; printf '\033\\\n'
echo after-all; read -r x`
	s := start(t, script)
	sc := readUntil(t, s, "after-all")
	if sc.EmulatorResets != 0 {
		t.Fatalf("the emulator failed %d times", sc.EmulatorResets)
	}
	closed := make(chan struct{})
	go func() { s.Close(2 * time.Second); close(closed) }()
	select {
	case <-closed:
	case <-time.After(hang):
		t.Fatal("close hung")
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                      "plain",
		"\x1b[1;31mred":              "\x1b[1;31mred",
		"\x1b[-5@x":                  "x",
		"\x1b[99999999999Ix":         "\x1b[999Ix",
		"\x1b[12;4000Hx":             "\x1b[12;999Hx",
		"\x1b]0;title\x07x":          "\x1b]0;title\x07x",
		"\x1b]4;1;rgb:00/00/00\x07x": "x",
		"\x1b]2;t\x1b\\x":            "\x1b]2;t\x1b\\x",
		"\x1bPdcs\x1b\\x":            "x",
		"\x1b[1\x18x":                "x",
		"\x1b(Bx":                    "\x1b(Bx",
		// The emulator keeps a CSI rune's low byte: U+0139 reads as '9',
		// U+012D as '-'.
		"\x1b[9" + strings.Repeat("\u0139", 17) + "Ix": "x",
		"\x1b[\u012d5@x": "x",
		"\x1b[" + strings.Repeat("1;", 40) + "mx": "x",
	} {
		var z sanitizer
		if got := string(z.filter(nil, []byte(in))); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
	// Split across writes.
	var z sanitizer
	got := z.filter(nil, []byte("a\x1b[-"))
	got = z.filter(got, []byte("3Pb"))
	if string(got) != "ab" {
		t.Fatalf("split: %q", got)
	}
}

// TestSendDeadlineIsPerWrite: a send's deadline does not outlive it: the
// emulator's replies to a query the program makes later still arrive.
func TestSendDeadlineIsPerWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("waits past a send's deadline")
	}
	// The line is read before the terminal turns raw: typed into a raw
	// terminal, the Enter would stay a carriage return and never end it.
	s := start(t, `read -r x; stty raw -echo; sleep 6; printf '\033[6n'; dd bs=1 count=6 2>/dev/null | od -c | head -1; echo; echo done-reading`)
	if err := s.Send("go\r", nil); err != nil {
		t.Fatal(err)
	}
	readUntil(t, s, "done-reading")
}
