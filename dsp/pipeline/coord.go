package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strata-gnn/strata/comm"
)

// ErrCoordinatorAborted is wrapped by Acquire's error after Abort.
var ErrCoordinatorAborted = errors.New("pipeline: coordinator aborted")

// CoordError reports a collective that did not get its turn in time.
type CoordError struct {
	Rank   int
	Stage  string
	Next   string // the stage whose collective comes first in the launch order
	Waited time.Duration
}

func (e *CoordError) Error() string {
	next := e.Next
	if next == "" {
		next = "the leader's registration"
	}
	return fmt.Sprintf("pipeline: rank %d %s: no turn to launch a collective for %v (waiting for %s)", e.Rank, e.Stage, e.Waited.Round(time.Millisecond), next)
}

// Coordinator fixes one launch order for the collectives of every stage of
// k devices (see the package documentation). The order is the order in
// which the leader's (rank 0's) stages register; every device launches its
// collectives in that order, one at a time.
type Coordinator struct {
	k      int
	stages []string
	wait   time.Duration

	mu   sync.Mutex
	seq  []int // stage of each collective, from index base on
	base int
	next []int  // per device: index of its next collective
	busy []bool // per device: a collective is in flight
	wake chan struct{}
	err  error
}

// NewCoordinator coordinates k devices whose stages are named by stages
// (a stage is given to Acquire by index). A wait for a turn fails after
// wait (none if <= 0).
func NewCoordinator(k int, stages []string, wait time.Duration) (*Coordinator, error) {
	if k < 1 || len(stages) == 0 {
		return nil, fmt.Errorf("pipeline: coordinator for %d devices and %d stages", k, len(stages))
	}
	return &Coordinator{k: k, stages: append([]string(nil), stages...), wait: wait,
		next: make([]int, k), busy: make([]bool, k), wake: make(chan struct{})}, nil
}

func (c *Coordinator) broadcast() {
	close(c.wake)
	c.wake = make(chan struct{})
}

// Acquire waits until it is stage's turn on device rank to launch its next
// collective. Call Release once the collective has returned.
func (c *Coordinator) Acquire(ctx context.Context, rank, stage int) error {
	if rank < 0 || rank >= c.k || stage < 0 || stage >= len(c.stages) {
		return fmt.Errorf("pipeline: Acquire(rank %d, stage %d) out of range", rank, stage)
	}
	start := time.Now()
	var deadline <-chan time.Time
	if c.wait > 0 {
		t := time.NewTimer(c.wait)
		defer t.Stop()
		deadline = t.C
	}
	c.mu.Lock()
	mine := -1 // the leader's own slot
	if rank == 0 {
		c.seq = append(c.seq, stage)
		mine = c.base + len(c.seq) - 1
		c.broadcast()
	}
	for {
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return fmt.Errorf("%w: %w", ErrCoordinatorAborted, err)
		}
		i := c.next[rank]
		if !c.busy[rank] && i < c.base+len(c.seq) && c.seq[i-c.base] == stage && (rank != 0 || i == mine) {
			c.busy[rank] = true
			c.mu.Unlock()
			return nil
		}
		next := ""
		if i < c.base+len(c.seq) {
			next = c.stages[c.seq[i-c.base]]
		}
		wake := c.wake
		c.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return &CoordError{Rank: rank, Stage: c.stages[stage], Next: next, Waited: time.Since(start)}
		}
		c.mu.Lock()
	}
}

// Release ends device rank's collective in flight.
func (c *Coordinator) Release(rank int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rank < 0 || rank >= c.k || !c.busy[rank] {
		return
	}
	c.busy[rank] = false
	c.next[rank]++
	// Forget what every device has launched.
	low := c.next[0]
	for _, n := range c.next[1:] {
		low = min(low, n)
	}
	if drop := low - c.base; drop > 64 && drop > len(c.seq)/2 {
		c.seq = append(c.seq[:0], c.seq[drop:]...)
		c.base = low
	}
	c.broadcast()
}

// Abort makes every pending and later Acquire fail with err.
func (c *Coordinator) Abort(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		if err == nil {
			err = errors.New("aborted")
		}
		c.err = err
		c.broadcast()
	}
}

// Launched returns how many collectives device rank has launched.
func (c *Coordinator) Launched(rank int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next[rank]
}

// Comm wraps one stage's communicator: every collective first calls the
// hook, then waits for its turn in the coordinator's launch order (when
// the coordinator is not nil), runs, and releases the turn.
//
// Track, when set, is told what the stage is blocked on: "waiting for
// its turn to launch <op>", "in <op>", and "" once the collective has
// returned successfully (for diagnosing stalls; after a failure the last
// state stays).
type Comm struct {
	comm.Comm
	Coord *Coordinator
	Stage int
	Name  string
	Hook  Hook
	Track func(blocked string)
}

var _ comm.Comm = (*Comm)(nil)

func (c *Comm) track(s string) {
	if c.Track != nil {
		c.Track(s)
	}
}

func (c *Comm) run(ctx context.Context, op comm.Op, fn func() error) error {
	if c.Hook != nil {
		c.Hook(ctx, c.Rank(), "comm/"+c.Name)
	}
	if c.Coord != nil {
		c.track("waiting for its turn to launch " + op.String())
		if err := c.Coord.Acquire(ctx, c.Rank(), c.Stage); err != nil {
			return err // still blocked as far as a diagnosis is concerned
		}
		defer c.Coord.Release(c.Rank())
	}
	c.track("in " + op.String())
	if err := fn(); err != nil {
		return err
	}
	c.track("")
	return nil
}

func (c *Comm) AllReduce(ctx context.Context, buf comm.Buf, op comm.ReduceOp) error {
	return c.run(ctx, comm.OpAllReduce, func() error { return c.Comm.AllReduce(ctx, buf, op) })
}

func (c *Comm) Broadcast(ctx context.Context, buf comm.Buf, root int) error {
	return c.run(ctx, comm.OpBroadcast, func() error { return c.Comm.Broadcast(ctx, buf, root) })
}

func (c *Comm) AllGather(ctx context.Context, dst, src comm.Buf) error {
	return c.run(ctx, comm.OpAllGather, func() error { return c.Comm.AllGather(ctx, dst, src) })
}

func (c *Comm) AllGatherV(ctx context.Context, dst, src comm.Buf, counts []int) error {
	return c.run(ctx, comm.OpAllGatherV, func() error { return c.Comm.AllGatherV(ctx, dst, src, counts) })
}

func (c *Comm) AllToAll(ctx context.Context, dst, src comm.Buf) error {
	return c.run(ctx, comm.OpAllToAll, func() error { return c.Comm.AllToAll(ctx, dst, src) })
}

func (c *Comm) AllToAllV(ctx context.Context, dst comm.Buf, recvCounts []int, src comm.Buf, sendCounts []int) error {
	return c.run(ctx, comm.OpAllToAllV, func() error { return c.Comm.AllToAllV(ctx, dst, recvCounts, src, sendCounts) })
}

func (c *Comm) ReduceScatter(ctx context.Context, dst, src comm.Buf, op comm.ReduceOp) error {
	return c.run(ctx, comm.OpReduceScatter, func() error { return c.Comm.ReduceScatter(ctx, dst, src, op) })
}

func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, comm.OpBarrier, func() error { return c.Comm.Barrier(ctx) })
}
