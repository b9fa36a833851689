package commtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// FaultTimeout is the per-operation timeout of the fault suite's
// deadline scenarios.
func FaultTimeout() time.Duration {
	if short() {
		return 400 * time.Millisecond
	}
	return time.Second
}

// Slack is how long after its deadline a rank may take to report a
// failure (asking peers who is missing, scheduling on a loaded machine,
// the race detector).
const Slack = 2 * time.Second

// CheckOpError checks that err is an *OpError for op #seq naming exactly
// the missing ranks (any when missing is nil), wrapping target (when not
// nil).
func CheckOpError(err error, op comm.Op, seq uint64, missing []int, target error) error {
	var oe *comm.OpError
	if !errors.As(err, &oe) {
		return fmt.Errorf("got %v (%T), want an *comm.OpError", err, err)
	}
	if oe.Op != op || oe.Seq != seq {
		return fmt.Errorf("error names %v #%d, want %v #%d: %v", oe.Op, oe.Seq, op, seq, err)
	}
	if missing != nil && !slices.Equal(oe.Missing, missing) {
		return fmt.Errorf("error names missing ranks %v, want %v: %v", oe.Missing, missing, err)
	}
	if target != nil && !errors.Is(err, target) {
		return fmt.Errorf("error does not wrap %v: %v", target, err)
	}
	return nil
}

// checkMissing checks that err is an *OpError for op #seq wrapping
// target whose missing ranks include victim: exactly [victim] with two
// ranks; with more, a rank that gave up first may be listed too.
func checkMissing(err error, op comm.Op, seq uint64, victim, n int, target error) error {
	if e := CheckOpError(err, op, seq, nil, target); e != nil {
		return e
	}
	var oe *comm.OpError
	errors.As(err, &oe)
	if !slices.Contains(oe.Missing, victim) || (n == 2 && len(oe.Missing) != 1) {
		return fmt.Errorf("error names missing ranks %v, want %d among them: %v", oe.Missing, victim, err)
	}
	return nil
}

// CountCase is one "ranks pass different counts" scenario: the last
// rank passes Other elements where the others pass Len (to an
// all-reduce, or as each rank's block of an all-gather).
type CountCase struct {
	Op         comm.Op
	Len, Other int
}

func (c CountCase) String() string {
	return fmt.Sprintf("%v of %d and %d elements", c.Op, c.Len, c.Other)
}

// CountCases are the count-mismatch scenarios of the fault suite.
func CountCases() []CountCase {
	return []CountCase{
		{comm.OpAllReduce, 1000, 1001},   // one chunk
		{comm.OpAllReduce, 40000, 40001}, // many chunks
		{comm.OpAllReduce, 16000, 17000}, // 64000 and 68000 bytes: one side of shm's 64 KiB threshold each
		{comm.OpAllReduce, 0, 5},         // nothing to send on most ranks
		{comm.OpAllGather, 100, 101},
	}
}

// CheckCountError checks the error of operation #seq of a CountCase: an
// *OpError for it that wraps ErrMismatch (the rank that found the
// difference) or ErrAborted (a rank it aborted), whose text names both
// counts.
func CheckCountError(err error, tc CountCase, seq uint64) error {
	if e := CheckOpError(err, tc.Op, seq, nil, nil); e != nil {
		return e
	}
	if !errors.Is(err, comm.ErrMismatch) && !errors.Is(err, comm.ErrAborted) {
		return fmt.Errorf("error wraps neither ErrMismatch nor ErrAborted: %v", err)
	}
	for _, k := range []int{tc.Len, tc.Other} {
		if !strings.Contains(err.Error(), fmt.Sprint(k)) {
			return fmt.Errorf("error does not name the count %d: %v", k, err)
		}
	}
	return nil
}

