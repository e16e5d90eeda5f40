// Package guest is the only place that writes shell text to run inside a
// sandbox: the framing around each command of the persistent shell, the
// scripts behind the env, install, file, job and stats tools, the idle
// watchdog and the process-tree killer. It also parses what those scripts
// print. Keeping every script here means there is one place to read when
// checking quoting, and one set of golden files (testdata/*.golden) that
// shows any change to what runs in a VM as a diff.
//
// The quoting rule: text a user or an agent supplies (a command, a path, a
// value, a working directory) reaches the shell single-quoted, and a
// command runs through `command eval`, so no input can end the wrapper
// early, and a syntax error in it fails that command without killing the
// shell. Anything that cannot be quoted safely is checked instead
// (variable names, package names, job ids, signals) or rejected (NUL).
//
// The protocol on the persistent shell's pipes, per command with marker M:
//
//	stdout: M ">\n" <command output> "\n" M " " <exit status> ... M ".\n"
//	stderr: M "<\n" <command output> "\n" M "\n"
//
// (in full, with the state blocks and an isolated command's stderr, in
// frame.go, above frameFuncs).
//
// The wrapper writes its trailers to fds 3 and 4, duplicated from the
// shell's stdout and stderr when it starts, and closed for the command, so
// a command that redirects its shell's stdout (`exec >/dev/null`) cannot
// swallow the end of its own frame. Package shell reads the frames; this
// package only writes the text and parses the trailer.
//
// This package does no I/O: every function returns text or parses it.
package guest
