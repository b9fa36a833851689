//go:build linux

package gpushm

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/strata-gnn/strata/comm"
	sg "github.com/strata-gnn/strata/comm/internal/segment"
	"github.com/strata-gnn/strata/comm/internal/watch"
)

// The device path: an all-reduce of up to DeviceMax bytes runs entirely
// on the device's stream (see devOp). Every rank's stream copies its
// buffer into its input slot and raises its in flag (cuStreamWriteValue32
// on the mapped segment); each stream waits for the peers' in flags
// (cuStreamWaitValue32) and reduces all inputs in rank order with one
// kernel that reads the peers' slots over the bus. The host only queues
// the work; it takes no part in the exchange.
//
// A stream waiting for a peer that never comes would wait forever, so
// every queued op is watched: by the caller (synchronous mode, and
// asynchronous ops joined by a later call) or by a watchdog goroutine
// (asynchronous ops). At its deadline, on an abort, or when a peer has
// gone, the watcher publishes the abort in the segment, then releases
// its own stream by writing the values it waits for into the peers'
// flags, and waits for the stream to drain. A healthy rank whose stream
// consumed such a released flag sees the abort (published first) when
// its op completes and fails the op too.

// pendOp is a device-path op queued and not yet seen complete.
type pendOp struct {
	op       *devOp
	seq      uint64
	deadline time.Time
	start    time.Time // Run entered
	queued   time.Time // queue returned
}

// onDevice reports whether c runs on the device path.
func (t *transport) onDevice(c *comm.DeviceCall) bool {
	b := c.Recv.Len() * c.DType.Size()
	return t.st != nil && b > 0 && b <= t.devMax
}

// devAllReduce queues c on the device's stream and, unless asynchronous,
// waits for it.
func (t *transport) devAllReduce(ctx context.Context, c *comm.DeviceCall) error {
	start := time.Now()
	unbind, err := t.mv.bind()
	defer unbind()
	if err != nil {
		return err
	}
	if err := t.reap(); err != nil {
		return err
	}
	// At most Slots ops in flight (the completion marks are a ring).
	if len(t.pend) >= t.seg.L.Slots {
		if err := t.join(ctx, c.Deadline, 1, false); err != nil {
			return err
		}
	}
	t.ticket++
	op := &devOp{ticket: t.ticket, buf: c.Recv, dt: c.DType, red: c.Red, rank: t.rank, n: t.n, trace: t.tr != nil}
	b := c.Recv.Len() * c.DType.Size()
	k := (b + t.devChunk - 1) / t.devChunk
	cb := sg.AlignUp((b+k-1)/k, page)
	for off := 0; off < b; off += cb {
		s, u := t.slotOf(t.q)
		t.q++
		ch := devChunk{off: off, bytes: min(cb, b-off), slot: s, u: u, inputs: t.inputs[s],
			myIn: t.seg.inFlag(t.rank, s), myDone: t.seg.doneFlag(t.rank, s)}
		for r := 0; r < t.n; r++ {
			if r != t.rank && u > 0 {
				ch.waitDone = append(ch.waitDone, t.seg.doneFlag(r, s))
			}
			ch.waitIn = append(ch.waitIn, t.seg.inFlag(r, s))
		}
		op.chunks = append(op.chunks, ch)
	}
	p := &pendOp{op: op, seq: c.Seq, deadline: c.Deadline, start: start}
	err = t.st.queue(op)
	p.queued = time.Now()
	t.pend = append(t.pend, p)
	if err != nil {
		// Part of the op may be on the stream: release it.
		return t.failDevice(c.Seq, err)
	}
	if t.async {
		select {
		case t.wake <- struct{}{}:
		default:
		}
		return nil
	}
	return t.join(ctx, c.Deadline, len(t.pend), false)
}

// reap forgets the device-path ops that have completed, oldest first,
// without waiting. The context must be bound.
func (t *transport) reap() error {
	for len(t.pend) > 0 {
		p := t.pend[0]
		ok, err := t.st.done(p.op.ticket)
		if err != nil {
			return t.failDevice(p.seq, err)
		}
		if !ok {
			return nil
		}
		if err := t.completed(p); err != nil {
			return err
		}
	}
	return nil
}

// completed records that p finished; its result stands unless a rank
// has published an abort (it may rest on a released flag).
func (t *transport) completed(p *pendOp) error {
	t.pend = t.pend[1:]
	if err := t.checkAbort(); err != nil {
		return t.failDevice(p.seq, err)
	}
	if t.tr != nil {
		t.tr.devOp(t.st, p, time.Now())
	}
	return nil
}

// join waits for the oldest k queued device-path ops (all with k >=
// len(t.pend)), until dl and each op's own deadline. closing: Close's
// wait (a Close in progress is not a failure). The context must be bound.
func (t *transport) join(ctx context.Context, dl time.Time, k int, closing bool) error {
	if len(t.pend) == 0 {
		return nil
	}
	w := t.newIdler(ctx, dl, 0)
	w.closing = closing
	for k > 0 && len(t.pend) > 0 {
		p := t.pend[0]
		w.seq = p.seq
		if !p.deadline.IsZero() && (w.dl.IsZero() || p.deadline.Before(w.dl)) {
			w.dl = p.deadline
		}
		ok, err := t.st.done(p.op.ticket)
		if err != nil {
			return t.failDevice(p.seq, err)
		}
		if ok {
			if err := t.completed(p); err != nil {
				return err
			}
			k--
			w.progress()
			continue
		}
		w.who, w.what = t.waitingFor(p)
		if err := w.idle(); err != nil {
			return t.failDevice(p.seq, err)
		}
	}
	return nil
}

