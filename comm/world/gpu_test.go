package world

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/tensor/backend"
)

// TestGPUDeviceGroupNCCL: two simulated processes (JoinLocal), the first
// with two GPUs and the second with one, open an NCCL group through the
// job's store (the first process's two ncclCommInitRank concurrently)
// and all-reduce on it. Needs 3 GPUs (skipped here).
func TestGPUDeviceGroupNCCL(t *testing.T) {
	devs := gputest.Devices(t, 3)
	ws, err := JoinLocal(context.Background(), []int{2, 1}, Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, w := range ws {
			w.Leave(nil)
		}
	}()
	mine := [][]backend.Backend{{devs[0], devs[1]}, {devs[2]}}
	groups := make([][]comm.Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for p, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var kind string
			groups[p], kind, errs[p] = w.DeviceGroup(context.Background(), "nccl-test", mine[p], DeviceOptions{Options: comm.Options{Timeout: time.Minute}})
			if errs[p] == nil && kind != comm.KindNCCL {
				t.Errorf("process %d: kind %s, want nccl", p, kind)
			}
		}()
	}
	wg.Wait()
	for p, err := range errs {
		if err != nil {
			t.Fatalf("process %d: %v", p, err)
		}
	}
	var cs []comm.Comm
	var bs []backend.Backend
	for p, g := range groups {
		for i, c := range g {
			if c.Rank() != len(cs) || c.Size() != 3 {
				t.Fatalf("process %d local %d: rank %d of %d", p, i, c.Rank(), c.Size())
			}
			cs, bs = append(cs, c), append(bs, mine[p][i])
		}
	}
	bufs := make([]backend.Buffer, 3)
	for r, b := range bs {
		x, err := b.Alloc(backend.Float32, 4)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Upload(x, []float32{float32(r + 1), 1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		bufs[r] = x
	}
	rerrs := make([]error, 3)
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rerrs[r] = c.AllReduce(context.Background(), bufs[r], comm.Sum); rerrs[r] == nil {
				rerrs[r] = c.Sync(context.Background())
			}
		}()
	}
	wg.Wait()
	for r, b := range bs {
		if rerrs[r] != nil {
			t.Fatalf("rank %d: %v", r, rerrs[r])
		}
		got := make([]float32, 4)
		if err := b.Download(got, bufs[r]); err != nil {
			t.Fatal(err)
		}
		if got[0] != 6 || got[1] != 3 || got[2] != 6 || got[3] != 9 {
			t.Fatalf("rank %d: %v, want [6 3 6 9]", r, got)
		}
		b.Free(bufs[r])
		cs[r].Close()
	}
}
