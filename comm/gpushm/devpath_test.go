//go:build linux

package gpushm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// emuOptions run all-reduces of up to 160 KiB (up to three 64 KiB
// chunks, as many as there are slots) on the device path, emulated on
// the CPU back end, and larger ones on the host pipeline, so the test
// lengths mix both on the same slots.
func emuOptions(async bool) Options {
	o := testOptions(false)
	o.emulate, o.Async, o.DeviceMax = true, async, 160<<10
	return o
}

func TestEmulatedDeviceConformance(t *testing.T) {
	be, open := localGroup(t, emuOptions(false))
	commtest.Conformance(t, be, open)
}

func TestEmulatedDeviceFaults(t *testing.T) {
	be, open := localGroup(t, emuOptions(false))
	commtest.Faults(t, be, open, map[string]string{"counts": uncheckedDevicePath})
}

func openEmu(t *testing.T, n int, o Options) []comm.Comm {
	t.Helper()
	be, _ := cpu.New(cpu.Options{})
	bes := make([]backend.Backend, n)
	for r := range bes {
		bes[r] = be
	}
	cs, err := NewLocal(bes, o)
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

// TestDeviceSumOrder: the device path sums in rank order, bit for bit
// the sequential float32 sum, and Mean divides that sum, on every rank,
// through every slot several times, interleaved with the host pipeline;
// 100000 floats take 7 chunks, more than the slots, so one op reuses its
// own slots.
func TestDeviceSumOrder(t *testing.T) {
	const n = 3
	o := emuOptions(false)
	o.DeviceMax = 400000
	cs := openEmu(t, n, o)
	in := func(r, i, rep int) float32 { return (float32((i*7919+r*104729)%1000003)/3.3 - 150000) * float32(rep+1) }
	for rep := 0; rep < 12; rep++ {
		length := []int{1, 1000, 100000, 16384, 30000, 120000}[rep%6] // 120000 floats: the host pipeline
		op := []comm.ReduceOp{comm.Sum, comm.Mean}[rep%2]
		bufs := make([][]float32, n)
		err := commtest.RunLocalRanks(n, func(r int) error {
			x := make([]float32, length)
			for i := range x {
				x[i] = in(r, i, rep)
			}
			bufs[r] = x
			return cs[r].AllReduce(context.Background(), cpu.WrapF32(x), op)
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < length; i++ {
			want := in(0, i, rep)
			want += in(1, i, rep)
			want += in(2, i, rep)
			if op == comm.Mean {
				want /= n
			}
			for r := 0; r < n; r++ {
				if bufs[r][i] != want {
					t.Fatalf("rep %d (%v, %d elements) rank %d element %d = %v, want %v", rep, op, length, r, i, bufs[r][i], want)
				}
			}
		}
	}
}

// TestDeviceAsync: asynchronous all-reduces return once queued; after
// Sync every result is right, on both paths and through slot reuse.
func TestDeviceAsync(t *testing.T) {
	const n, ops = 2, 40
	cs := openEmu(t, n, emuOptions(true))
	got := make([][][]int64, n)
	err := commtest.RunLocalRanks(n, func(r int) error {
		for k := 0; k < ops; k++ {
			length := 1 + (k*997)%9000 // up to 72 KB: both paths
			x := make([]int64, length)
			for i := range x {
				x[i] = int64((r+1)*1000000 + k*1000 + i)
			}
			if err := cs[r].AllReduce(context.Background(), cpu.WrapI64(x), comm.Sum); err != nil {
				return fmt.Errorf("op %d: %w", k, err)
			}
			got[r] = append(got[r], x)
			if k%7 == 6 {
				if err := cs[r].Sync(context.Background()); err != nil {
					return err
				}
			}
		}
		return cs[r].Sync(context.Background())
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < n; r++ {
		for k, x := range got[r] {
			for i, v := range x {
				if want := int64(3000000 + 2*(k*1000+i)); v != want {
					t.Fatalf("rank %d op %d element %d = %d, want %d", r, k, i, v, want)
				}
			}
		}
	}
}

// TestDeviceAsyncStall: an asynchronous all-reduce whose peer never
// comes returns at once; the watchdog fails it at the deadline (so the
// stream is released) and the next call reports it promptly.
func TestDeviceAsyncStall(t *testing.T) {
	o := emuOptions(true)
	o.Timeout = 300 * time.Millisecond
	cs := openEmu(t, 2, o)
	x := cpu.WrapF32(make([]float32, 100))
	start := time.Now()
	if err := cs[0].AllReduce(context.Background(), x, comm.Sum); err != nil {
		t.Fatalf("asynchronous all-reduce: %v", err)
	}
	if el := time.Since(start); el > 200*time.Millisecond {
		t.Fatalf("asynchronous all-reduce took %v", el)
	}
	time.Sleep(600 * time.Millisecond) // past the deadline: the watchdog acts
	start = time.Now()
	err := cs[0].AllReduce(context.Background(), x, comm.Sum)
	if err == nil || !strings.Contains(err.Error(), "asynchronously") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("next call: %v, want the earlier all-reduce's timeout", err)
	}
	if el := time.Since(start); el > 100*time.Millisecond {
		t.Fatalf("next call took %v to report the failure", el)
	}
	// The peer's late call fails at once: the failure was published.
	start = time.Now()
	if err := cs[1].AllReduce(context.Background(), x, comm.Sum); err == nil || !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("late peer: %v, want an abort", err)
	}
	if el := time.Since(start); el > 100*time.Millisecond {
		t.Fatalf("late peer took %v", el)
	}
}

// TestDeviceAsyncSyncReports: Sync waits for a stalled asynchronous
// all-reduce until its deadline and reports the missing rank.
func TestDeviceAsyncSyncReports(t *testing.T) {
	o := emuOptions(true)
	o.Timeout = 300 * time.Millisecond
	cs := openEmu(t, 2, o)
	x := cpu.WrapF32(make([]float32, 100))
	if err := cs[1].AllReduce(context.Background(), x, comm.Sum); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := cs[1].Sync(context.Background())
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sync: %v, want a timeout", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Sync took %v", el)
	}
}

// TestDeviceCloseWithQueued: Close waits for a queued asynchronous
// all-reduce whose peer completes it.
func TestDeviceCloseWithQueued(t *testing.T) {
	cs := openEmu(t, 2, emuOptions(true))
	xs := [][]float32{{1, 2, 3}, {10, 20, 30}}
	if err := cs[0].AllReduce(context.Background(), cpu.WrapF32(xs[0]), comm.Sum); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cs[0].Close() }()
	time.Sleep(20 * time.Millisecond)
	if err := cs[1].AllReduce(context.Background(), cpu.WrapF32(xs[1]), comm.Sum); err != nil {
		t.Fatal(err)
	}
	if err := cs[1].Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for r, x := range xs {
		if x[0] != 11 || x[1] != 22 || x[2] != 33 {
			t.Fatalf("rank %d: %v, want [11 22 33]", r, x)
		}
	}
}
