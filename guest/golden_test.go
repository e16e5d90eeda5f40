package guest

import (
	"bytes"
	"encoding/base64"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current scripts")

// hostile is user input that would break out of careless quoting: quotes
// of both kinds, a newline, command substitutions, a variable, a leading
// dash, a trailing backslash and a lone quote.
const hostile = "-it's \"q\" $(id) `id` $HOME\nline2; rm -rf / \\ '"

// jobID is a job id as the server makes them.
const jobID = "0123456789abcdef"

// markerLike looks like the end of a frame.
const markerLike = "\nsbxM 0\n/\nsbxM.\n"

// goldenCase is one script builder with representative inputs. Every case
// builds a complete script, checked with `sh -n` as well as byte for byte.
type goldenCase struct {
	name  string
	build func() (string, error)
}

func text(s string) func() (string, error) { return func() (string, error) { return s, nil } }

// frame builds a command frame with marker sbxM and a fixed run ID.
func frame(c Command, prelude string) func() (string, error) {
	return func() (string, error) {
		if c.RunID == "" {
			c.RunID = "run0123456789"
		}
		f, err := CommandFrame("sbxM", c, prelude)
		return f.Text(), err
	}
}

// argv renders an argv as the sh command line that runs it.
func argv(a []string) string {
	q := make([]string, len(a))
	for i, s := range a {
		q[i] = quote(s)
	}
	return strings.Join(q, " ") + "\n"
}

var goldenCases = []goldenCase{
	// Framing.
	{"init_frame", text(InitFrame("sbxM", "", Outputs{}))},
	{"init_frame_hostile", text(InitFrame("sbxM", hostile, Outputs{Dir: "/tmp/out puts'", Stamp: "/tmp/st'amp"}))},
	{"command_frame", frame(Command{Command: "echo hello; pwd"}, "")},
	{"command_frame_workdir", frame(Command{Command: "pwd", Workdir: "/usr"}, "")},
	{"command_frame_names_null_fd", frame(Command{Command: "exec 7>&-", Trusted: true}, "")},
	{"command_frame_isolated", frame(Command{Command: "set -e; false", Workdir: "/usr"}, "")},
	{"command_frame_hostile", frame(Command{
		Command: hostile + markerLike,
		Workdir: "-dir/it's $(x)\nnext",
		Stdin:   []byte(strings.Repeat("stdin with 'quotes' and sbxM\n", 8)),
	}, "export A='it'\\''s'\ncd -- '/tmp'\n")},
	{"command_frame_syntax_error", frame(Command{Command: "fi ( '"}, "")},
	{"command_frame_empty_stdin", frame(Command{Command: "cat", Stdin: []byte{}}, "")},
	{"restore", text(Restore(State{
		Cwd:     hostile,
		Exports: "export A='it'\\''s'\nexport ML='a\nexport FAKE=1\nb'\nexport NOVAL",
	}, []string{"A", "GONE", "9bad", "$(id)", "NOVAL"}))},
	{"restore_cwd_only", text(Restore(State{Cwd: "/workspace"}, nil))},
	{"kill_run", text(KillRunScript)},

	// The env and install tools.
	{"init_script", text(InitScript("/workspace"))},
	{"init_script_hostile", text(InitScript(hostile))},
	{"env_set", func() (string, error) { return EnvSetScript("FOO", hostile, false) }},
	{"env_set_secret", func() (string, error) { return EnvSetScript("TOKEN", "s3cr3t-value", true) }},
	{"env_sync", text(EnvSync)},
	{"env_unset", func() (string, error) { return EnvUnsetScript("FOO") }},
	{"env_list", text(EnvListScript)},
	{"install", func() (string, error) { return InstallScript([]string{"git", "python3-pip", "libc6:amd64=2.36~1+b1"}) }},
	{"python_session", text(PythonSessionScript)},

	// The file tools.
	{"write_file", func() (string, error) {
		return WriteFileScript("/workspace/a.txt", false, 5, false, ".sandbox-mcp-w0123456789abcdef")
	}},
	{"write_file_hostile_append", func() (string, error) { return WriteFileScript(hostile, true, 1000000, false, "") }},
	{"write_file_sha256", func() (string, error) {
		return WriteFileScript("/data/big", false, 1<<20, true, ".sandbox-mcp-w0123456789abcdef")
	}},
	{"read_file", func() (string, error) { return ReadFileScript("/workspace/a.txt", 0, 1<<20+1) }},
	{"read_file_hostile_range", func() (string, error) { return ReadFileScript(hostile, 10, 20) }},
	{"read_file_offset", func() (string, error) { return ReadFileScript("-f", 5, 1<<20+1) }},

	// Transfers, snapshots and live sync.
	{"probe_path", func() (string, error) { return ProbePathScript(hostile) }},
	{"tar", text(TarScript)},
	{"untar", text(UntarScript)},
	{"stage", text(StageScript)},
	{"swap", text(SwapScript)},
	{"sync_stage", text(SyncStageScript)},
	{"upload", text(UploadScript)},
	{"sync_list", func() (string, error) {
		return SyncListScript(hostile, []string{".git", "node_modules", "it's"}, false)
	}},
	{"sync_list_bare", func() (string, error) { return SyncListScript("/data", nil, false) }},
	{"sync_list_workspace", func() (string, error) { return SyncListScript("/workspace", []string{".git", "node_modules"}, true) }},
	{"sync_list_workspace_bare", func() (string, error) { return SyncListScript("/workspace", nil, true) }},
	{"sync_apply", func() (string, error) {
		return SyncApplyScript(hostile, []string{"./a", "./lost+found", "./" + hostile}, true, false)
	}},
	{"sync_apply_remove_only", func() (string, error) { return SyncApplyScript("/data", []string{"./a"}, false, false) }},
	{"sync_apply_workspace", func() (string, error) {
		return SyncApplyScript("/workspace", []string{"./a", "./lost+found", "./lost+found/x"}, true, true)
	}},
	{"sync_apply_workspace_remove_only", func() (string, error) {
		return SyncApplyScript("/workspace", []string{"./a"}, false, true)
	}},

	// Background jobs.
	{"job_start", func() (string, error) { return JobStartScript(jobID, "", "sleep 100") }},
	{"job_start_hostile", func() (string, error) { return JobStartScript(jobID, hostile, hostile) }},
	{"job_logs_offset", func() (string, error) { return JobLogsScript(jobID, 4096, 0, 65536) }},
	{"job_logs_tail", func() (string, error) { return JobLogsScript(jobID, -1, 50, 65536) }},
	{"job_signal_term", func() (string, error) { return JobSignalScript(jobID, "TERM") }},
	{"job_signal_kill", func() (string, error) { return JobSignalScript(jobID, "KILL") }},
	{"job_signal_stop", func() (string, error) { return JobSignalScript(jobID, "STOP") }},
	{"job_signal_cont", func() (string, error) { return JobSignalScript(jobID, "CONT") }},
	{"job_count", func() (string, error) { return JobSignalScript(jobID, "") }},

	// Idle reaping and stats.
	{"touch_activity", text(TouchActivity)},
	{"watchdog", text(argv(WatchdogCommand(90*time.Second, 10*time.Second, time.Time{})))},
	{"watchdog_until", text(argv(WatchdogCommand(0, 5*time.Second, time.Unix(1900000000, 0))))},
	{"stats", text(StatsScript)},
}

// TestGolden compares every script byte for byte with its golden file;
// `go test ./guest -update` rewrites them.
func TestGolden(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			if seen[c.name] {
				t.Fatalf("duplicate case %s", c.name)
			}
			seen[c.name] = true
			got, err := c.build()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", c.name+".golden")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./guest -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s (run go test ./guest -update and review the diff)\ngot:\n%s", c.name, path, got)
			}
		})
	}
	// A golden file without a case is left over from a removed builder.
	files, _ := filepath.Glob(filepath.Join("testdata", "*.golden"))
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".golden"); !seen[name] {
			t.Errorf("%s has no case in goldenCases", f)
		}
	}
}

