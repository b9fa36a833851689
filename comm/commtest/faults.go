package commtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
)

// FaultTimeout is the per-operation timeout the fault suite uses.
func FaultTimeout() time.Duration {
	if testing.Short() {
		return 400 * time.Millisecond
	}
	return time.Second
}

// Slack is how long after its deadline a rank may take to report a
// failure (asking peers who is missing, scheduling on a loaded machine,
// the race detector).
const Slack = 2 * time.Second

// CheckOpError checks that err is an *OpError for op #seq naming exactly
// the missing ranks, wrapping target.
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

// CountCases are the count-mismatch scenarios of the fault suites.
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

func warmUp(t *testing.T, comms []comm.Comm) {
	t.Helper()
	for _, err := range OnAll(comms, func(c comm.Comm) error { return c.Barrier(context.Background()) }) {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Faults runs the fault suite: a rank that stalls, a rank that closes,
// a rank closing right after the last operation, ranks that disagree
// (Debug mode), ranks that pass different counts (Debug off), invalid
// arguments, cancellation and use after Close.
func Faults(t *testing.T, newGroup NewGroup) {
	d := FaultTimeout()
	opts := comm.Options{Timeout: d}

	t.Run("stall", func(t *testing.T) {
		// Rank 2 never joins all_reduce #2: ranks 0 and 1 fail within the
		// deadline naming it; rank 2's later call fails at once.
		comms := newGroup(t, 3, opts)
		defer closeAll(comms)
		warmUp(t, comms)
		start := time.Now()
		errs := OnAll(comms[:2], func(c comm.Comm) error {
			x := make([]float32, 1000)
			err := c.AllReduce(context.Background(), comm.F32(x), comm.Sum)
			if el := time.Since(start); el > d+Slack {
				return fmt.Errorf("rank %d returned after %v, deadline %v", c.Rank(), el, d)
			}
			return CheckOpError(err, comm.OpAllReduce, 2, []int{2}, nil)
		})
		for _, err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		// At least one rank timed out; the other may have been aborted.
		timedOut := false
		for _, c := range comms[:2] {
			h := c.History()
			timedOut = timedOut || strings.Contains(h[len(h)-1].Err, "deadline exceeded")
		}
		if !timedOut {
			t.Errorf("no rank reports a timeout: %v / %v", comms[0].History(), comms[1].History())
		}
		late := time.Now()
		x := make([]float32, 1000)
		err := comms[2].AllReduce(context.Background(), comm.F32(x), comm.Sum)
		if err == nil || !errors.As(err, new(*comm.OpError)) {
			t.Fatalf("stalled rank's late call: %v, want an *OpError", err)
		}
		if el := time.Since(late); el > d/2+Slack/4 {
			t.Errorf("stalled rank's late call took %v; it should fail at once (the others aborted)", el)
		}
	})

	t.Run("close", func(t *testing.T) {
		// Rank 2 closes instead of joining: the others fail well before the
		// deadline naming it.
		comms := newGroup(t, 3, comm.Options{Timeout: 10 * time.Second})
		defer closeAll(comms)
		warmUp(t, comms)
		start := time.Now()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(50 * time.Millisecond)
			comms[2].Close()
		}()
		errs := OnAll(comms[:2], func(c comm.Comm) error {
			x := make([]int64, 5000)
			err := c.AllReduce(context.Background(), comm.I64(x), comm.Sum)
			if el := time.Since(start); el > 3*time.Second {
				return fmt.Errorf("rank %d returned after %v; a closed peer must be noticed promptly", c.Rank(), el)
			}
			return CheckOpError(err, comm.OpAllReduce, 2, []int{2}, nil)
		})
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("close-after-last-op", func(t *testing.T) {
		// A rank that closes as soon as its last operation returns must not
		// make the others' copy of that operation fail.
		rounds := 10
		if testing.Short() {
			rounds = 4
		}
		for i := 0; i < rounds; i++ {
			comms := newGroup(t, 3, comm.Options{Timeout: 10 * time.Second})
			closer := i % 3
			errs := OnAll(comms, func(c comm.Comm) error {
				x := make([]float32, 1<<14)
				err := c.AllReduce(context.Background(), comm.F32(x), comm.Sum)
				if err == nil {
					y, z := make([]float32, 3*(1<<12)), make([]float32, 1<<12)
					err = c.AllGather(context.Background(), comm.F32(y), comm.F32(z))
				}
				if c.Rank() == closer {
					c.Close()
				}
				return err
			})
			closeAll(comms)
			for _, err := range errs {
				if err != nil {
					t.Fatalf("round %d (rank %d closes): %v", i, closer, err)
				}
			}
		}
	})

	t.Run("mismatch-debug", func(t *testing.T) {
		comms := newGroup(t, 2, comm.Options{Timeout: 10 * time.Second, Debug: true})
		defer closeAll(comms)
		warmUp(t, comms)
		errs := OnAll(comms, func(c comm.Comm) error {
			x := make([]float32, 10)
			if c.Rank() == 0 {
				return CheckOpError(c.AllReduce(context.Background(), comm.F32(x), comm.Sum), comm.OpAllReduce, 2, nil, comm.ErrMismatch)
			}
			return CheckOpError(c.Broadcast(context.Background(), comm.F32(x), 0), comm.OpBroadcast, 2, nil, comm.ErrMismatch)
		})
		for _, err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		// Sizes differ.
		errs = OnAll(comms, func(c comm.Comm) error {
			x := make([]float32, 10+c.Rank())
			return CheckOpError(c.AllReduce(context.Background(), comm.F32(x), comm.Sum), comm.OpAllReduce, 3, nil, comm.ErrMismatch)
		})
		for _, err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		// AllToAllV counts that do not pair up.
		errs = OnAll(comms, func(c comm.Comm) error {
			send := []int{1, 1}
			recv := []int{1, 2}
			if c.Rank() == 1 {
				recv = []int{1, 1}
			}
			src, dst := make([]int32, 2), make([]int32, recv[0]+recv[1])
			if c.Rank() == 1 {
				send = []int{1, 1}
			}
			err := c.AllToAllV(context.Background(), comm.I32(dst), recv, comm.I32(src), send)
			return CheckOpError(err, comm.OpAllToAllV, 4, nil, comm.ErrMismatch)
		})
		for _, err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		// The communicator is still usable: the check ran before any data
		// was exchanged.
		for _, err := range OnAll(comms, func(c comm.Comm) error {
			return RunCase(context.Background(), c, Case{Op: comm.OpAllReduce, DType: DTypes[0], Red: comm.Sum, Len: 33, Seed: 5})
		}) {
			if err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("counts", func(t *testing.T) {
		// Ranks pass different element counts with Debug off: every rank
		// fails the operation well before its deadline, naming the
		// operation, its number and both counts, instead of returning
		// wrong sums. The last rank passes more; lengths of one chunk, of
		// many, and around the size where shm changes paths.
		for _, tc := range CountCases() {
			comms := newGroup(t, 3, comm.Options{Timeout: 10 * time.Second})
			warmUp(t, comms)
			start := time.Now()
			errs := OnAll(comms, func(c comm.Comm) error {
				n := tc.Len
				if c.Rank() == 2 {
					n = tc.Other
				}
				var err error
				if tc.Op == comm.OpAllGather {
					err = c.AllGather(context.Background(), comm.F32(make([]float32, 3*n)), comm.F32(make([]float32, n)))
				} else {
					err = c.AllReduce(context.Background(), comm.F32(make([]float32, n)), comm.Sum)
				}
				if el := time.Since(start); el > Slack {
					return fmt.Errorf("rank %d returned after %v; a count mismatch must be refused at once: %v", c.Rank(), el, err)
				}
				return CheckCountError(err, tc, 2)
			})
			closeAll(comms)
			for _, err := range errs {
				if err != nil {
					t.Errorf("%v: %v", tc, err)
				}
			}
		}
	})

	t.Run("args", func(t *testing.T) {
		comms := newGroup(t, 2, comm.Options{Timeout: 10 * time.Second})
		defer closeAll(comms)
		c := comms[0]
		ctx := context.Background()
		f := make([]float32, 6)
		bad := []error{
			c.AllReduce(ctx, comm.Buf{}, comm.Sum),
			c.AllReduce(ctx, comm.F32(f), comm.ReduceOp(9)),
			c.Broadcast(ctx, comm.F32(f), 2),
			c.Broadcast(ctx, comm.F32(f), -1),
			c.AllGather(ctx, comm.F32(f[:5]), comm.F32(make([]float32, 3))),
			c.AllGather(ctx, comm.F32(f), comm.I64(make([]int64, 3))),
			c.AllGather(ctx, comm.F32(f), comm.F32(f[:3])),
			c.AllGatherV(ctx, comm.F32(f), comm.F32(f[:0]), []int{1, 2, 3}),
			c.AllGatherV(ctx, comm.F32(make([]float32, 3)), comm.F32(make([]float32, 1)), []int{2, -1}),
			c.AllGatherV(ctx, comm.F32(make([]float32, 4)), comm.F32(make([]float32, 1)), []int{1, 2}),
			c.AllToAll(ctx, comm.F32(make([]float32, 5)), comm.F32(make([]float32, 5))),
			c.AllToAll(ctx, comm.F32(make([]float32, 4)), comm.F32(make([]float32, 6))),
			c.AllToAllV(ctx, comm.F32(make([]float32, 3)), []int{1, 2}, comm.F32(make([]float32, 3)), []int{2, 2}),
			c.AllToAllV(ctx, comm.F32(make([]float32, 3)), []int{2, 1}, comm.F32(make([]float32, 3)), []int{1, 2}),
			c.ReduceScatter(ctx, comm.F32(make([]float32, 2)), comm.F32(make([]float32, 5)), comm.Sum),
			c.ReduceScatter(ctx, comm.F32(make([]float32, 2)), comm.F32(make([]float32, 4)), 0),
		}
		for i, err := range bad {
			var ae *comm.ArgError
			if !errors.As(err, &ae) {
				t.Errorf("case %d: got %v, want *comm.ArgError", i, err)
			}
		}
		// Nothing was consumed: the group still works and is at #1.
		for _, err := range OnAll(comms, func(c comm.Comm) error { return c.Barrier(context.Background()) }) {
			if err != nil {
				t.Fatal(err)
			}
		}
		for r, cm := range comms {
			if h := cm.History(); len(h) != 1 || h[0].Seq != 1 {
				t.Errorf("rank %d history %+v, want one record #1", r, h)
			}
		}
	})

	t.Run("cancel", func(t *testing.T) {
		comms := newGroup(t, 2, comm.Options{Timeout: 10 * time.Second})
		defer closeAll(comms)
		warmUp(t, comms)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		err := comms[0].AllReduce(ctx, comm.F32(make([]float32, 8)), comm.Sum)
		if e := CheckOpError(err, comm.OpAllReduce, 2, []int{1}, context.Canceled); e != nil {
			t.Error(e)
		}
		if el := time.Since(start); el > Slack {
			t.Errorf("cancelled call returned after %v", el)
		}
	})

	t.Run("ctx-deadline", func(t *testing.T) {
		comms := newGroup(t, 2, comm.Options{Timeout: time.Minute})
		defer closeAll(comms)
		warmUp(t, comms)
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		start := time.Now()
		err := comms[1].Broadcast(ctx, comm.I32(make([]int32, 8)), 0)
		if e := CheckOpError(err, comm.OpBroadcast, 2, []int{0}, comm.ErrTimeout); e != nil {
			t.Error(e)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%v does not wrap context.DeadlineExceeded", err)
		}
		if el := time.Since(start); el < d-10*time.Millisecond || el > d+Slack {
			t.Errorf("returned after %v, deadline %v", el, d)
		}
	})

	t.Run("close-during-op", func(t *testing.T) {
		// Closing a rank while its own operation waits ends that operation
		// at once with ErrClosed (and nothing touches released memory).
		comms := newGroup(t, 2, comm.Options{Timeout: 10 * time.Second})
		defer closeAll(comms)
		warmUp(t, comms)
		time.AfterFunc(50*time.Millisecond, func() { comms[0].Close() })
		start := time.Now()
		err := comms[0].AllReduce(context.Background(), comm.F32(make([]float32, 1<<12)), comm.Sum)
		if e := CheckOpError(err, comm.OpAllReduce, 2, nil, comm.ErrClosed); e != nil {
			t.Error(e)
		}
		if el := time.Since(start); el > Slack {
			t.Errorf("returned after %v", el)
		}
		// The peer notices the closed rank promptly.
		start = time.Now()
		err = comms[1].AllReduce(context.Background(), comm.F32(make([]float32, 1<<12)), comm.Sum)
		if e := CheckOpError(err, comm.OpAllReduce, 2, []int{0}, nil); e != nil {
			t.Error(e)
		}
		if el := time.Since(start); el > Slack {
			t.Errorf("peer returned after %v", el)
		}
	})

	t.Run("closed", func(t *testing.T) {
		comms := newGroup(t, 2, comm.Options{Timeout: 10 * time.Second})
		closeAll(comms)
		if err := comms[0].Barrier(context.Background()); !errors.Is(err, comm.ErrClosed) {
			t.Errorf("Barrier after Close: %v, want ErrClosed", err)
		}
		if err := comms[0].Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

func closeAll(comms []comm.Comm) {
	for _, c := range comms {
		c.Close()
	}
}
