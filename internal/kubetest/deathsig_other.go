//go:build !linux

package kubetest

import "os/exec"

// dieWithTests: only Linux kills a child with its parent.
func dieWithTests(*exec.Cmd) {}
