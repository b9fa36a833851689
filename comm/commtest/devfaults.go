package commtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// DeviceFaults runs the fault suite on this rank of a group of two or
// more: a rank that stalls (the last rank skips an all-reduce), a rank
// that closes instead of joining, a rank closing right after its last
// operation, disagreeing ranks in Debug mode, ranks that pass different
// counts (Debug off; skipped where DeviceEnv.UncheckedCounts says why),
// invalid arguments,
// cancellation, a context deadline, and use after Close. Each scenario
// opens a fresh group; failures are returned, named by scenario.
func DeviceFaults(ctx context.Context, e DeviceEnv) error {
	if e.Size < 2 {
		return fmt.Errorf("commtest: DeviceFaults needs two or more ranks, have %d", e.Size)
	}
	var errs []error
	for _, s := range []struct {
		name string
		f    func(context.Context, DeviceEnv) error
	}{
		{"stall", devStall}, {"close", devClose}, {"close-after-last-op", devCloseAfterLast},
		{"mismatch-debug", devMismatch}, {"counts", devCounts}, {"args", devArgs}, {"cancel", devCancel},
		{"ctx-deadline", devCtxDeadline}, {"closed", devClosed},
	} {
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

// devBuf uploads n zeros of dt.
func devBuf(d *devBufs, dt backend.DType, n int) (backend.Buffer, error) {
	return d.upload(newHost(dt, n))
}

func devWarm(ctx context.Context, dc comm.DeviceComm) error {
	if err := dc.Barrier(ctx); err != nil {
		return fmt.Errorf("warm-up barrier: %w", err)
	}
	return nil
}

func devStall(ctx context.Context, e DeviceEnv) error {
	d := deviceFaultTimeout()
	dc, err := e.Open(comm.Options{Timeout: d})
	if err != nil {
		return err
	}
	defer dc.Close()
	bufs := &devBufs{be: e.Backend}
	defer bufs.free()
	victim := e.Size - 1
	// Every rank passes the barrier "stall/reported" once, whatever
	// happens before it.
	var x backend.Buffer
	err = devWarm(ctx, dc)
	if err == nil {
		x, err = devBuf(bufs, backend.Float32, 1000)
	}
	if e.Rank != victim {
		if err == nil {
			start := time.Now()
			err = dc.AllReduce(ctx, x, comm.Sum)
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
	err = dc.AllReduce(ctx, x, comm.Sum)
	if err == nil || !errors.As(err, new(*comm.OpError)) {
		return fmt.Errorf("stalled rank's late call: %v, want an *OpError", err)
	}
	if el := time.Since(late); el > d/2+Slack/4 {
		return fmt.Errorf("stalled rank's late call took %v; it should fail promptly (the others aborted): %v", el, err)
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

func devClose(ctx context.Context, e DeviceEnv) error {
	dc, err := e.Open(comm.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer dc.Close()
	if err := devWarm(ctx, dc); err != nil {
		return err
	}
	victim := e.Size - 1
	if e.Rank == victim {
		time.Sleep(50 * time.Millisecond)
		return dc.Close()
	}
	bufs := &devBufs{be: e.Backend}
	defer bufs.free()
	x, err := devBuf(bufs, backend.Int64, 5000)
	if err != nil {
		return err
	}
	start := time.Now()
	err = dc.AllReduce(ctx, x, comm.Sum)
	if el := time.Since(start); el > 3*time.Second {
		return fmt.Errorf("returned after %v; a closed peer must be noticed promptly", el)
	}
	return CheckOpError(err, comm.OpAllReduce, 2, []int{victim}, nil)
}

func devCloseAfterLast(ctx context.Context, e DeviceEnv) error {
	rounds := 3
	for i := 0; i < rounds; i++ {
		dc, err := e.Open(comm.Options{Timeout: 10 * time.Second})
		if err != nil {
			return err
		}
		closer := i % e.Size
		err = func() error {
			bufs := &devBufs{be: e.Backend}
			defer bufs.free()
			x, err := devBuf(bufs, backend.Float32, 1<<14)
			if err != nil {
				return err
			}
			y, err := devBuf(bufs, backend.Float32, e.Size<<12)
			if err != nil {
				return err
			}
			z, err := devBuf(bufs, backend.Float32, 1<<12)
			if err != nil {
				return err
			}
			if err := dc.AllReduce(ctx, x, comm.Sum); err != nil {
				return err
			}
			err = dc.AllGather(ctx, y, z)
			if e.Rank == closer {
				dc.Close()
			} else if err == nil {
				err = dc.Sync(ctx)
			}
			return err
		}()
		dc.Close()
		if berr := e.Barrier(fmt.Sprintf("close-after-last/%d", i)); err == nil {
			err = berr
		}
		if err != nil {
			return fmt.Errorf("round %d (rank %d closes): %w", i, closer, err)
		}
	}
	return nil
}

func devMismatch(ctx context.Context, e DeviceEnv) error {
	dc, err := e.Open(comm.Options{Timeout: 10 * time.Second, Debug: true})
	if err != nil {
		return err
	}
	defer dc.Close()
	if err := devWarm(ctx, dc); err != nil {
		return err
	}
	bufs := &devBufs{be: e.Backend}
	defer bufs.free()
	x, err := devBuf(bufs, backend.Float32, 10)
	if err != nil {
		return err
	}
	if e.Rank == 0 {
		err = CheckOpError(dc.AllReduce(ctx, x, comm.Sum), comm.OpAllReduce, 2, nil, comm.ErrMismatch)
	} else {
		err = CheckOpError(dc.Broadcast(ctx, x, 0), comm.OpBroadcast, 2, nil, comm.ErrMismatch)
	}
	if err != nil {
		return err
	}
	y, err := devBuf(bufs, backend.Float32, 10+e.Rank)
	if err != nil {
		return err
	}
	if err := CheckOpError(dc.AllReduce(ctx, y, comm.Sum), comm.OpAllReduce, 3, nil, comm.ErrMismatch); err != nil {
		return err
	}
	// Still usable: the check ran before anything was exchanged.
	return RunDeviceCase(ctx, dc, e.Backend, e.Exact, Case{Op: comm.OpAllReduce, DType: backend.Float32, Red: comm.Sum, Len: 33, Seed: 5})
}

// devCounts: the last rank passes more elements than the others (Debug
// off); every rank fails at once naming the operation and both counts.
func devCounts(ctx context.Context, e DeviceEnv) error {
	if e.UncheckedCounts != "" {
		e.logf("rank %d: faults/counts skipped: %s", e.Rank, e.UncheckedCounts)
		return nil
	}
	for _, tc := range CountCases() {
		err := func() error {
			dc, err := e.Open(comm.Options{Timeout: 10 * time.Second})
			if err != nil {
				return err
			}
			defer dc.Close()
			if err := devWarm(ctx, dc); err != nil {
				return err
			}
			bufs := &devBufs{be: e.Backend}
			defer bufs.free()
			n := tc.Len
			if e.Rank == e.Size-1 {
				n = tc.Other
			}
			x, err := devBuf(bufs, backend.Float32, n)
			if err != nil {
				return err
			}
			start := time.Now()
			if tc.Op == comm.OpAllGather {
				var y backend.Buffer
				if y, err = devBuf(bufs, backend.Float32, e.Size*n); err == nil {
					err = dc.AllGather(ctx, y, x)
				}
			} else {
				err = dc.AllReduce(ctx, x, comm.Sum)
			}
			if el := time.Since(start); el > Slack {
				return fmt.Errorf("returned after %v; a count mismatch must be refused at once: %v", el, err)
			}
			return CheckCountError(err, tc, 2)
		}()
		if berr := e.Barrier(fmt.Sprintf("counts/%v", tc)); err == nil {
			err = berr
		}
		if err != nil {
			return fmt.Errorf("%v: %w", tc, err)
		}
	}
	return nil
}

func devArgs(ctx context.Context, e DeviceEnv) error {
	dc, err := e.Open(comm.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer dc.Close()
	if e.Rank == 0 {
		bufs := &devBufs{be: e.Backend}
		defer bufs.free()
		var bs []backend.Buffer
		for _, spec := range []struct {
			dt backend.DType
			n  int
		}{{backend.Float32, 6}, {backend.Float32, 3}, {backend.Int64, 3}, {backend.Float32, 5}, {backend.Float32, 4}, {backend.Float32, 1}} {
			b, err := devBuf(bufs, spec.dt, spec.n)
			if err != nil {
				return err
			}
			bs = append(bs, b)
		}
		f6, f3, i3, f5, f4, f1 := bs[0], bs[1], bs[2], bs[3], bs[4], bs[5]
		n := e.Size
		bad := []error{
			dc.AllReduce(ctx, nil, comm.Sum),
			dc.AllReduce(ctx, f6, comm.ReduceOp(9)),
			dc.Broadcast(ctx, f6, n),
			dc.Broadcast(ctx, f6, -1),
			dc.AllGather(ctx, f5, f3),
			dc.AllGather(ctx, f6, i3),
			dc.AllGather(ctx, f6, f6),
			dc.AllGatherV(ctx, f6, f1, make([]int, n+1)),
			dc.AllToAll(ctx, f5, f5),
			dc.AllToAll(ctx, f4, f6),
			dc.ReduceScatter(ctx, f1, f5, comm.Sum),
			dc.ReduceScatter(ctx, f3, f6, 0),
		}
		for i, err := range bad {
			var ae *comm.ArgError
			if !errors.As(err, &ae) {
				return fmt.Errorf("case %d: got %v, want *comm.ArgError", i, err)
			}
		}
	}
	if err := dc.Barrier(ctx); err != nil {
		return err
	}
	if h := comm.HistoryOf(dc); len(h) != 1 || h[0].Seq != 1 {
		return fmt.Errorf("history %+v, want one record #1", h)
	}
	return nil
}

func devCancel(ctx context.Context, e DeviceEnv) error {
	dc, err := e.Open(comm.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer dc.Close()
	err = devWarm(ctx, dc)
	if e.Rank != 0 || err != nil {
		return errors.Join(err, e.Barrier("cancel/done")) // ranks > 0 never join #2
	}
	err = func() error {
		bufs := &devBufs{be: e.Backend}
		defer bufs.free()
		x, err := devBuf(bufs, backend.Float32, 8)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		err = dc.AllReduce(cctx, x, comm.Sum)
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

func devCtxDeadline(ctx context.Context, e DeviceEnv) error {
	d := deviceFaultTimeout()
	dc, err := e.Open(comm.Options{Timeout: time.Minute})
	if err != nil {
		return err
	}
	defer dc.Close()
	err = devWarm(ctx, dc)
	if e.Rank != 1 || err != nil {
		return errors.Join(err, e.Barrier("ctx-deadline/done")) // rank 0, the root, never joins #2
	}
	err = func() error {
		bufs := &devBufs{be: e.Backend}
		defer bufs.free()
		x, err := devBuf(bufs, backend.Int32, 8)
		if err != nil {
			return err
		}
		dctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		start := time.Now()
		err = dc.Broadcast(dctx, x, 0)
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

func devClosed(ctx context.Context, e DeviceEnv) error {
	dc, err := e.Open(comm.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	if err := dc.Close(); err != nil {
		return fmt.Errorf("Close: %w", err)
	}
	if err := dc.Barrier(ctx); !errors.Is(err, comm.ErrClosed) {
		return fmt.Errorf("Barrier after Close: %v, want ErrClosed", err)
	}
	if err := dc.Close(); err != nil {
		return fmt.Errorf("second Close: %v", err)
	}
	return nil
}
