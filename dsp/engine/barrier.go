package engine

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// hostBarrier is a one-shot barrier of k ranks on the host.
type hostBarrier struct {
	mu      sync.Mutex
	arrived []bool
	n       int
	done    chan struct{}
}

func newHostBarrier(k int) *hostBarrier {
	return &hostBarrier{arrived: make([]bool, k), done: make(chan struct{})}
}

// wait marks rank arrived and returns once every rank has, or an error
// naming the ranks missing when ctx ends or timeout passes.
func (b *hostBarrier) wait(ctx context.Context, rank int, timeout time.Duration, what string) error {
	b.mu.Lock()
	if !b.arrived[rank] {
		b.arrived[rank] = true
		if b.n++; b.n == len(b.arrived) {
			close(b.done)
		}
	}
	b.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("waited %s for %s of rank(s) %v", timeout, what, b.missing())
	}
}

func (b *hostBarrier) missing() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for r, ok := range b.arrived {
		if !ok {
			out = append(out, r)
		}
	}
	return out
}
