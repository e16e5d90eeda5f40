//go:build !linux

package loopdisk

import "os"

// attachFree is Linux's: elsewhere losetup serves (and Unavailable says
// what is missing).
func attachFree(*os.File) (string, bool) { return "", false }
