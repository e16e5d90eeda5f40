//go:build !linux

package docker

// killInCgroup is a no-op where the engine's processes do not run on
// this kernel.
func killInCgroup(int, string) bool { return false }