// TestGoldenParses checks that every golden script is valid sh syntax,
// whatever the user's input was.
func TestGoldenParses(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join("testdata", c.name+".golden")
			if out, err := exec.Command("/bin/sh", "-n", path).CombinedOutput(); err != nil {
				t.Errorf("sh -n %s: %v\n%s", path, err, out)
			}
		})
	}
}

// TestBuildersReject covers the inputs the builders refuse rather than quote.
func TestBuildersReject(t *testing.T) {
	for name, build := range map[string]func() (string, error){
		"command with NUL":            frame(Command{Command: "a\x00b"}, ""),
		"workdir with NUL":            frame(Command{Command: "a", Workdir: "/\x00"}, ""),
		"run id with a quote":         frame(Command{Command: "a", RunID: "abc'defgh"}, ""),
		"env name with a dash":        func() (string, error) { return EnvSetScript("-x", "v", false) },
		"env name with $":             func() (string, error) { return EnvSetScript("A$(id)", "v", false) },
		"env value with NUL":          func() (string, error) { return EnvSetScript("A", "\x00", false) },
		"env unset bad name":          func() (string, error) { return EnvUnsetScript("1A") },
		"env name reserved":           func() (string, error) { return EnvSetScript("SANDBOX_MCP_SECRETS", "A", false) },
		"no packages":                 func() (string, error) { return InstallScript(nil) },
		"package with a dash":         func() (string, error) { return InstallScript([]string{"-y"}) },
		"package with a space":        func() (string, error) { return InstallScript([]string{"a b"}) },
		"package with $":              func() (string, error) { return InstallScript([]string{"$(id)"}) },
		"write empty path":            func() (string, error) { return WriteFileScript("", false, 0, false, ".t") },
		"write path with NUL":         func() (string, error) { return WriteFileScript("/a\x00", false, 0, false, ".t") },
		"write temporary name with /": func() (string, error) { return WriteFileScript("/a", false, 1, false, "x/y") },
		"write negative size":         func() (string, error) { return WriteFileScript("/a", false, -1, false, ".t") },
		"read path with NUL":          func() (string, error) { return ReadFileScript("/a\x00", 0, 1) },
		"read negative offset":        func() (string, error) { return ReadFileScript("/a", -1, 1) },
		"read without a limit":        func() (string, error) { return ReadFileScript("/a", 0, 0) },
		"job id with a quote":         func() (string, error) { return JobStartScript("0123456789abcde'", "", "true") },
		"job id too short":            func() (string, error) { return JobStartScript("abc123", "", "true") },
		"job empty command":           func() (string, error) { return JobStartScript(jobID, "", "  ") },
		"job command with NUL":        func() (string, error) { return JobStartScript(jobID, "", "a\x00") },
		"logs without a range":        func() (string, error) { return JobLogsScript(jobID, -1, 0, 10) },
		"logs bad id":                 func() (string, error) { return JobLogsScript("../x", 0, 0, 10) },
		"kill unlisted signal":        func() (string, error) { return JobSignalScript(jobID, "SEGV") },
		"kill signal injection":       func() (string, error) { return JobSignalScript(jobID, "TERM; reboot") },
		"kill bad id":                 func() (string, error) { return JobSignalScript("0123456789ABCDEF", "TERM") },
		"normalize bad signal":        func() (string, error) { return NormalizeSignal("-9") },
	} {
		if s, err := build(); err == nil {
			t.Errorf("%s: accepted, built %q", name, s)
		}
	}
}