// RankFaults runs the fault suite on this rank of a group of two or
// more: a rank that stalls (the last rank skips an all-reduce), a rank
// that closes instead of joining, a rank closing right after its last
// operation, disagreeing ranks in Debug mode, ranks that pass different
// counts (Debug off), invalid arguments, cancellation, a context
// deadline, a rank closed while its own operation waits, and use after
// Close. Each scenario opens a fresh group; scenarios named in Env.Skip
// are skipped; failures are returned, named by scenario.
func RankFaults(ctx context.Context, e Env) error {
	if e.Size < 2 {
		return fmt.Errorf("commtest: RankFaults needs two or more ranks, have %d", e.Size)
	}
	be, err := orCPU(e.Backend)
	if err != nil {
		return err
	}
	e.Backend = be
	var errs []error
	for _, s := range []struct {
		name string
		f    func(context.Context, Env) error
	}{
		{"stall", fStall}, {"close", fClose}, {"close-after-last-op", fCloseAfterLast},
		{"mismatch-debug", fMismatch}, {"counts", fCounts}, {"args", fArgs}, {"cancel", fCancel},
		{"ctx-deadline", fCtxDeadline}, {"close-during-op", fCloseDuringOp}, {"closed", fClosed},
	} {
		if why, ok := e.Skip[s.name]; ok {
			e.logf("rank %d: faults/%s skipped: %s", e.Rank, s.name, why)
			continue
		}
		// Every rank runs every scenario, also after a failure, so that no
		// rank waits at a barrier for one that gave up.
		t0 := time.Now()
		err := s.f(ctx, e)
		if berr := e.Barrier("faults/" + s.name); err == nil {
			err = berr
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("faults/%s: rank %d: %w", s.name, e.Rank, err))
			continue
		}
		e.logf("rank %d: faults/%s ok (%v)", e.Rank, s.name, time.Since(t0).Round(time.Millisecond))
	}
	return errors.Join(errs...)
}

// zeros makes a buffer of n zeros of dt.
func zeros(d *bufs, dt backend.DType, n int) (backend.Buffer, error) {
	return d.put(newHost(dt, n))
}

// warm runs operation #1, a barrier, then waits outside the
// communicator until every rank has left it: a failure a scenario
// provokes in #2 must not reach a rank still finishing #1.
func warm(ctx context.Context, e Env, c comm.Comm, name string) error {
	err := c.Barrier(ctx)
	if err != nil {
		err = fmt.Errorf("warm-up barrier: %w", err)
	}
	return errors.Join(err, e.Barrier(name+"/warm"))
}

func fStall(ctx context.Context, e Env) error {
	d := FaultTimeout()
	c, err := e.Open(comm.Options{Timeout: d})
	if err != nil {
		return err
	}
	defer c.Close()
	bufs := &bufs{be: e.Backend}
	defer bufs.free()
	victim := e.Size - 1
	// Every rank passes the barrier "stall/reported" once, whatever
	// happens before it.
	var x backend.Buffer
	err = warm(ctx, e, c, "stall")
	if err == nil {
		x, err = zeros(bufs, backend.Float32, 1000)
	}
	if e.Rank != victim {
		if err == nil {
			start := time.Now()
			err = c.AllReduce(ctx, x, comm.Sum)
			el := time.Since(start)
			var target error
			if e.Size == 2 {
				target = comm.ErrTimeout
			}
			err = checkMissing(err, comm.OpAllReduce, 2, victim, e.Size, target)
			if err == nil && el > d+Slack {
				err = fmt.Errorf("returned after %v, deadline %v", el, d)
			}
		}
		return errors.Join(err, e.Barrier("stall/reported"))
	}
	// The victim joins only after the others have given up; its late call
	// must fail quickly (they aborted the communicator).
	if berr := e.Barrier("stall/reported"); err == nil {
		err = berr
	}
	if err != nil {
		return err
	}
	late := time.Now()
	err = c.AllReduce(ctx, x, comm.Sum)
	if err == nil || !errors.As(err, new(*comm.OpError)) {
		return fmt.Errorf("stalled rank's late call: %v, want an *OpError", err)
	}
	if el := time.Since(late); el > d/2+Slack/4 {
		return fmt.Errorf("stalled rank's late call took %v; it should fail promptly (the others aborted): %v", el, err)
	}
	return nil
}