// joinAll waits for every queued device-path op.
func (t *transport) joinAll(ctx context.Context, dl time.Time) error {
	if len(t.pend) == 0 {
		return nil
	}
	unbind, err := t.mv.bind()
	defer unbind()
	if err != nil {
		return err
	}
	return t.join(ctx, dl, len(t.pend), false)
}

// waitingFor names the first peer p's streams still wait for.
func (t *transport) waitingFor(p *pendOp) (int, string) {
	for _, c := range p.op.chunks {
		for r := 0; r < t.n; r++ {
			if r == t.rank {
				continue
			}
			s := c.slot
			if c.u > 0 && !sg.Reached(atomic.LoadUint32(t.seg.doneFlag(r, s)), c.u) {
				return r, "a shared slot to be free"
			}
			if !sg.Reached(atomic.LoadUint32(t.seg.inFlag(r, s)), c.u+1) {
				return r, "its input"
			}
		}
	}
	return -1, "the device to finish the reduction"
}

// failDevice ends every queued device-path op after a failure of
// operation seq: it publishes the abort (so that peers fail instead of
// trusting a released flag), releases this rank's stream and waits for
// it to drain. It returns cause.
func (t *transport) failDevice(seq uint64, cause error) error {
	if len(t.pend) == 0 {
		return cause
	}
	var missing []int
	var pe *comm.PeerError
	switch {
	case errors.As(cause, &pe):
		missing = pe.Ranks
	case errors.Is(cause, context.DeadlineExceeded), errors.Is(cause, context.Canceled):
		missing = t.Missing(context.Background(), seq)
	case errors.Is(cause, comm.ErrClosed):
		missing = []int{t.rank} // closed mid-operation: this rank will not take part
	}
	t.seg.PublishAbort(t.rank, &comm.OpError{Kind: comm.KindGPUShm, Rank: t.rank, Op: comm.OpAllReduce, Seq: seq, Missing: missing, Err: cause})
	for _, p := range t.pend {
		for _, c := range p.op.chunks {
			for _, f := range c.waitDone {
				raise(f, c.u)
			}
			for _, f := range c.waitIn {
				if f != c.myIn { // this rank's copy side raises its own
					raise(f, c.u+1)
				}
			}
		}
	}
	dl := time.Now().Add(2 * time.Second)
	for len(t.pend) > 0 && time.Now().Before(dl) {
		ok, err := t.st.done(t.pend[0].op.ticket)
		if err != nil {
			break
		}
		if ok {
			t.pend = t.pend[1:]
			continue
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.pend = nil
	return cause
}

// raise makes *f reach want (a released wait), never lowering it.
func raise(f *uint32, want uint32) {
	for {
		v := atomic.LoadUint32(f)
		if sg.Reached(v, want) || atomic.CompareAndSwapUint32(f, v, want) {
			return
		}
	}
}

// watchdog watches asynchronous device-path ops between calls: it
// forgets completed ones and fails the oldest at its deadline, on an
// abort or when a peer has gone, so that no stream waits forever. It
// never blocks on runMu (a call in progress watches for itself).
func (t *transport) watchdog() {
	defer close(t.wdDone)
	unbind, err := t.mv.bind()
	defer unbind()
	if err != nil {
		return
	}
	watch.Loop(t.wdStop, t.wake, time.Millisecond, &t.runMu, t.watchOnce)
}

// watchOnce checks the queued ops once (runMu held) and reports whether
// some remain.
func (t *transport) watchOnce() bool {
	if t.closing.Load() {
		return false
	}
	if err := t.reap(); err != nil {
		t.asyncFailed(err)
		return false
	}
	if len(t.pend) == 0 {
		return false
	}
	p := t.pend[0]
	var err error
	if e := t.checkAbort(); e != nil {
		err = e
	} else if !p.deadline.IsZero() && time.Now().After(p.deadline) {
		who, what := t.waitingFor(p)
		if who >= 0 {
			what = fmt.Sprintf("rank %d (%s)", who, what)
		}
		err = fmt.Errorf("waiting for %s: %w", what, context.DeadlineExceeded)
	} else {
		for r := 0; r < t.n; r++ {
			if r != t.rank && t.gone(r, p.seq) {
				err = &comm.PeerError{Ranks: []int{r}, Err: comm.ErrPeerLost,
					Msg: fmt.Sprintf("rank %d closed its communicator or exited", r)}
				break
			}
		}
	}
	if err != nil {
		t.asyncFailed(t.failDevice(p.seq, err))
		return false
	}
	return true
}

// asyncFailed records the failure of an op queued asynchronously; the
// next call reports it.
func (t *transport) asyncFailed(err error) {
	if t.asyncErr == nil {
		t.asyncErr = &asyncError{err: err}
	}
}

// asyncError is a failure of an all-reduce that had already returned.
type asyncError struct{ err error }

func (e *asyncError) Error() string {
	return "an all-reduce queued asynchronously failed: " + e.err.Error()
}

func (e *asyncError) Unwrap() error { return e.err }