func TestNormalizeSignal(t *testing.T) {
	for in, want := range map[string]string{"": "TERM", "TERM": "TERM", "SIGkill": "KILL", "sigint": "INT", "9": "KILL", "15": "TERM", "usr1": "USR1"} {
		if got, err := NormalizeSignal(in); err != nil || got != want {
			t.Errorf("NormalizeSignal(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestParseState(t *testing.T) {
	st, bg, ok := ParseState("1 /tmp/a b\nexport A='1'\nexport B='x\ny'\n")
	if !ok || !bg || st.Cwd != "/tmp/a b" || st.Exports != "export A='1'\nexport B='x\ny'\n" {
		t.Fatalf("got %+v %v %v", st, bg, ok)
	}
	for _, bad := range []string{"", "3", "x /\n", "2 /\n"} {
		if _, _, ok := ParseState(bad); ok {
			t.Errorf("%q: accepted", bad)
		}
	}
	if st, ok := ParseStatus("137 1 0\n"); !ok || st != (Status{Code: 137, BG: true}) {
		t.Errorf("ParseStatus = %+v, %v", st, ok)
	}
	if st, ok := ParseStatus("0 0 1\n"); !ok || st != (Status{Outputs: true}) {
		t.Errorf("ParseStatus = %+v, %v", st, ok)
	}
	for _, bad := range []string{"137 1", "137 1 2", "x 0 0", "0 0 0 0"} {
		if _, ok := ParseStatus(bad); ok {
			t.Errorf("ParseStatus accepted %q", bad)
		}
	}
	if _, ok := ParseStatus("137"); ok {
		t.Error("ParseStatus accepted x")
	}
}

func TestParseJobLogs(t *testing.T) {
	h, data, err := ParseJobLogs([]byte("job exited 137 12 2\nhello\nwor"))
	if err != nil || h != (JobLogsHeader{State: "exited", ExitCode: 137, Size: 12, Processes: 2}) || string(data) != "hello\nwor" {
		t.Fatalf("got %+v %q %v", h, data, err)
	}
	h, data, err = ParseJobLogs([]byte("job running - 0 1\n"))
	if err != nil || h != (JobLogsHeader{State: "running", Size: 0, Processes: 1}) || len(data) != 0 {
		t.Fatalf("got %+v %q %v", h, data, err)
	}
	for _, bad := range []string{"", "job running", "job exited x 3 0\n", "job running - 3\n", "job sleeping - 3 0\n", "nonsense\n"} {
		if _, _, err := ParseJobLogs([]byte(bad)); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestParseJobSweep(t *testing.T) {
	for in, want := range map[string]JobSweep{
		"3 - 1 dir\n":   {Processes: 3, Leader: true},
		"2 143 0 dir\n": {Processes: 2, Exited: true, ExitCode: 143},
		"0 - 0 gone\n":  {Gone: true},
	} {
		if got, err := ParseJobSweep([]byte(in)); err != nil || got != want {
			t.Errorf("%q: got %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "3 - dir\n", "x - 0 dir\n", "-1 - 0 dir\n", "1 x 0 dir\n", "1 - 2 dir\n", "1 - 0 here\n", "1 - 0 dir extra\n"} {
		if _, err := ParseJobSweep([]byte(bad)); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// TestFrameStdinRoundTrip: stdin written in pieces by WriteTo decodes to
// exactly the input, at every size around the chunk boundaries.
func TestFrameStdinRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 56, 57, 58, 57 * 1024, 57*1024 + 1, 200000} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + i/251)
		}
		f, err := CommandFrame("sbxM", Command{Command: "cat", Stdin: data, RunID: "run0123456789"}, "")
		if err != nil {
			t.Fatal(err)
		}
		text := f.Text()
		start := strings.Index(text, "| (")
		body := text[strings.IndexByte(text[start:], '\n')+start+1:]
		body = body[:strings.Index(body, "sbxM\n__sbx_rc")]
		got, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(body, "\n", ""))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: got %d bytes, %v", n, len(got), err)
		}
		for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
			if len(line) > 76 {
				t.Fatalf("%d bytes: a line of %d columns", n, len(line))
			}
		}
	}
}
