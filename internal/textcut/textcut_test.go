package textcut

import "testing"

func TestShorten(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"longer text", 6, "longer…"},
		{"héllo", 2, "h…"}, // é cut in half is dropped, not kept broken
	} {
		if got := Shorten(c.in, c.n); got != c.want {
			t.Errorf("Shorten(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
