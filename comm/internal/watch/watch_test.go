package watch

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLoop: checks start at a wake, run under the lock until check
// reports no more work, skip ticks while the lock is held elsewhere, and
// stop when stop closes.
func TestLoop(t *testing.T) {
	var mu sync.Mutex
	stop, wake, done := make(chan struct{}), make(chan struct{}, 1), make(chan struct{})
	var calls, left atomic.Int32
	left.Store(3)
	go func() {
		defer close(done)
		Loop(stop, wake, time.Millisecond, &mu, func() bool {
			if mu.TryLock() {
				t.Error("check ran without the lock")
				mu.Unlock()
			}
			calls.Add(1)
			return left.Add(-1) > 0
		})
	}()
	time.Sleep(20 * time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d checks before a wake", n)
	}
	wake <- struct{}{}
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d checks, want 3 (until check reports no more work)", n)
	}
	// While the lock is held elsewhere, no check runs.
	mu.Lock()
	left.Store(1)
	wake <- struct{}{}
	time.Sleep(20 * time.Millisecond)
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d checks while the lock was held", n)
	}
	mu.Unlock()
	for calls.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("%d checks after the lock was released, want 4", n)
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Loop did not return after stop")
	}
}
