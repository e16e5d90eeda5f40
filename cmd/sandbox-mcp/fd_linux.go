package main

import "golang.org/x/sys/unix"

// redirectFD makes newfd a copy of oldfd (Dup3: linux/arm64 has no Dup2).
func redirectFD(oldfd, newfd int) error { return unix.Dup3(oldfd, newfd, 0) }

// ioctlGetTermios reads a terminal's settings.
const ioctlGetTermios = unix.TCGETS