func fClose(ctx context.Context, e Env) error {
	c, err := e.Open(comm.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := warm(ctx, e, c, "close"); err != nil {
		return err
	}
	victim := e.Size - 1
	if e.Rank == victim {
		time.Sleep(50 * time.Millisecond)
		return c.Close()
	}
	bufs := &bufs{be: e.Backend}
	defer bufs.free()
	x, err := zeros(bufs, backend.Int64, 5000)
	if err != nil {
		return err
	}
	start := time.Now()
	err = c.AllReduce(ctx, x, comm.Sum)
	if el := time.Since(start); el > 3*time.Second {
		return fmt.Errorf("returned after %v; a closed peer must be noticed promptly", el)
	}
	return CheckOpError(err, comm.OpAllReduce, 2, []int{victim}, nil)
}

// fCloseAfterLast: a rank that closes as soon as its last operation
// returns must not make the others' copy of that operation fail.
func fCloseAfterLast(ctx context.Context, e Env) error {
	var first error
	for i := 0; i < 4; i++ {
		c, err := e.Open(comm.Options{Timeout: 10 * time.Second})
		if err != nil {
			return err
		}
		closer := i % e.Size
		err = func() error {
			bufs := &bufs{be: e.Backend}
			defer bufs.free()
			x, err := zeros(bufs, backend.Float32, 1<<14)
			if err != nil {
				return err
			}
			y, err := zeros(bufs, backend.Float32, e.Size<<12)
			if err != nil {
				return err
			}
			z, err := zeros(bufs, backend.Float32, 1<<12)
			if err != nil {
				return err
			}
			if err := c.AllReduce(ctx, x, comm.Sum); err != nil {
				return err
			}
			err = c.AllGather(ctx, y, z)
			if e.Rank == closer {
				c.Close()
			} else if err == nil {
				err = c.Sync(ctx)
			}
			return err
		}()
		c.Close()
		if berr := e.Barrier(fmt.Sprintf("close-after-last/%d", i)); err == nil {
			err = berr
		}
		if err != nil && first == nil {
			// Go on: every rank opens as many groups as the others.
			first = fmt.Errorf("round %d (rank %d closes): %w", i, closer, err)
		}
	}
	return first
}

// fMismatch: in Debug mode, ranks issuing different operations, sizes
// or all-to-all-v counts that do not pair up all fail with ErrMismatch,
// and the communicator stays usable (nothing was exchanged).
func fMismatch(ctx context.Context, e Env) error {
	c, err := e.Open(comm.Options{Timeout: 10 * time.Second, Debug: true})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := warm(ctx, e, c, "mismatch-debug"); err != nil {
		return err
	}
	bufs := &bufs{be: e.Backend}
	defer bufs.free()
	x, err := zeros(bufs, backend.Float32, 10)
	if err != nil {
		return err
	}
	if e.Rank == 0 {
		err = CheckOpError(c.AllReduce(ctx, x, comm.Sum), comm.OpAllReduce, 2, nil, comm.ErrMismatch)
	} else {
		err = CheckOpError(c.Broadcast(ctx, x, 0), comm.OpBroadcast, 2, nil, comm.ErrMismatch)
	}
	if err != nil {
		return err
	}
	y, err := zeros(bufs, backend.Float32, 10+e.Rank)
	if err != nil {
		return err
	}
	if err := CheckOpError(c.AllReduce(ctx, y, comm.Sum), comm.OpAllReduce, 3, nil, comm.ErrMismatch); err != nil {
		return err
	}
	// All-to-all-v: rank 0 expects two elements from rank 1, which sends
	// one; everything else pairs up.
	send, recv := make([]int, e.Size), make([]int, e.Size)
	for p := range send {
		send[p], recv[p] = 1, 1
	}
	if e.Rank == 0 {
		recv[1] = 2
	}
	src, err := zeros(bufs, backend.Int32, e.Size)
	if err != nil {
		return err
	}
	dst, err := zeros(bufs, backend.Int32, e.Size+1-min(e.Rank, 1))
	if err != nil {
		return err
	}
	if err := CheckOpError(c.AllToAllV(ctx, dst, recv, src, send), comm.OpAllToAllV, 4, nil, comm.ErrMismatch); err != nil {
		return err
	}
	// Still usable: the check ran before anything was exchanged.
	return RunCase(ctx, c, e.Backend, Case{Op: comm.OpAllReduce, DType: backend.Float32, Red: comm.Sum, Len: 33, Seed: 5})
}

// fCounts: the last rank passes more elements than the others (Debug
// off); every rank fails at once naming the operation and both counts.
func fCounts(ctx context.Context, e Env) error {
	var first error
	for _, tc := range CountCases() {
		err := func() error {
			c, err := e.Open(comm.Options{Timeout: 10 * time.Second})
			if err != nil {
				return err
			}
			defer c.Close()
			if err := warm(ctx, e, c, "counts"); err != nil {
				return err
			}
			bufs := &bufs{be: e.Backend}
			defer bufs.free()
			n := tc.Len
			if e.Rank == e.Size-1 {
				n = tc.Other
			}
			x, err := zeros(bufs, backend.Float32, n)
			if err != nil {
				return err
			}
			start := time.Now()
			if tc.Op == comm.OpAllGather {
				var y backend.Buffer
				if y, err = zeros(bufs, backend.Float32, e.Size*n); err == nil {
					err = c.AllGather(ctx, y, x)
				}
			} else {
				err = c.AllReduce(ctx, x, comm.Sum)
			}
			if el := time.Since(start); el > Slack {
				return fmt.Errorf("returned after %v; a count mismatch must be refused at once: %v", el, err)
			}
			return CheckCountError(err, tc, 2)
		}()
		if berr := e.Barrier(fmt.Sprintf("counts/%v", tc)); err == nil {
			err = berr
		}
		if err != nil && first == nil {
			// Go on: every rank opens as many groups as the others.
			first = fmt.Errorf("%v: %w", tc, err)
		}
	}
	return first
}

// foreign is a buffer of no back end.
type foreign struct{}

func (foreign) Len() int             { return 4 }
func (foreign) DType() backend.DType { return backend.Float32 }

// fArgs: invalid arguments are *ArgErrors, found before anything is
// sent: the group is still at #1 after them.
func fArgs(ctx context.Context, e Env) error {
	c, err := e.Open(comm.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	if e.Rank == 0 {
		bufs := &bufs{be: e.Backend}
		defer bufs.free()
		n := e.Size
		var bs []backend.Buffer
		for _, spec := range []struct {
			dt backend.DType
			n  int
		}{{backend.Float32, 6}, {backend.Float32, 3}, {backend.Int64, 3}, {backend.Float32, 5}, {backend.Float32, 4},
			{backend.Float32, 1}, {backend.Float32, 0}, {backend.Float32, n}, {backend.Float32, n + 1}} {
			b, err := zeros(bufs, spec.dt, spec.n)
			if err != nil {
				return err
			}
			bs = append(bs, b)
		}
		f6, f3, i3, f5, f4, f1, f0, fn, fn1 := bs[0], bs[1], bs[2], bs[3], bs[4], bs[5], bs[6], bs[7], bs[8]
		ones := make([]int, n)
		for i := range ones {
			ones[i] = 1
		}
		neg := append([]int{-1}, ones[1:]...)
		bad := []error{
			c.AllReduce(ctx, nil, comm.Sum),
			c.AllReduce(ctx, foreign{}, comm.Sum),
			c.AllReduce(ctx, f6, comm.ReduceOp(9)),
			c.Broadcast(ctx, f6, n),
			c.Broadcast(ctx, f6, -1),
			c.AllGather(ctx, f5, f3),        // 5 elements, not n x 3
			c.AllGather(ctx, f6, i3),        // dtypes differ
			c.AllGather(ctx, f6, f6),        // overlap
			c.AllGather(ctx, f6, foreign{}), // not the back end's
			c.AllGatherV(ctx, f6, f1, make([]int, n+1)),
			c.AllGatherV(ctx, f6, f0, ones),         // counts[0] = 1 but src is empty
			c.AllGatherV(ctx, f3, f1, neg),          // a negative count
			c.AllGatherV(ctx, fn1, f1, ones),        // counts sum to n, not n+1
			c.AllToAll(ctx, f5, f5),                 // overlap
			c.AllToAll(ctx, f4, f6),                 // lengths differ (or 6 is not a multiple of n)
			c.AllToAllV(ctx, f3, ones, f3, ones),    // overlap
			c.AllToAllV(ctx, f4, neg, fn, ones),     // a negative count
			c.AllToAllV(ctx, fn1, ones, fn, ones),   // recvCounts sum to n, not n+1
			c.ReduceScatter(ctx, f1, fn1, comm.Sum), // n+1 is not n x 1
			c.ReduceScatter(ctx, f1, fn, 0),         // no reduction
			c.ReduceScatter(ctx, nil, f6, comm.Max), // no dst
		}
		for i, err := range bad {
			var ae *comm.ArgError
			if !errors.As(err, &ae) {
				return fmt.Errorf("case %d: got %v, want *comm.ArgError", i, err)
			}
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if h := c.History(); len(h) != 1 || h[0].Seq != 1 {
		return fmt.Errorf("history %+v, want one record #1", h)
	}
	return nil
}

func fCancel(ctx context.Context, e Env) error {
	c, err := e.Open(comm.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	err = warm(ctx, e, c, "cancel")
	if e.Rank != 0 || err != nil {
		return errors.Join(err, e.Barrier("cancel/done")) // ranks > 0 never join #2
	}
	err = func() error {
		bufs := &bufs{be: e.Backend}
		defer bufs.free()
		x, err := zeros(bufs, backend.Float32, 8)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		err = c.AllReduce(cctx, x, comm.Sum)
		missing := make([]int, 0, e.Size-1)
		for r := 1; r < e.Size; r++ {
			missing = append(missing, r)
		}
		if cerr := CheckOpError(err, comm.OpAllReduce, 2, missing, context.Canceled); cerr != nil {
			return cerr
		}
		if el := time.Since(start); el > Slack {
			return fmt.Errorf("cancelled call returned after %v", el)
		}
		return nil
	}()
	return errors.Join(err, e.Barrier("cancel/done"))
}

func fCtxDeadline(ctx context.Context, e Env) error {
	d := FaultTimeout()
	c, err := e.Open(comm.Options{Timeout: time.Minute})
	if err != nil {
		return err
	}
	defer c.Close()
	err = warm(ctx, e, c, "ctx-deadline")
	if e.Rank != 1 || err != nil {
		return errors.Join(err, e.Barrier("ctx-deadline/done")) // rank 0, the root, never joins #2
	}
	err = func() error {
		bufs := &bufs{be: e.Backend}
		defer bufs.free()
		x, err := zeros(bufs, backend.Int32, 8)
		if err != nil {
			return err
		}
		dctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		start := time.Now()
		err = c.Broadcast(dctx, x, 0)
		el := time.Since(start)
		if cerr := checkMissing(err, comm.OpBroadcast, 2, 0, e.Size, comm.ErrTimeout); cerr != nil {
			return cerr
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%v does not wrap context.DeadlineExceeded", err)
		}
		if el < d-10*time.Millisecond || el > d+Slack {
			return fmt.Errorf("returned after %v, deadline %v", el, d)
		}
		return nil
	}()
	return errors.Join(err, e.Barrier("ctx-deadline/done"))
}

// fCloseDuringOp: closing rank 0 while its own operation waits (the
// others have not joined) ends that operation at once with ErrClosed;
// then the others notice the closed rank promptly.
func fCloseDuringOp(ctx context.Context, e Env) error {
	c, err := e.Open(comm.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	bufs := &bufs{be: e.Backend}
	defer bufs.free()
	x, err := zeros(bufs, backend.Float32, 1<<12)
	err = errors.Join(err, warm(ctx, e, c, "close-during-op"))
	if err != nil {
		return errors.Join(err, e.Barrier("close-during-op/closed"))
	}
	if e.Rank == 0 {
		time.AfterFunc(50*time.Millisecond, func() { c.Close() })
		start := time.Now()
		err := CheckOpError(c.AllReduce(ctx, x, comm.Sum), comm.OpAllReduce, 2, nil, comm.ErrClosed)
		if el := time.Since(start); err == nil && el > Slack {
			err = fmt.Errorf("returned after %v", el)
		}
		return errors.Join(err, e.Barrier("close-during-op/closed"))
	}
	if err := e.Barrier("close-during-op/closed"); err != nil {
		return err
	}
	start := time.Now()
	err = checkMissing(c.AllReduce(ctx, x, comm.Sum), comm.OpAllReduce, 2, 0, e.Size, nil)
	if el := time.Since(start); err == nil && el > Slack {
		err = fmt.Errorf("peer returned after %v", el)
	}
	return err
}

func fClosed(ctx context.Context, e Env) error {
	c, err := e.Open(comm.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("Close: %w", err)
	}
	if err := c.Barrier(ctx); !errors.Is(err, comm.ErrClosed) {
		return fmt.Errorf("Barrier after Close: %v, want ErrClosed", err)
	}
	if err := c.Sync(ctx); !errors.Is(err, comm.ErrClosed) {
		return fmt.Errorf("Sync after Close: %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("second Close: %v", err)
	}
	return nil
}
