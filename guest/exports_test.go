package guest

import (
	"reflect"
	"testing"
)

func TestExportNames(t *testing.T) {
	cases := []struct {
		name, text string
		want       []string
	}{
		{"dash", "export HOME='/root'\nexport ML='a\nexport FAKE=1\nb'\nexport NOVAL\nexport Q='it'\\''s'\n", []string{"HOME", "ML", "NOVAL", "Q"}},
		{"bash", "declare -x A=\"x\\\"y\nexport Z=2\"\ndeclare -x B\n", []string{"A", "B"}},
		{"junk", "garbage\nexport 9bad=1\nexport ok=1", []string{"ok"}},
	}
	for _, c := range cases {
		if got := ExportNames(c.text); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v want %v", c.name, got, c.want)
		}
	}
}

func FuzzExportNames(f *testing.F) {
	f.Add("export A='1'\n")
	f.Add("declare -x B=\"\\\"\"\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, n := range ExportNames(s) {
			if !validVarName(n) {
				t.Fatalf("invalid name %q", n)
			}
		}
	})
}
