package guest

import "testing"

// The probe's answer comes from the sandbox's shell, and a download names
// what it writes on the host after its base name: only an absolute path
// is taken, and it comes back cleaned.
func TestParseProbe(t *testing.T) {
	for _, out := range []string{"dir .\n", "dir ..\n", "file x\n", "dir \n", "dir\n", "link /x\n", "file /a\x00b\n"} {
		if k, p, err := ParseProbe(out); err == nil {
			t.Errorf("ParseProbe(%q) = %q %q, want an error", out, k, p)
		}
	}
	for out, want := range map[string]string{"dir /workspace/x/..\n": "/workspace", "file /a//b\n": "/a/b", "none /a b\n": "/a b", "dir /\n": "/"} {
		if _, p, err := ParseProbe(out); err != nil || p != want {
			t.Errorf("ParseProbe(%q) = %q, %v; want %q", out, p, err, want)
		}
	}
}
