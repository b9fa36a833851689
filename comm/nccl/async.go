package nccl

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/internal/watch"
)

// pending describes the operations queued asynchronously and not yet
// seen complete. They run in order on one stream, so the completion event
// (recorded after the latest) tells when all are done; the first one's
// deadline is the earliest.
type pending struct {
	n        int       // how many (0: none)
	first    uint64    // sequence number of the oldest
	last     uint64    // and of the latest
	op       comm.Op   // the oldest's operation
	deadline time.Time // the oldest's deadline (zero: none)
	since    time.Time // when the oldest was queued
	lastPost time.Time // last store check on their behalf
}

func (p *pending) add(op comm.Op, seq uint64, deadline time.Time) {
	if p.n == 0 {
		*p = pending{first: seq, op: op, deadline: deadline, since: time.Now()}
	}
	p.n++
	p.last = seq
}

// asyncError is the failure of an operation that had already returned.
type asyncError struct{ err error }

func (e *asyncError) Error() string {
	return "an operation queued asynchronously failed: " + e.err.Error()
}

func (e *asyncError) Unwrap() error { return e.err }

// watchInterval is how often the watchdog looks at queued operations. It
// only bounds how soon a failure is noticed: nothing waits for it.
const watchInterval = time.Millisecond

// watchdog checks the queued operations while there are some: it marks
// them complete, or fails them at their deadline or on a peer's abort.
func (t *transport) watchdog() {
	defer close(t.wdDone)
	watch.Loop(t.wdStop, t.wake, watchInterval, &t.runMu, t.watchOnce)
}

// watchOnce looks at the queued operations once (runMu held) and reports
// whether some remain.
func (t *transport) watchOnce() bool {
	if t.pend.n == 0 || t.asyncErr != nil || t.closing.Load() {
		return false
	}
	err := t.bound(func() error {
		done, err := t.ev.Done()
		if err != nil {
			return err
		}
		if done {
			t.pend = pending{}
			return nil
		}
		return t.comm.AsyncError()
	})
	if err == nil && t.pend.n > 0 {
		now := time.Now()
		switch {
		case !t.pend.deadline.IsZero() && now.After(t.pend.deadline):
			err = fmt.Errorf("waiting for NCCL to complete it: %w", context.DeadlineExceeded)
		case now.Sub(t.pend.since) > slowAfter && now.Sub(t.pend.lastPost) > slowEvery:
			// Say where this rank is, and look for a peer's abort.
			t.pend.lastPost = now
			err = t.slow(t.pend.last)
		}
	}
	if err != nil {
		t.failPending(err)
		return false
	}
	return t.pend.n > 0
}

// failPending records the failure of the queued operations for the next
// call, publishes it and aborts the communicator, which ends their kernels
// (so that stream waits elsewhere return).
func (t *transport) failPending(err error) {
	oe := &comm.OpError{Kind: comm.KindNCCL, Rank: t.rank, Op: t.pend.op, Seq: t.pend.first,
		Elapsed: time.Since(t.pend.since), Err: err}
	if _, peer := err.(*comm.AbortError); !peer {
		ctx, cancel := shortCtx()
		oe.Missing = t.Missing(ctx, t.pend.first)
		cancel()
	}
	t.asyncErr = &asyncError{err: oe}
	t.dirty.Store(true)
	t.Abort(oe)
}

// joinPending waits for the queued operations (runMu held), bounded by
// ctx and their deadline; a failure is recorded as failPending does.
func (t *transport) joinPending(ctx context.Context) error {
	if t.asyncErr != nil {
		return t.asyncErr
	}
	if t.pend.n == 0 {
		return nil
	}
	if !t.pend.deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, t.pend.deadline)
		defer cancel()
	}
	if err := t.wait(ctx, t.pend.op, t.pend.last); err != nil {
		t.failPending(err)
		return t.asyncErr
	}
	t.pend = pending{}
	return nil
}
