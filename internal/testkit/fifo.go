package testkit

import (
	"testing"
	"time"
)

// blockDeadline bounds how long NoBlock waits. It guards against a hang,
// it does not measure speed: a reader that refuses a FIFO returns in
// microseconds, one that opens it blocks forever.
const blockDeadline = time.Minute

// NoBlock runs fn (which should refuse the FIFOs at the given paths) and
// fails the test if fn has not returned within a minute, naming what is
// blocked. It then opens every FIFO for writing and closes it, so a reader
// blocked in open(2) or read(2) returns and the test binary does not hang.
func NoBlock(t testing.TB, what string, fn func(), fifos ...string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return
	case <-time.After(blockDeadline):
	}
	for _, p := range fifos {
		releaseFIFO(p)
	}
	t.Fatalf("%s: still blocked after %v, presumably opening or reading the FIFO %v", what, blockDeadline, fifos)
}
