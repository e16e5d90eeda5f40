//go:build !linux

package docker

import "errors"

// killInCgroup is a no-op where the engine's processes do not run on
// this kernel.
func killInCgroup(int, string) bool { return false }

// unmount: the engine's mounts are not on this kernel.
func unmount(string) error { return errors.ErrUnsupported }

// mountInfo is one mount; none are read here.
type mountInfo struct{ id int }

func (mountInfo) of(string) bool { return false }

// mountAt: the engine's mounts are not on this kernel.
func mountAt(string) (mountInfo, bool) { return mountInfo{}, false }
