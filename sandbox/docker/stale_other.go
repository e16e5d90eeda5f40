//go:build !linux

package docker

import "errors"

// killInCgroup is a no-op where the engine's processes do not run on
// this kernel.
func killInCgroup(int, string) bool { return false }

// unmountStale: the engine's mounts are not on this kernel.
func unmountStale(string) error { return errors.ErrUnsupported }

// mountedAt: the engine's mounts are not on this kernel.
func mountedAt(string) bool { return false }
