package main

import (
	"os"
	"os/signal"
	"syscall"
)

// forwardSignals calls fn for every SIGINT/SIGTERM the stand-in receives
// until the returned stop function is called.
func forwardSignals(fn func(os.Signal)) (stop func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-ch:
				fn(s)
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}
