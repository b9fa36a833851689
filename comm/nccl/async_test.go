package nccl

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
)

// openTwoAsync opens two GPUs and an asynchronous in-process communicator
// over them (needs two GPUs and NCCL).
func openTwoAsync(t *testing.T, timeout time.Duration) ([]backend.Backend, []comm.Comm) {
	t.Helper()
	if n := gpus(t); n < 2 {
		t.Skipf("needs 2 GPUs, found %d", n)
	}
	devs := make([]backend.Backend, 2)
	for r := range devs {
		d, err := openGPU(r)
		if err != nil {
			t.Skip(err)
		}
		devs[r] = d
		t.Cleanup(func() { closeGPU(d) })
	}
	cs, err := OpenLocal(context.Background(), devs, Options{Async: true, Options: comm.Options{Timeout: timeout}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return devs, cs
}

// TestGPUAsyncAllReduce: queued all-reduces (back to back, on buffers of
// several sizes) give the right sums once synchronized.
func TestGPUAsyncAllReduce(t *testing.T) {
	devs, cs := openTwoAsync(t, 20*time.Second)
	const ops = 12
	err := commtest.RunLocalRanks(2, func(r int) error {
		d := devs[r]
		bufs := make([]backend.Buffer, ops)
		for k := range bufs {
			n := 1 + k*37777
			x := make([]float32, n)
			for i := range x {
				x[i] = float32((r+1)*(k+1)) + float32(i%13)
			}
			b, err := d.Alloc(backend.Float32, n)
			if err != nil {
				return err
			}
			defer d.Free(b)
			if err := d.Upload(b, x); err != nil {
				return err
			}
			bufs[k] = b
			start := time.Now()
			if err := cs[r].AllReduce(context.Background(), b, comm.Sum); err != nil {
				return fmt.Errorf("op %d: %w", k, err)
			}
			if el := time.Since(start); el > 5*time.Second {
				return fmt.Errorf("op %d took %v to queue", k, el)
			}
		}
		if err := cs[r].Sync(context.Background()); err != nil {
			return err
		}
		for k, b := range bufs {
			got := make([]float32, b.Len())
			if err := d.Download(got, b); err != nil {
				return err
			}
			for i, v := range got {
				if want := float32(3*(k+1)) + 2*float32(i%13); v != want {
					return fmt.Errorf("rank %d op %d element %d = %v, want %v", r, k, i, v, want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGPUAsyncStall: an asynchronous all-reduce whose peer never comes
// returns at once; the watchdog fails it at its deadline, naming the
// missing rank, aborts the communicator (the stream is released) and the
// next call reports the failure.
func TestGPUAsyncStall(t *testing.T) {
	devs, cs := openTwoAsync(t, 500*time.Millisecond)
	b, err := devs[0].Alloc(backend.Float32, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Free(b)
	start := time.Now()
	if err := cs[0].AllReduce(context.Background(), b, comm.Sum); err != nil {
		t.Fatalf("asynchronous all-reduce: %v", err)
	}
	if el := time.Since(start); el > 400*time.Millisecond {
		t.Fatalf("asynchronous all-reduce took %v", el)
	}
	// The stream is stuck behind the all-reduce until the watchdog aborts
	// it: a download must return soon after the deadline.
	got := make([]float32, 1000)
	done := make(chan error, 1)
	go func() { done <- devs[0].Download(got, b) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the stream was not released after the deadline")
	}
	err = cs[0].AllReduce(context.Background(), b, comm.Sum)
	var oe *comm.OpError
	if err == nil || !strings.Contains(err.Error(), "asynchronously") || !errors.As(err, &oe) {
		t.Fatalf("next call: %v, want the earlier operation's failure", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "ranks [1] did not take part") {
		t.Fatalf("next call: %v, want a timeout naming rank 1", err)
	}
}

// TestTwoGPUsAsyncConformance runs the conformance suite with
// every operation asynchronous (one process per GPU; the suite downloads
// each result, which waits for the stream).
func TestTwoGPUsAsyncConformance(t *testing.T) {
	if n := gpus(t); n < 2 {
		t.Skipf("needs 2 GPUs, found %d", n)
	}
	start := time.Now()
	out, err := commtest.Launch(context.Background(), 2, "gpu", []string{EnvAsync + "=1"}, "conformance")
	t.Logf("2 GPUs, asynchronous: %v\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatal(err)
	}
}
