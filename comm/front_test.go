package comm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// onAll runs f on every rank concurrently, within a 10 s deadline.
func onAll(t *testing.T, n int, f func(ctx context.Context, r int) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, n)
	done := make(chan int, n)
	for r := 0; r < n; r++ {
		go func() {
			errs[r] = f(ctx, r)
			done <- r
		}()
	}
	for i := 0; i < n; i++ {
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatalf("rank goroutines did not return within 15s (%d of %d done)", i, n)
		}
	}
	return errs
}

func inprocGroup(t *testing.T, n int, o comm.Options) []comm.Comm {
	t.Helper()
	cs, err := inproc.New(n, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

// TestFrontAllOps runs every (op, dtype, reduction) case through the
// front end of a 3-rank inproc group in Debug mode and checks the results
// and the history (one record per call, consecutive sequence numbers).
func TestFrontAllOps(t *testing.T) {
	const n = 3
	cs := inprocGroup(t, n, comm.Options{Timeout: 10 * time.Second, Debug: true, HistorySize: 4})
	cases := commtest.Cases(7, 11)
	errs := onAll(t, n, func(ctx context.Context, r int) error {
		for _, c := range cases {
			if err := commtest.RunCase(ctx, cs[r], nil, c); err != nil {
				return err
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	h := cs[1].History()
	if len(h) != 4 {
		t.Fatalf("History has %d records, want 4 (HistorySize)", len(h))
	}
	// RunCase may issue more than one collective per case; the last
	// record is the last case's barrier.
	last := h[3].Seq
	if last < uint64(len(cases)) {
		t.Fatalf("last sequence number %d < %d cases", last, len(cases))
	}
	for i, rec := range h {
		if want := last - 3 + uint64(i); rec.Seq != want || rec.Err != "" {
			t.Fatalf("History[%d] = seq %d err %q, want seq %d, no error", i, rec.Seq, rec.Err, want)
		}
	}
	if h[3].Op != comm.OpBarrier {
		t.Fatalf("last record is %v, want barrier", h[3].Op)
	}
	if cs[0].Kind() != "inproc" || cs[2].Rank() != 2 || cs[0].Size() != n {
		t.Fatalf("Kind/Rank/Size = %q/%d/%d", cs[0].Kind(), cs[2].Rank(), cs[0].Size())
	}
}

// TestFrontArgErrors: every invalid argument is reported as an *ArgError
// naming the operation and the problem, before anything is sent, and
// consumes no sequence number.
func TestFrontArgErrors(t *testing.T) {
	cs := inprocGroup(t, 2, comm.Options{Timeout: 5 * time.Second})
	c := cs[0]
	ctx := context.Background()
	f := make([]float32, 8)
	i32 := make([]int32, 8)
	tests := []struct {
		name string
		op   comm.Op
		want string
		call func() error
	}{
		{"nil buf", comm.OpAllReduce, "buf is nil", func() error { return c.AllReduce(ctx, nil, comm.Sum) }},
		{"no dtype", comm.OpAllReduce, "buf: unsupported dtype dtype(0)", func() error { return c.AllReduce(ctx, &cpu.Buffer{}, comm.Sum) }},
		{"not host memory", comm.OpAllReduce, "buf: a comm_test.deviceBuf, not a host buffer of the CPU back end", func() error {
			return c.AllReduce(ctx, deviceBuf{}, comm.Sum)
		}},
		{"bad reduction", comm.OpAllReduce, "invalid reduction reduce(9)", func() error { return c.AllReduce(ctx, cpu.WrapF32(f), comm.ReduceOp(9)) }},
		{"root", comm.OpBroadcast, "root 2 out of range [0, 2)", func() error { return c.Broadcast(ctx, cpu.WrapF32(f), 2) }},
		{"bcast nil", comm.OpBroadcast, "buf is nil", func() error { return c.Broadcast(ctx, nil, 0) }},
		{"src nil", comm.OpAllGather, "src is nil", func() error { return c.AllGather(ctx, cpu.WrapF32(f), nil) }},
		{"dst not host", comm.OpAllGather, "dst: a comm_test.deviceBuf", func() error { return c.AllGather(ctx, deviceBuf{}, cpu.WrapF32(f)) }},
		{"mixed dtypes", comm.OpAllGather, "dst is float32 but src is int32", func() error { return c.AllGather(ctx, cpu.WrapF32(f), cpu.WrapI32(i32[:4])) }},
		{"overlap", comm.OpAllGather, "dst and src overlap", func() error { return c.AllGather(ctx, cpu.WrapF32(f), cpu.WrapF32(f[3:7])) }},
		{"gather size", comm.OpAllGather, "dst has 8 elements, want 6", func() error { return c.AllGather(ctx, cpu.WrapF32(f), cpu.WrapF32(make([]float32, 3))) }},
		{"gatherv entries", comm.OpAllGatherV, "counts has 1 entries, want one per rank (2)", func() error {
			return c.AllGatherV(ctx, cpu.WrapF32(f), cpu.WrapF32(make([]float32, 3)), []int{3})
		}},
		{"gatherv negative", comm.OpAllGatherV, "counts[1] = -1 is negative", func() error {
			return c.AllGatherV(ctx, cpu.WrapF32(f), cpu.WrapF32(make([]float32, 3)), []int{3, -1})
		}},
		{"gatherv overflow", comm.OpAllGatherV, "counts overflows", func() error {
			return c.AllGatherV(ctx, cpu.WrapF32(f), cpu.WrapF32(make([]float32, 3)), []int{3, int(^uint(0) >> 1)})
		}},
		{"gatherv own", comm.OpAllGatherV, "counts[0] = 2 but src has 3 elements", func() error {
			return c.AllGatherV(ctx, cpu.WrapF32(f), cpu.WrapF32(make([]float32, 3)), []int{2, 6})
		}},
		{"gatherv sum", comm.OpAllGatherV, "counts sum to 7 but dst has 8 elements", func() error {
			return c.AllGatherV(ctx, cpu.WrapF32(f), cpu.WrapF32(make([]float32, 3)), []int{3, 4})
		}},
		{"alltoall multiple", comm.OpAllToAll, "src has 3 elements, not a multiple of the size 2", func() error {
			return c.AllToAll(ctx, cpu.WrapF32(make([]float32, 3)), cpu.WrapF32(make([]float32, 3)))
		}},
		{"alltoall len", comm.OpAllToAll, "dst has 8 elements but src has 4", func() error {
			return c.AllToAll(ctx, cpu.WrapF32(f), cpu.WrapF32(make([]float32, 4)))
		}},
		{"alltoallv pair", comm.OpAllToAllV, "dst is int32 but src is float32", func() error {
			return c.AllToAllV(ctx, cpu.WrapI32(i32), []int{4, 4}, cpu.WrapF32(f), []int{4, 4})
		}},
		{"alltoallv send entries", comm.OpAllToAllV, "sendCounts has 3 entries", func() error {
			return c.AllToAllV(ctx, cpu.WrapF32(f), []int{4, 4}, cpu.WrapF32(make([]float32, 8)), []int{4, 4, 0})
		}},
		{"alltoallv recv negative", comm.OpAllToAllV, "recvCounts[0] = -4 is negative", func() error {
			return c.AllToAllV(ctx, cpu.WrapF32(f), []int{-4, 4}, cpu.WrapF32(make([]float32, 8)), []int{4, 4})
		}},
		{"alltoallv send sum", comm.OpAllToAllV, "sendCounts sum to 7 but src has 8 elements", func() error {
			return c.AllToAllV(ctx, cpu.WrapF32(f), []int{4, 4}, cpu.WrapF32(make([]float32, 8)), []int{4, 3})
		}},
		{"alltoallv recv sum", comm.OpAllToAllV, "recvCounts sum to 9 but dst has 8 elements", func() error {
			return c.AllToAllV(ctx, cpu.WrapF32(f), []int{4, 5}, cpu.WrapF32(make([]float32, 8)), []int{4, 4})
		}},
		{"alltoallv self", comm.OpAllToAllV, "sendCounts[0] = 3 but recvCounts[0] = 4", func() error {
			return c.AllToAllV(ctx, cpu.WrapF32(f), []int{4, 4}, cpu.WrapF32(make([]float32, 8)), []int{3, 5})
		}},
		{"reducescatter pair", comm.OpReduceScatter, "src is nil", func() error {
			return c.ReduceScatter(ctx, cpu.WrapF32(f), nil, comm.Sum)
		}},
		{"reducescatter reduction", comm.OpReduceScatter, "invalid reduction reduce(0)", func() error {
			return c.ReduceScatter(ctx, cpu.WrapF32(f[:4]), cpu.WrapF32(make([]float32, 8)), 0)
		}},
		{"reducescatter size", comm.OpReduceScatter, "src has 8 elements, want 6", func() error {
			return c.ReduceScatter(ctx, cpu.WrapF32(f[:3]), cpu.WrapF32(make([]float32, 8)), comm.Max)
		}},
	}
	for _, tc := range tests {
		err := tc.call()
		var ae *comm.ArgError
		if !errors.As(err, &ae) {
			t.Fatalf("%s: got %v (%T), want *comm.ArgError", tc.name, err, err)
		}
		if ae.Op != tc.op || ae.Rank != 0 || !strings.Contains(ae.Msg, tc.want) {
			t.Fatalf("%s: got op %v rank %d %q, want op %v and %q", tc.name, ae.Op, ae.Rank, ae.Msg, tc.op, tc.want)
		}
		if !strings.HasPrefix(err.Error(), "comm rank 0: "+tc.op.String()+": ") {
			t.Fatalf("%s: Error() = %q", tc.name, err)
		}
	}
	if h := c.History(); len(h) != 0 {
		t.Fatalf("argument errors left %d history records, want 0", len(h))
	}
	// The group is still usable and the next call is #1.
	errs := onAll(t, 2, func(ctx context.Context, r int) error { return cs[r].Barrier(ctx) })
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("barrier after argument errors: %v", errs)
	}
	if h := c.History(); len(h) != 1 || h[0].Seq != 1 || h[0].Op != comm.OpBarrier {
		t.Fatalf("History = %+v, want one barrier #1", h)
	}
}

// TestFrontDebugMismatch: in Debug mode ranks that disagree about the
// operation, dtype, reduction, root, counts or sizes all fail with an
// ErrMismatch *OpError naming the difference and what each rank issued,
// and the communicator stays usable.
func TestFrontDebugMismatch(t *testing.T) {
	const n = 2
	cs := inprocGroup(t, n, comm.Options{Timeout: 10 * time.Second, Debug: true})
	type call func(ctx context.Context, c comm.Comm) error
	allReduce := func(l int, red comm.ReduceOp) call {
		return func(ctx context.Context, c comm.Comm) error {
			return c.AllReduce(ctx, cpu.WrapF32(make([]float32, l)), red)
		}
	}
	tests := []struct {
		name   string
		calls  [n]call
		diff   string
		issued string // substring of the Error text: what rank 1 issued
	}{
		{"op", [n]call{allReduce(4, comm.Sum), func(ctx context.Context, c comm.Comm) error { return c.Barrier(ctx) }},
			"rank 0 issued all_reduce but rank 1 issued barrier", "rank 1 barrier"},
		{"dtype", [n]call{allReduce(4, comm.Sum), func(ctx context.Context, c comm.Comm) error {
			return c.AllReduce(ctx, cpu.WrapI64(make([]int64, 4)), comm.Sum)
		}}, "rank 0 used float32 but rank 1 used int64", "rank 1 all_reduce(int64, 4, sum)"},
		{"reduction", [n]call{allReduce(4, comm.Sum), allReduce(4, comm.Max)},
			"reduction differs: rank 0 has 1, rank 1 has 3", "rank 1 all_reduce(float32, 4, max)"},
		{"count", [n]call{allReduce(4, comm.Mean), allReduce(5, comm.Mean)},
			"element count differs: rank 0 has 4, rank 1 has 5", "rank 0 all_reduce(float32, 4, mean)"},
		{"root", [n]call{
			func(ctx context.Context, c comm.Comm) error {
				return c.Broadcast(ctx, cpu.WrapI32(make([]int32, 3)), 0)
			},
			func(ctx context.Context, c comm.Comm) error {
				return c.Broadcast(ctx, cpu.WrapI32(make([]int32, 3)), 1)
			},
		}, "root differs: rank 0 has 0, rank 1 has 1", "broadcast(int32, 3, root 1)"},
		{"bcast count", [n]call{
			func(ctx context.Context, c comm.Comm) error {
				return c.Broadcast(ctx, cpu.WrapI32(make([]int32, 3)), 0)
			},
			func(ctx context.Context, c comm.Comm) error {
				return c.Broadcast(ctx, cpu.WrapI32(make([]int32, 2)), 0)
			},
		}, "element count differs: rank 0 has 3, rank 1 has 2", "broadcast(int32, 2, root 0)"},
		{"gather", [n]call{
			func(ctx context.Context, c comm.Comm) error {
				return c.AllGather(ctx, cpu.WrapF32(make([]float32, 4)), cpu.WrapF32(make([]float32, 2)))
			},
			func(ctx context.Context, c comm.Comm) error {
				return c.AllGather(ctx, cpu.WrapF32(make([]float32, 6)), cpu.WrapF32(make([]float32, 3)))
			},
		}, "element count differs: rank 0 has 2, rank 1 has 3", "all_gather(float32, send 3)"},
		{"gatherv counts", [n]call{
			func(ctx context.Context, c comm.Comm) error {
				return c.AllGatherV(ctx, cpu.WrapF32(make([]float32, 3)), cpu.WrapF32(make([]float32, 1)), []int{1, 2})
			},
			func(ctx context.Context, c comm.Comm) error {
				return c.AllGatherV(ctx, cpu.WrapF32(make([]float32, 4)), cpu.WrapF32(make([]float32, 3)), []int{1, 3})
			},
		}, "counts differ: rank 0 has [1 2], rank 1 has [1 3]", "all_gather_v(float32, send 3, counts [1 3])"},
		{"alltoallv", [n]call{
			func(ctx context.Context, c comm.Comm) error {
				return c.AllToAllV(ctx, cpu.WrapF32(make([]float32, 3)), []int{1, 2}, cpu.WrapF32(make([]float32, 3)), []int{1, 2})
			},
			func(ctx context.Context, c comm.Comm) error {
				return c.AllToAllV(ctx, cpu.WrapF32(make([]float32, 3)), []int{1, 2}, cpu.WrapF32(make([]float32, 3)), []int{1, 2})
			},
		}, "rank 0 sends 2 elements to rank 1, which expects 1", "all_to_all_v(float32, sendCounts [1 2], recvCounts [1 2])"},
		{"reducescatter red", [n]call{
			func(ctx context.Context, c comm.Comm) error {
				return c.ReduceScatter(ctx, cpu.WrapF32(make([]float32, 2)), cpu.WrapF32(make([]float32, 4)), comm.Sum)
			},
			func(ctx context.Context, c comm.Comm) error {
				return c.ReduceScatter(ctx, cpu.WrapF32(make([]float32, 2)), cpu.WrapF32(make([]float32, 4)), comm.Mean)
			},
		}, "reduction differs: rank 0 has 1, rank 1 has 2", "reduce_scatter(float32, recv 2, mean)"},
		{"reducescatter block", [n]call{
			func(ctx context.Context, c comm.Comm) error {
				return c.ReduceScatter(ctx, cpu.WrapF32(make([]float32, 2)), cpu.WrapF32(make([]float32, 4)), comm.Sum)
			},
			func(ctx context.Context, c comm.Comm) error {
				return c.ReduceScatter(ctx, cpu.WrapF32(make([]float32, 1)), cpu.WrapF32(make([]float32, 2)), comm.Sum)
			},
		}, "block size differs: rank 0 has 2, rank 1 has 1", "reduce_scatter(float32, recv 1, sum)"},
		{"alltoall", [n]call{
			func(ctx context.Context, c comm.Comm) error {
				return c.AllToAll(ctx, cpu.WrapI64(make([]int64, 4)), cpu.WrapI64(make([]int64, 4)))
			},
			func(ctx context.Context, c comm.Comm) error {
				return c.AllToAll(ctx, cpu.WrapI64(make([]int64, 2)), cpu.WrapI64(make([]int64, 2)))
			},
		}, "element count differs: rank 0 has 4, rank 1 has 2", "all_to_all(int64, send 2)"},
	}
	for i, tc := range tests {
		errs := onAll(t, n, func(ctx context.Context, r int) error { return tc.calls[r](ctx, cs[r]) })
		for r, err := range errs {
			var oe *comm.OpError
			var me *comm.MismatchError
			if !errors.As(err, &oe) || !errors.As(err, &me) || !errors.Is(err, comm.ErrMismatch) {
				t.Fatalf("%s: rank %d: got %v, want an ErrMismatch *OpError", tc.name, r, err)
			}
			if oe.Seq != uint64(i+1) || oe.Rank != r || me.Diff != tc.diff || len(me.Ranks) != n {
				t.Fatalf("%s: rank %d: seq %d rank %d diff %q ranks %q; want seq %d diff %q", tc.name, r, oe.Seq, oe.Rank, me.Diff, me.Ranks, i+1, tc.diff)
			}
			if !strings.Contains(err.Error(), tc.issued) || !strings.Contains(err.Error(), "inproc rank") {
				t.Fatalf("%s: rank %d: %q does not contain %q", tc.name, r, err, tc.issued)
			}
		}
	}
	// Still usable: a matching all-reduce sums.
	errs := onAll(t, n, func(ctx context.Context, r int) error {
		x := []int32{int32(r + 1)}
		if err := cs[r].AllReduce(ctx, cpu.WrapI32(x), comm.Sum); err != nil {
			return err
		}
		if x[0] != 3 {
			return errors.New("sum is not 3")
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d after mismatches: %v", r, err)
		}
	}
}

// TestFrontTimeoutAndClose: a collective that a peer never enters fails
// by the Options.Timeout with ErrTimeout naming the missing rank; the
// communicator is broken afterwards (ErrBroken); after Close every call
// fails with ErrClosed and Close is idempotent.
func TestFrontTimeoutAndClose(t *testing.T) {
	cs := inprocGroup(t, 2, comm.Options{Timeout: 100 * time.Millisecond})
	err := cs[0].Barrier(context.Background())
	var oe *comm.OpError
	if !errors.As(err, &oe) || !errors.Is(err, comm.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("barrier alone: got %v, want an ErrTimeout *OpError", err)
	}
	if oe.Op != comm.OpBarrier || oe.Seq != 1 || len(oe.MissingRanks()) != 1 || oe.Missing[0] != 1 {
		t.Fatalf("OpError = %+v, want barrier #1 missing [1]", oe)
	}
	if !strings.Contains(err.Error(), "ranks [1] did not take part") || !strings.Contains(err.Error(), "ms after the call)") {
		t.Fatalf("Error() = %q", err)
	}
	err = cs[0].AllReduce(context.Background(), cpu.WrapF32(make([]float32, 2)), comm.Sum)
	if !errors.Is(err, comm.ErrBroken) || !errors.As(err, &oe) || oe.Seq != 2 {
		t.Fatalf("after a timeout: got %v, want ErrBroken at #2", err)
	}
	if h := cs[0].History(); len(h) != 1 || !strings.Contains(h[0].Err, "deadline exceeded") {
		t.Fatalf("History = %+v, want the failed barrier", h)
	}

	if err := cs[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := cs[1].Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	err = cs[1].Broadcast(context.Background(), cpu.WrapF32(make([]float32, 2)), 0)
	if !errors.Is(err, comm.ErrClosed) || !errors.As(err, &oe) || oe.Op != comm.OpBroadcast {
		t.Fatalf("after Close: got %v, want ErrClosed", err)
	}
}

// TestFrontAlloc: Alloc on a heap back end returns zeroed buffers of the
// right type and length; invalid types and lengths are argument errors.
func TestFrontAlloc(t *testing.T) {
	cs := inprocGroup(t, 2, comm.Options{Timeout: 5 * time.Second})
	for _, dt := range []backend.DType{backend.Float32, backend.Int32, backend.Int64} {
		b, err := cs[0].Alloc(dt, 5)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := cpu.Bytes(b)
		if b.DType() != dt || b.Len() != 5 || !ok || len(p) != 5*dt.Size() {
			t.Fatalf("Alloc(%v, 5) = %v x %d (%d bytes of host memory: %v)", dt, b.DType(), b.Len(), len(p), ok)
		}
		for _, x := range p {
			if x != 0 {
				t.Fatalf("Alloc(%v) not zeroed", dt)
			}
		}
		if err := cs[0].Free(b); err != nil {
			t.Fatalf("Free: %v", err)
		}
	}
	if _, err := cs[0].Alloc(backend.DType(0), 5); err == nil {
		t.Fatal("Alloc of dtype 0 succeeded")
	}
	if _, err := cs[0].Alloc(backend.Float32, -1); err == nil {
		t.Fatal("Alloc of -1 elements succeeded")
	}
	if err := cs[0].Free(deviceBuf{}); err == nil {
		t.Fatal("Free of a buffer that is not host memory succeeded")
	}
	if err := cs[0].Sync(context.Background()); err != nil {
		t.Fatalf("Sync of a host communicator: %v", err)
	}
	cs[1].Close()
	if _, err := cs[1].Alloc(backend.Int32, 3); !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("Alloc after Close: got %v, want ErrClosed", err)
	}
}

// deviceGroup returns n device communicators staging CPU buffers through
// an inproc group.
func deviceGroup(t *testing.T, n int, o comm.Options) ([]comm.Comm, backend.Backend) {
	t.Helper()
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := inproc.New(n, o)
	if err != nil {
		t.Fatal(err)
	}
	ds := make([]comm.Comm, n)
	for r, h := range hs {
		ds[r] = staged.Open(h, be, o)
	}
	t.Cleanup(func() {
		for _, d := range ds {
			d.Close()
		}
	})
	return ds, be
}

// TestDeviceFrontAllOps runs every case through NewDevice's front end
// (staged over inproc, CPU buffers) in Debug mode, then Sync, and checks
// the history.
func TestDeviceFrontAllOps(t *testing.T) {
	const n = 3
	ds, be := deviceGroup(t, n, comm.Options{Timeout: 10 * time.Second, Debug: true})
	cases := commtest.Cases(5, 3)
	errs := onAll(t, n, func(ctx context.Context, r int) error {
		for _, c := range cases {
			if err := commtest.RunCase(ctx, ds[r], be, c); err != nil {
				return err
			}
		}
		return ds[r].Sync(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	h := ds[2].History()
	if len(h) < len(cases) {
		t.Fatalf("History: %d records, want at least %d (one per case)", len(h), len(cases))
	}
	for i, rec := range h {
		if rec.Seq != uint64(i+1) || rec.Err != "" {
			t.Fatalf("History[%d] = seq %d err %q, want seq %d, no error", i, rec.Seq, rec.Err, i+1)
		}
	}
	if ds[0].Kind() != "staged-inproc" || ds[1].Rank() != 1 || ds[1].Size() != n {
		t.Fatalf("Kind/Rank/Size = %q/%d/%d", ds[0].Kind(), ds[1].Rank(), ds[1].Size())
	}
}

// TestDeviceFrontArgErrors: the device front end rejects invalid
// arguments with *ArgError, as the host one does.
func TestDeviceFrontArgErrors(t *testing.T) {
	ds, _ := deviceGroup(t, 2, comm.Options{Timeout: 5 * time.Second})
	d := ds[0]
	ctx := context.Background()
	f8 := cpu.WrapF32(make([]float32, 8))
	f4 := cpu.WrapF32(make([]float32, 4))
	f3 := cpu.WrapF32(make([]float32, 3))
	i4 := cpu.WrapI32(make([]int32, 4))
	shared := make([]float32, 8)
	tests := []struct {
		name string
		op   comm.Op
		want string
		call func() error
	}{
		{"nil", comm.OpAllReduce, "buf is nil", func() error { return d.AllReduce(ctx, nil, comm.Sum) }},
		{"reduction", comm.OpAllReduce, "invalid reduction", func() error { return d.AllReduce(ctx, f4, 7) }},
		{"root", comm.OpBroadcast, "root -1 out of range [0, 2)", func() error { return d.Broadcast(ctx, f4, -1) }},
		{"bcast nil", comm.OpBroadcast, "buf is nil", func() error { return d.Broadcast(ctx, nil, 0) }},
		{"dst nil", comm.OpAllGather, "dst is nil", func() error { return d.AllGather(ctx, nil, f4) }},
		{"src nil", comm.OpAllGather, "src is nil", func() error { return d.AllGather(ctx, f8, nil) }},
		{"mixed", comm.OpAllGather, "dst is float32 but src is int32", func() error { return d.AllGather(ctx, f8, i4) }},
		{"overlap", comm.OpAllGather, "dst and src overlap", func() error {
			return d.AllGather(ctx, cpu.WrapF32(shared), cpu.WrapF32(shared[2:6]))
		}},
		{"gather size", comm.OpAllGather, "dst has 8 elements, want 6", func() error { return d.AllGather(ctx, f8, f3) }},
		{"gatherv pair", comm.OpAllGatherV, "src is nil", func() error { return d.AllGatherV(ctx, f8, nil, []int{4, 4}) }},
		{"gatherv entries", comm.OpAllGatherV, "counts has 3 entries", func() error { return d.AllGatherV(ctx, f8, f4, []int{4, 4, 0}) }},
		{"gatherv own", comm.OpAllGatherV, "counts[0] = 3 but src has 4 elements", func() error { return d.AllGatherV(ctx, f8, f4, []int{3, 5}) }},
		{"gatherv sum", comm.OpAllGatherV, "counts sum to 7 but dst has 8 elements", func() error { return d.AllGatherV(ctx, f8, f4, []int{4, 3}) }},
		{"alltoall pair", comm.OpAllToAll, "dst is nil", func() error { return d.AllToAll(ctx, nil, f4) }},
		{"alltoall multiple", comm.OpAllToAll, "not a multiple of the size 2", func() error { return d.AllToAll(ctx, cpu.WrapF32(make([]float32, 3)), f3) }},
		{"alltoall len", comm.OpAllToAll, "dst has 8 elements but src has 4", func() error { return d.AllToAll(ctx, f8, f4) }},
		{"alltoallv pair", comm.OpAllToAllV, "src is nil", func() error { return d.AllToAllV(ctx, f8, []int{4, 4}, nil, []int{4, 4}) }},
		{"alltoallv send", comm.OpAllToAllV, "sendCounts[1] = -1 is negative", func() error { return d.AllToAllV(ctx, f8, []int{4, 4}, f4, []int{5, -1}) }},
		{"alltoallv recv", comm.OpAllToAllV, "recvCounts has 1 entries", func() error { return d.AllToAllV(ctx, f8, []int{8}, f4, []int{2, 2}) }},
		{"alltoallv send sum", comm.OpAllToAllV, "sendCounts sum to 5 but src has 4 elements", func() error { return d.AllToAllV(ctx, f8, []int{4, 4}, f4, []int{4, 1}) }},
		{"alltoallv recv sum", comm.OpAllToAllV, "recvCounts sum to 7 but dst has 8 elements", func() error { return d.AllToAllV(ctx, f8, []int{4, 3}, f4, []int{4, 0}) }},
		{"alltoallv self", comm.OpAllToAllV, "sendCounts[0] = 2 but recvCounts[0] = 4", func() error { return d.AllToAllV(ctx, f8, []int{4, 4}, f4, []int{2, 2}) }},
		{"reducescatter pair", comm.OpReduceScatter, "dst is nil", func() error { return d.ReduceScatter(ctx, nil, f8, comm.Sum) }},
		{"reducescatter reduction", comm.OpReduceScatter, "invalid reduction", func() error { return d.ReduceScatter(ctx, f4, f8, 0) }},
		{"reducescatter size", comm.OpReduceScatter, "src has 8 elements, want 6", func() error { return d.ReduceScatter(ctx, f3, f8, comm.Sum) }},
	}
	for _, tc := range tests {
		err := tc.call()
		var ae *comm.ArgError
		if !errors.As(err, &ae) || ae.Op != tc.op || !strings.Contains(ae.Msg, tc.want) {
			t.Fatalf("%s: got %v, want a %v *ArgError containing %q", tc.name, err, tc.op, tc.want)
		}
	}
	if h := d.History(); len(h) != 0 {
		t.Fatalf("argument errors left %d history records", len(h))
	}
}

// TestDeviceFrontDebugMismatchAndTimeout: Debug mode on device
// communicators reports disagreeing ranks; a lone collective times out
// naming the missing rank; Sync then reports the broken communicator and,
// after Close, ErrClosed.
func TestDeviceFrontDebugMismatchAndTimeout(t *testing.T) {
	ds, _ := deviceGroup(t, 2, comm.Options{Timeout: 150 * time.Millisecond, Debug: true})
	errs := onAll(t, 2, func(ctx context.Context, r int) error {
		if r == 0 {
			return ds[r].AllReduce(ctx, cpu.WrapF32(make([]float32, 4)), comm.Sum)
		}
		return ds[r].Broadcast(ctx, cpu.WrapF32(make([]float32, 4)), 0)
	})
	for r, err := range errs {
		var me *comm.MismatchError
		if !errors.As(err, &me) || me.Diff != "rank 0 issued all_reduce but rank 1 issued broadcast" {
			t.Fatalf("rank %d: got %v, want the all_reduce/broadcast mismatch", r, err)
		}
	}
	err := ds[0].Barrier(context.Background())
	var oe *comm.OpError
	if !errors.As(err, &oe) || !errors.Is(err, comm.ErrTimeout) || oe.Seq != 2 {
		t.Fatalf("lone barrier: got %v, want ErrTimeout at #2", err)
	}
	if err := ds[0].Sync(context.Background()); !errors.Is(err, comm.ErrBroken) {
		t.Fatalf("Sync after a failure: got %v, want ErrBroken", err)
	}
	if err := ds[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := ds[1].Sync(context.Background()); !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("Sync after Close: got %v, want ErrClosed", err)
	}
}

// deviceBuf is a buffer of no back end (not host memory).
type deviceBuf struct{}

func (deviceBuf) Len() int             { return 4 }
func (deviceBuf) DType() backend.DType { return backend.Float32 }
