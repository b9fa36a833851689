package csp

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
)

// TestGPUTypedMatchesCPU: the collective typed sampler on cuda:0 alone
// and on cuda:0,1 (NCCL), with even and random per-type partitions,
// draws the batches sample.HeteroSampler draws on the CPU over the whole
// graph, byte for byte (uniform draws with and without replacement,
// fanout -1, relations left out at a hop), which the CPU ranks of
// TestTypedMatchesHeteroSampler draw too.
func TestGPUTypedMatchesCPU(t *testing.T) {
	sizes := []int64{20000, 9000, 30000}
	rels := typedTestGraph(sizes, 6, 3)
	modes := []TypedConfig{
		{Fanouts: [][]int{{10, 5}, {8, 4}, {6, 0}, {0, 3}, {4, 4}}, EdgeIDs: true},
		{Fanouts: [][]int{{10, 5}, {8, 4}, {6, 3}, {4, 2}, {4, 0}}, Replace: true},
		{Fanouts: [][]int{{-1, 3}, {5, -1}, {4, 2}, {2, 0}, {0, 3}}, EdgeIDs: true},
	}
	ps := []int{1}
	if numGPUs(t) >= 2 {
		ps = append(ps, 2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for mi, cfg := range modes {
		ref, err := sample.NewHeteroSampler(sizes, rels, sample.HeteroConfig{Fanouts: cfg.Fanouts, Replace: cfg.Replace})
		if err != nil {
			t.Fatal(err)
		}
		for _, P := range ps {
			ds, cs := gpus(t, P), commsFor(t, P)
			for _, pseed := range []uint64{0, 5} {
				if P == 1 && pseed != 0 {
					continue
				}
				off := typedOffsets(sizes, P, pseed)
				ss := make([]*TypedSampler, P)
				for r := range P {
					var c comm.Comm
					if cs != nil {
						c = cs[r]
					}
					if ss[r], err = NewTyped(ds[r], sizes, rels, off, c, cfg); err != nil {
						t.Fatalf("mode %d P=%d rank %d: %v", mi, P, r, err)
					}
				}
				for bi, n := range []int{512, 0, 37} {
					seeds, keys := make([][][]graph.NodeID, P), make([]sample.Key, P)
					for r := range P {
						seeds[r] = make([][]graph.NodeID, len(sizes))
						lo, hi := off[0][r], off[0][r+1]
						seeds[r][0] = randomSeeds(uint64(100*bi+r+1), hi-lo, min(n, int(hi-lo)))
						for i := range seeds[r][0] {
							seeds[r][0][i] += graph.NodeID(lo)
						}
						if bi == 2 {
							seeds[r][2] = randomSeeds(uint64(7*r+3), sizes[2], 64)
						}
						keys[r] = sample.Key{Seed: 42, Epoch: mi, Batch: bi*P + r}
					}
					got, errs := sampleTypedAll(ctx, ss, seeds, keys)
					if err := errors.Join(errs...); err != nil {
						t.Fatalf("mode %d P=%d partition %d batch %d: %v", mi, P, pseed, bi, err)
					}
					for r := range P {
						want, err := ref.SampleTypes(seeds[r], keys[r])
						if err != nil {
							t.Fatal(err)
						}
						compareHetero(t, fmt.Sprintf("GPU mode %d P=%d partition %d batch %d rank %d", mi, P, pseed, bi, r), got[r], want, cfg.EdgeIDs)
					}
				}
				for _, s := range ss {
					if err := s.Close(); err != nil {
						t.Error(err)
					}
				}
			}
		}
	}
}
