package kubetest

import (
	"os/exec"
	"syscall"
)

// dieWithTests has cmd killed when the test process that started it
// dies, so that a control plane never outlives a killed test run.
func dieWithTests(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
