package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// toolbox is what the default image holds on every platform: the rows of
// the README's "What the default image holds" table, each with a command
// that uses it as an agent would and the stdout that proves it worked.
var toolbox = []struct{ tool, command, want string }{
	{"python3", `python3 -c 'import json, http, asyncio, sqlite3, dataclasses, shutil, unittest, venv; print(6*7)'`, "42\n"},
	// pip installs into the system's Python, as a user expects in a
	// throwaway machine, not refused as "externally managed".
	{"pip", `d=$(mktemp -d) && mkdir "$d/tbprobe" && : >"$d/tbprobe/__init__.py" &&
printf '[project]\nname = "tbprobe"\nversion = "1.0"\n' >"$d/pyproject.toml" &&
pip install -q --no-index --no-build-isolation "$d" && cd / && python3 -c 'import tbprobe; print("imported")' &&
pip uninstall -q -y tbprobe`, "imported\n"},
	{"venv", `d=$(mktemp -d) && python3 -m venv "$d/v" && "$d/v/bin/python" -m pip --version | cut -d' ' -f1`, "pip\n"},
	{"matplotlib", `d=$(mktemp -d) && MPLBACKEND=Agg python3 -c 'import sys, matplotlib.pyplot as p; p.plot([1, 2]); p.savefig(sys.argv[1])' "$d/p.png" && head -c 4 "$d/p.png" | tail -c 3`, "PNG"},
	{"numpy", `python3 -c 'import numpy; print(int(numpy.arange(7).sum() * 2))'`, "42\n"},
	{"pandas", `python3 -c 'import pandas; print(pandas.DataFrame({"a": [6], "b": [7]}).prod(axis=1)[0])'`, "42\n"},
	{"node", `node -e 'console.log(6*7)'`, "42\n"},
	{"npm", `d=$(mktemp -d)/probe && mkdir "$d" && cd "$d" && npm init -y >/dev/null && npm pkg get name`, "\"probe\"\n"},
	{"cc", `d=$(mktemp -d) && printf '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n' >"$d/h.c" &&
cc -o "$d/h" "$d/h.c" && "$d/h"`, "hello\n"},
	{"c++", `d=$(mktemp -d) && printf '#include <iostream>\nint main() { std::cout << "hello" << std::endl; }\n' >"$d/h.cc" &&
c++ -o "$d/h" "$d/h.cc" && "$d/h"`, "hello\n"},
	{"make", `d=$(mktemp -d) && printf 'all:\n\t@echo made\n' >"$d/Makefile" && make -s -C "$d"`, "made\n"},
	{"git", `d=$(mktemp -d) && cd "$d" && git init -q && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m first && git log --format=%s`, "first\n"},
	{"curl", `curl --version | grep -o ' https ' | head -n 1`, " https \n"},
	{"jq", `echo '{"a": [6, 7]}' | jq '.a[0] * .a[1]'`, "42\n"},
	{"tar", `d=$(mktemp -d) && echo in >"$d/f" && tar -czf "$d/t.tgz" -C "$d" f && rm "$d/f" && tar -xzf "$d/t.tgz" -C "$d" && cat "$d/f"`, "in\n"},
	{"unzip", `d=$(mktemp -d) && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1], "w").writestr("f", "zipped\n")' "$d/t.zip" && unzip -p "$d/t.zip" f`, "zipped\n"},
	{"ca-certificates", `python3 -c 'import ssl; print(len(ssl.create_default_context().get_ca_certs()) > 100)'`, "True\n"},
}

// macToolbox is what only the macOS image holds (the README's rows with
// "—" for Linux), probed where the image is the one Containerfile.mcp-dev
// builds: on Apple's real CLI, on a Mac.
var macToolbox = []struct{ tool, command, want string }{
	{"go", `d=$(mktemp -d) && printf 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println(6 * 7) }\n' >"$d/m.go" && cd "$d" && GOTOOLCHAIN=local go run m.go`, "42\n"},
	{"cargo", `d=$(mktemp -d) && cd "$d" && cargo new -q --vcs none probe && cd probe && cargo run -q --offline`, "Hello, world!\n"},
}

// TestDefaultImageToolbox uses each tool of the default image in one
// sandbox of a server started with its defaults (limits included).
func TestDefaultImageToolbox(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			prefix := enginetest.Prefix(t, tg.New())
			s := startServer(t, tg, prefix, "")
			// The python tool is how most agents first meet the image.
			r := s.call(t, "python", map[string]any{"code": "import json, sqlite3\nprint(json.dumps(sqlite3.sqlite_version_info[:1]))"})
			if r.isError || r.str("stdout") != "[3]\n" {
				t.Errorf("python tool: %+v", r)
			}
			for _, p := range toolbox {
				// A subshell: the probes' cd and variables stay out of the
				// sandbox's persistent shell. Two minutes, not the default
				// 30 s: a pip install or a compile on a loaded machine takes
				// longer, and what is checked is that the tool works.
				r := s.call(t, "exec", map[string]any{"command": "(" + p.command + "\n)", "timeout": 120})
				if r.isError || r.str("stdout") != p.want {
					t.Errorf("%s: want stdout %q, got exit %v stdout %q stderr %q", p.tool, p.want, r.num("exit_code"), r.str("stdout"), r.str("stderr"))
				}
			}
			if !tg.RealContainer {
				return
			}
			for _, p := range macToolbox {
				// A first build: minutes, not the default 30 s (and within
				// the call's own guard).
				r := s.call(t, "exec", map[string]any{"command": "(" + p.command + "\n)", "timeout": int((callGuard - time.Minute).Seconds())})
				if r.isError || r.str("stdout") != p.want {
					t.Errorf("%s: want stdout %q, got exit %v stdout %q stderr %q", p.tool, p.want, r.num("exit_code"), r.str("stdout"), r.str("stderr"))
				}
			}
		})
	}
}

