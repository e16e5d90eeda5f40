package main

import (
	"reflect"
	"testing"
)

// TestRunLabels: `run -l` / `create -l` labels are read the way
// Parser.labels does (Parser.swift, 0.1.0–1.2.2), with its error texts in
// both error forms.
func TestRunLabels(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want map[string]string
		err  string // 1.x text; 0.x is invalidArgument: "<err>"
	}{
		{[]string{"k=v"}, map[string]string{"k": "v"}, ""},
		{[]string{"k"}, map[string]string{"k": ""}, ""},
		{[]string{"k="}, map[string]string{"k": ""}, ""},
		{[]string{"k==v"}, map[string]string{"k": "v"}, ""},
		{[]string{"=v"}, map[string]string{"v": ""}, ""},
		{[]string{"k=v="}, map[string]string{"k": "v"}, ""},
		{[]string{"k=a b \"q\" 'é'"}, map[string]string{"k": "a b \"q\" 'é'"}, ""},
		{[]string{"k=\u0301v"}, map[string]string{"k=\u0301v": ""}, ""}, // "=́" is one Character
		{[]string{"a=1", "a=2"}, map[string]string{"a": "2"}, ""},
		{[]string{"io.sandbox-mcp.limits=disk=20G,pids=1024"}, nil, "invalid label format io.sandbox-mcp.limits=disk=20G,pids=1024"},
		{[]string{"k=a=="}, nil, "invalid label format k=a=="},
		{[]string{"="}, nil, "invalid label format ="},
		{[]string{""}, nil, "label cannot be an empty string"},
	} {
		for _, v := range []string{"0.9.0", "1.5.0"} {
			a, _, _ := testApp(v)
			got, err := a.parseRunLabels(c.in)
			if c.err == "" {
				if err != nil || !reflect.DeepEqual(got, c.want) {
					t.Errorf("%s %q: %v %v, want %v", v, c.in, got, err, c.want)
				}
				continue
			}
			want := "Error: " + c.err
			if v == "0.9.0" {
				want = `Error: invalidArgument: "` + c.err + `"`
			}
			if err == nil || errString(t, err) != want {
				t.Errorf("%s %q: %v %v, want %q", v, c.in, got, err, want)
			}
		}
	}
}

// TestVolumeLabels: `volume create --label` is read the way
// Utility.parseKeyValuePairs does (0.4.0–1.2.2): one split, and anything
// but two pieces is a whole key.
func TestVolumeLabels(t *testing.T) {
	got := parseKeyValuePairs([]string{"a=1", "b=x=y", "c==z", "d=", "=e", "f", ""})
	want := map[string]string{"a": "1", "b": "x=y", "c": "=z", "d=": "", "=e": "", "f": "", "": ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
