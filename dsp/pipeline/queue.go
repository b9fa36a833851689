package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/strata-gnn/strata/dsp/metrics"
)

// DefaultCapacity is the queue capacity DSP found enough to overlap the
// stages.
const DefaultCapacity = 2

// StallError reports a wait that passed its deadline.
type StallError struct {
	Rank   int
	Stage  string // the waiting stage
	Queue  string
	Op     string // "push" (waiting for room) or "pop" (waiting for an item)
	Waited time.Duration
}

func (e *StallError) Error() string {
	if e.Op == "pop" {
		return fmt.Sprintf("pipeline: rank %d %s: nothing from queue %s for %v (the stage feeding it stalled)", e.Rank, e.Stage, e.Queue, e.Waited.Round(time.Millisecond))
	}
	return fmt.Sprintf("pipeline: rank %d %s: no room in queue %s for %v (the stage draining it stalled)", e.Rank, e.Stage, e.Queue, e.Waited.Round(time.Millisecond))
}

// Queue is a bounded FIFO between two stages of one device. Push and Pop
// may be called from different goroutines.
type Queue[T any] struct {
	name string
	rank int
	ch   chan T
	wait time.Duration

	mu      sync.Mutex
	n       int // items queued
	maxN    int
	pushes  int64
	since   time.Time // of the last change of n
	start   time.Time
	area    float64 // integral of n over time, item-seconds
	closeMu sync.Once
}

// NewQueue returns a queue of capacity items (DefaultCapacity if <= 0)
// whose waits fail after wait (no deadline if <= 0, beyond the context's).
func NewQueue[T any](name string, rank, capacity int, wait time.Duration) *Queue[T] {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	now := time.Now()
	return &Queue[T]{name: name, rank: rank, ch: make(chan T, capacity), wait: wait, since: now, start: now}
}

// Name is the queue's name (as given to NewQueue).
func (q *Queue[T]) Name() string { return q.name }

func (q *Queue[T]) update(delta int) {
	q.mu.Lock()
	now := time.Now()
	q.area += float64(q.n) * now.Sub(q.since).Seconds()
	q.since = now
	q.n = len(q.ch) // not a running count: a pop may be booked before the push it follows
	if delta > 0 {
		q.pushes++
	}
	q.maxN = max(q.maxN, q.n)
	q.mu.Unlock()
}

func (q *Queue[T]) timer() (<-chan time.Time, func()) {
	if q.wait <= 0 {
		return nil, func() {}
	}
	t := time.NewTimer(q.wait)
	return t.C, func() { t.Stop() }
}

// Push appends item, waiting while the queue is full. stage names the
// caller for errors.
func (q *Queue[T]) Push(ctx context.Context, stage string, item T) error {
	select {
	case q.ch <- item:
		q.update(1)
		return nil
	default:
	}
	start := time.Now()
	deadline, stop := q.timer()
	defer stop()
	select {
	case q.ch <- item:
		q.update(1)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-deadline:
		return &StallError{Rank: q.rank, Stage: stage, Queue: q.name, Op: "push", Waited: time.Since(start)}
	}
}

// Pop removes the oldest item, waiting while the queue is empty. ok is
// false once the queue is closed and drained.
func (q *Queue[T]) Pop(ctx context.Context, stage string) (item T, ok bool, err error) {
	select {
	case item, ok = <-q.ch:
		if ok {
			q.update(-1)
		}
		return item, ok, nil
	default:
	}
	start := time.Now()
	deadline, stop := q.timer()
	defer stop()
	select {
	case item, ok = <-q.ch:
		if ok {
			q.update(-1)
		}
		return item, ok, nil
	case <-ctx.Done():
		return item, false, ctx.Err()
	case <-deadline:
		return item, false, &StallError{Rank: q.rank, Stage: stage, Queue: q.name, Op: "pop", Waited: time.Since(start)}
	}
}

// Close tells the consumer no more items will come. Only the producer
// calls it, once it has pushed its last item.
func (q *Queue[T]) Close() { q.closeMu.Do(func() { close(q.ch) }) }

// Drain empties the queue (after a failure), passing every item to fn so
// the caller can free resources it holds.
func (q *Queue[T]) Drain(fn func(T)) {
	for {
		select {
		case item, ok := <-q.ch:
			if !ok {
				return
			}
			q.update(-1)
			if fn != nil {
				fn(item)
			}
		default:
			return
		}
	}
}

// Stats returns the queue's occupancy so far.
func (q *Queue[T]) Stats() metrics.QueueSnapshot {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	area := q.area + float64(q.n)*now.Sub(q.since).Seconds()
	d := now.Sub(q.start).Seconds()
	s := metrics.QueueSnapshot{Name: q.name, Capacity: cap(q.ch), Pushes: q.pushes, MaxOccupancy: q.maxN, ItemSeconds: area, Seconds: d}
	if d > 0 {
		s.MeanOccupancy = area / d
	}
	return s
}
