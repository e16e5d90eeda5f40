//go:build !linux

package main

import "golang.org/x/sys/unix"

// redirectFD makes newfd a copy of oldfd.
func redirectFD(oldfd, newfd int) error { return unix.Dup2(oldfd, newfd) }

// ioctlGetTermios reads a terminal's settings.
const ioctlGetTermios = unix.TIOCGETA