func repoFile(t *testing.T, name string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeToolbox returns the tools the README's table lists for the Linux
// image (rows whose Linux cell is not "—"), and for the macOS one.
func readmeToolbox(t *testing.T) (linux, macos []string) {
	t.Helper()
	readme := repoFile(t, "README.md")
	_, section, ok := strings.Cut(readme, "\n## What the default image holds\n")
	if !ok {
		t.Fatal(`README has no "## What the default image holds" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if !strings.HasPrefix(line, "|") || len(cells) != 3 || strings.HasPrefix(line, "|---") {
			continue
		}
		if rows++; rows == 1 {
			continue // the header
		}
		for _, tool := range strings.Split(cells[0], ",") {
			tool = strings.Trim(strings.TrimSpace(tool), "`")
			if strings.TrimSpace(cells[1]) != "—" {
				linux = append(linux, tool)
			}
			if strings.TrimSpace(cells[2]) != "—" {
				macos = append(macos, tool)
			}
		}
	}
	if len(linux) == 0 {
		t.Fatal("README: no rows in the toolbox table")
	}
	return linux, macos
}

// TestReadmeToolboxIsTested keeps the README's table and the probes of
// TestDefaultImageToolbox the same list.
func TestReadmeToolboxIsTested(t *testing.T) {
	linux, macos := readmeToolbox(t)
	var macOnly, macProbed []string
	for _, tool := range macos {
		if !slices.Contains(linux, tool) {
			macOnly = append(macOnly, tool)
		}
	}
	for _, p := range macToolbox {
		macProbed = append(macProbed, p.tool)
	}
	slices.Sort(macOnly)
	slices.Sort(macProbed)
	if !slices.Equal(macOnly, macProbed) {
		t.Errorf("README lists %v for the macOS image only; TestDefaultImageToolbox checks %v there", macOnly, macProbed)
	}
	var probed []string
	for _, p := range toolbox {
		probed = append(probed, p.tool)
	}
	slices.Sort(linux)
	slices.Sort(probed)
	if !slices.Equal(linux, probed) {
		t.Fatalf("README lists %v for the Linux image; TestDefaultImageToolbox checks %v", linux, probed)
	}
}

// alpinePackage is the Alpine package that brings each tool of the table.
var alpinePackage = map[string]string{
	"python3": "python3", "pip": "py3-pip", "venv": "py3-virtualenv",
	"matplotlib": "py3-matplotlib", "numpy": "py3-numpy", "pandas": "py3-pandas",
	"node": "nodejs", "npm": "npm",
	"cc": "build-base", "c++": "build-base", "make": "build-base",
	"git": "git", "curl": "curl", "jq": "jq", "tar": "tar", "unzip": "unzip",
	"ca-certificates": "ca-certificates", "go": "go", "cargo": "cargo",
}

// TestContainerfileToolbox checks that Containerfile.mcp-dev (the macOS
// default image) installs every tool the README lists for it, and lets pip
// install as the Linux image does.
func TestContainerfileToolbox(t *testing.T) {
	cf := repoFile(t, "Containerfile.mcp-dev")
	m := regexp.MustCompile(`(?s)RUN apk add --no-cache(.*?)(?:&&|\n\n|$)`).FindStringSubmatch(cf)
	if m == nil {
		t.Fatal("Containerfile.mcp-dev: no `RUN apk add --no-cache` found")
	}
	installed := strings.Fields(strings.ReplaceAll(m[1], "\\\n", " "))
	_, macos := readmeToolbox(t)
	for _, tool := range macos {
		pkg, ok := alpinePackage[tool]
		if !ok {
			t.Errorf("README lists %q for macOS: add its Alpine package to alpinePackage", tool)
			continue
		}
		if !slices.Contains(installed, pkg) {
			t.Errorf("Containerfile.mcp-dev: %s (for %s) is not in `apk add` %v", pkg, tool, installed)
		}
	}
	for _, env := range []string{"PIP_BREAK_SYSTEM_PACKAGES=1", "PIP_ROOT_USER_ACTION=ignore"} {
		if !strings.Contains(cf, env) {
			t.Errorf("Containerfile.mcp-dev does not set %s (the Linux image does)", env)
		}
	}
}
