//go:build !linux

package cli

import "syscall"

// dieWithServer has nothing to set where the kernel has no parent-death
// signal (macOS: Apple's CLI hands the work to its own services).
func dieWithServer(*syscall.SysProcAttr) {}
