package cli

import "syscall"

// dieWithServer makes the CLI process get SIGKILL when the server dies
// (Linux's parent-death signal), so that a server killed in the middle of
// an engine command leaves no engine command running on: a `podman run`
// that finished after a later server decided what the killed one had
// left would put back a container that server had undone. Go exits an OS
// thread only when a goroutine locked to it ends, which nothing here does.
func dieWithServer(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
