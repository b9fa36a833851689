package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-gnn/strata/tensor/backend"
)

// gate is what the host (front) and device (dfront) front ends share:
// one operation at a time, numbered in issue order, under the earlier of
// the caller's deadline and Options.Timeout; the debug check; the broken
// state after a failure (the peers are aborted and every later call
// fails); the history of recent operations; and Close.
type gate struct {
	t          gateTransport
	o          Options
	rank, size int

	sem    chan struct{} // serializes operations; select-able with ctx
	seq    atomic.Uint64 // written under sem
	broken error         // guarded by sem

	mu     sync.Mutex // guards hist, closed
	hist   []Record
	histAt int
	closed bool
}

// gateTransport is the part of Transport and DeviceTransport the gate
// uses.
type gateTransport interface {
	Kind() string
	Rank() int
	Size() int
	Missing(ctx context.Context, seq uint64) []int
	Abort(err *OpError)
	Close() error
}

func (g *gate) init(t gateTransport, o Options) {
	h := o.HistorySize
	if h <= 0 {
		h = 64
	}
	g.t, g.o, g.rank, g.size = t, o, t.Rank(), t.Size()
	g.sem = make(chan struct{}, 1)
	g.hist = make([]Record, 0, h)
}

func (g *gate) Rank() int    { return g.rank }
func (g *gate) Size() int    { return g.size }
func (g *gate) Kind() string { return g.t.Kind() }

func (g *gate) argErr(op Op, format string, a ...any) error {
	return &ArgError{Op: op, Rank: g.rank, Msg: fmt.Sprintf(format, a...)}
}

// isClosed reports whether Close was called.
func (g *gate) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// gated is one validated call as the gate sees it.
type gated struct {
	op    Op
	dtype backend.DType
	count int // elements, for the history
	// bind stores the call's sequence number and deadline in it.
	bind func(seq uint64, deadline time.Time)
	// check is the debug exchange of the call's descriptor (nil: none).
	check func(ctx context.Context) error
	run   func(ctx context.Context) error
}

// do runs one call: serialize, number, apply the deadline, run the debug
// check, run the call, and turn failures into *OpError.
func (g *gate) do(ctx context.Context, c gated) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, g.o.timeout()) // the earlier of ctx's deadline and the timeout
	defer cancel()
	start := time.Now()
	select {
	case g.sem <- struct{}{}:
	case <-ctx.Done():
		return &OpError{Kind: g.t.Kind(), Rank: g.rank, Op: c.op, Seq: g.seq.Load() + 1, Err: wrapCtx(ctx.Err(), "waiting for this rank's previous operation to finish")}
	}
	defer func() { <-g.sem }()

	closed := g.isClosed()
	seq := g.seq.Add(1)
	if closed {
		return &OpError{Kind: g.t.Kind(), Rank: g.rank, Op: c.op, Seq: seq, Err: ErrClosed}
	}
	if g.broken != nil {
		return &OpError{Kind: g.t.Kind(), Rank: g.rank, Op: c.op, Seq: seq, Err: fmt.Errorf("%w: %v", ErrBroken, g.broken)}
	}
	dl, _ := ctx.Deadline()
	c.bind(seq, dl)

	var err error
	if c.check != nil {
		err = c.check(ctx)
		var mm *MismatchError
		if errors.As(err, &mm) {
			// The exchange itself completed, and nothing of the
			// operation was sent: the communicator stays usable.
			oe := &OpError{Kind: g.t.Kind(), Rank: g.rank, Op: c.op, Seq: seq, Elapsed: time.Since(start), Err: err}
			g.record(c, seq, start, oe)
			return oe
		}
	}
	if err == nil {
		err = c.run(ctx)
	}
	if err != nil {
		err = g.fail(c.op, seq, dl, err, start)
	}
	g.record(c, seq, start, err)
	return err
}

// fail turns a transport error into an *OpError, finds the missing ranks,
// breaks the communicator and aborts the peers.
func (g *gate) fail(op Op, seq uint64, deadline time.Time, err error, start time.Time) error {
	oe := &OpError{Kind: g.t.Kind(), Rank: g.rank, Op: op, Seq: seq, Err: err}
	if isTimeout(err) {
		oe.Err = fmt.Errorf("%w (deadline %v after the call): %w", ErrTimeout, dur(deadline.Sub(start)), err)
	}
	if m, ok := missingOf(err); ok {
		oe.Missing = m
	} else if isTimeout(err) || errors.Is(err, context.Canceled) {
		mctx, cancel := context.WithTimeout(context.Background(), missingBudget)
		oe.Missing, _ = missingOf(&PeerError{Ranks: g.t.Missing(mctx, seq)})
		cancel()
	}
	oe.Elapsed = time.Since(start)
	g.broken = oe
	if !errors.Is(err, ErrClosed) { // a local Close already told the peers
		g.t.Abort(oe)
	}
	return oe
}

func (g *gate) record(c gated, seq uint64, start time.Time, err error) {
	r := Record{Seq: seq, Op: c.op, DType: c.dtype, Count: c.count, Start: start, Elapsed: time.Since(start)}
	if err != nil {
		r.Err = err.Error()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.hist) < cap(g.hist) {
		g.hist = append(g.hist, r)
		return
	}
	g.hist[g.histAt] = r
	g.histAt = (g.histAt + 1) % len(g.hist)
}

// History returns the most recent operations, oldest first.
func (g *gate) History() []Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Record, 0, len(g.hist))
	out = append(out, g.hist[g.histAt:]...)
	return append(out, g.hist[:g.histAt]...)
}

func (g *gate) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	return g.t.Close()
}

// checkDescriptors gathers every rank's descriptor of the pending call
// (mine) through gather and returns a *MismatchError if they disagree.
func (g *gate) checkDescriptors(seq uint64, mine []int64, gather func(all []int64) error) error {
	n := g.size
	l := len(mine)
	all := make([]int64, n*l)
	if err := gather(all); err != nil {
		return err
	}
	descs := make([][]int64, n)
	for r := range descs {
		descs[r] = all[r*l : (r+1)*l]
	}
	if diff := compareDescs(descs, n); diff != "" {
		e := &MismatchError{Seq: seq, Diff: diff}
		for r, d := range descs {
			e.Ranks = append(e.Ranks, fmt.Sprintf("rank %d %s", r, describe(d, n)))
		}
		return e
	}
	return nil
}
