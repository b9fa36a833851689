package train

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/tensor/backend/cpu/cputest"
)

// TestReplicaFirstStepWarms: replicas with a Barrier meet at it after
// their first step's backward pass, before its gradients' collective;
// after it no product family is first met, evaluation included (counted
// as the CUDA back end's pinned products count them; a small typed
// graph in batches of 64, its evaluation over all 3000 papers); and the
// losses are those of replicas without a barrier.
func TestReplicaFirstStepWarms(t *testing.T) {
	c := gen.HeteroPreset()
	c.Papers, c.Seed = 3000, 3
	h, err := gen.GenerateHetero(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg := HeteroDefaults(HSAGE)
	cfg.Epochs, cfg.Hidden, cfg.Seed, cfg.BatchSize = 1, 32, 5, 64
	const k = 2
	// Replica r takes every k-th training node, in batches; every
	// replica as many (a share one short repeats its first node).
	share := (len(h.Train) + k - 1) / k
	batches := (share + cfg.BatchSize - 1) / cfg.BatchSize
	deal := func(order []int32) ([][][]int32, error) {
		out := make([][][]int32, k)
		for r := range k {
			var mine []int32
			for i := r; i < len(order); i += k {
				mine = append(mine, order[i])
			}
			for len(mine) < share {
				mine = append(mine, mine[0])
			}
			for lo := 0; lo < len(mine); lo += cfg.BatchSize {
				out[r] = append(out[r], mine[lo:min(lo+cfg.BatchSize, len(mine))])
			}
		}
		return out, nil
	}
	run := func(barrier bool) (losses [k][]float64, atBarrier, atEnd [k]int) {
		comms, err := inproc.New(k, comm.Options{Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var arrived sync.WaitGroup
		arrived.Add(k)
		var wg sync.WaitGroup
		errs := make([]error, k)
		for r := range k {
			b, err := cpu.New(cpu.Options{})
			if err != nil {
				t.Fatal(err)
			}
			fb := cputest.NewFamilyCounting(b)
			rp := &Replica{Rank: r, Size: k, Deal: deal, Batches: batches,
				Reduce: func(buf backend.Buffer) error { return comms[r].AllReduce(context.Background(), buf, comm.Mean) }}
			if barrier {
				rp.Barrier = func() error {
					atBarrier[r], _, _ = fb.ProductFamilies()
					arrived.Done()
					arrived.Wait()
					return nil
				}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				rep, err := RunHetero(context.Background(), h, cfg, Options{Backend: fb, Replica: rp})
				if errs[r] = err; err == nil {
					for _, e := range rep.Epochs {
						losses[r] = append(losses[r], e.BatchLosses...)
					}
				}
				atEnd[r], _, _ = fb.ProductFamilies()
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Errorf("replica %d: %v", r, err)
			}
		}
		return losses, atBarrier, atEnd
	}
	got, atBarrier, atEnd := run(true)
	for r := range k {
		if atBarrier[r] == 0 || atEnd[r] != atBarrier[r] {
			t.Errorf("replica %d: %d product families at the barrier, %d at the end", r, atBarrier[r], atEnd[r])
		}
	}
	want, _, _ := run(false)
	if !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
		t.Errorf("losses %v, without the barrier %v", got, want)
	}
}
