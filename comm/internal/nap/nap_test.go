package nap

import (
	"runtime"
	"testing"
	"time"
)

// Sleep must sleep at least about as long as asked (it may return early
// only on a signal, which this test does not send).
func TestSleepLastsAtLeastAsked(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, d := range []time.Duration{20 * time.Microsecond, 200 * time.Microsecond, 2 * time.Millisecond} {
		t0 := time.Now()
		Sleep(d)
		if got := time.Since(t0); got < d {
			t.Errorf("Sleep(%v) returned after %v", d, got)
		}
	}
}
