package csp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// layerGroup opens P layer-wise samplers over g (offsets off) on the
// first P GPUs.
func layerGroup(t testing.TB, g *graph.CSR, off []int64, cfg Config) ([]*LayerSampler, func()) {
	return openGroup(t, g, off, cfg.Placement == gpusample.Split, func(d backend.Backend, p *layout.Patch, c comm.Comm) (*LayerSampler, error) {
		return NewLayer(d, p, off, c, cfg)
	})
}

// layerSampleAll runs one collective Sample on every rank and downloads
// the batches.
func layerSampleAll(ctx context.Context, ss []*LayerSampler, seeds [][]graph.NodeID, keys []sample.Key) ([]*sample.MiniBatch, []error) {
	return onEveryRank(len(ss), func(r int) (*sample.MiniBatch, error) {
		b, err := ss[r].Sample(ctx, seeds[r], keys[r])
		if err != nil {
			return nil, err
		}
		defer b.Free()
		return b.Download()
	})
}

// TestLayerMatchesCPU: on 1, 2 and 4 GPUs (as available), every rank's
// layer-wise batch equals the single-device reference's (layerRef) with
// the same seeds and key: seeds, SrcNodes, indptr, indices (and edge IDs
// when asked), for uniform sampling with and without replacement,
// weighted sampling (also with the rows in mapped host memory, and with
// the patches split between device and host memory), every
// edge (fanout -1), and budgets above the frontier's edges, on equal and
// random partitions (an empty rank, ranks without seeds). It also counts
// the host's waits.
func TestLayerMatchesCPU(t *testing.T) {
	ps := groupSizes(t)
	g := randomGraph(3, 20000, 12)
	modes := []Config{
		{Fanouts: []int{2000, 4000, 3000}},
		{Fanouts: []int{2000, 4000, 3000}, Replace: true, EdgeIDs: true},
		{Fanouts: []int{1500, 2500}, Replace: true, Weighted: true, EdgeIDs: true},
		{Fanouts: []int{1500, 2500}, Replace: true, Weighted: true, Placement: gpusample.Mapped},
		{Fanouts: []int{-1, 5000}, EdgeIDs: true},
		{Fanouts: []int{-1, 800}, Replace: true},
		{Fanouts: []int{1 << 20, 64}},
		{Fanouts: []int{2000, 4000}, Placement: gpusample.Split, EdgeIDs: true},
		{Fanouts: []int{1500, 2500}, Replace: true, Weighted: true, Placement: gpusample.Split},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, P := range ps {
		for part := range 2 {
			off := make([]int64, P+1)
			for p := range off {
				off[p] = g.NumRows * int64(p) / int64(P)
			}
			if part == 1 {
				if P == 1 {
					continue
				}
				off = randomOffsets(uint64(9*P), g.NumRows, P)
				if P >= 3 {
					off[1] = off[0] // an empty rank
				}
			}
			for mi, cfg := range modes {
				name := fmt.Sprintf("P=%d offsets=%v mode=%+v", P, off, cfg)
				ss, done := layerGroup(t, g, off, cfg)
				for bi, n := range []int{512, 1024, 0, 37} {
					seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
					for r := range P {
						k := n
						if r == 1 && bi == 3 {
							k = 0
						}
						seeds[r] = ownedSeeds(uint64(2000*P+100*mi+10*bi+r), off, r, k)
						keys[r] = sample.Key{Seed: 43, Epoch: mi, Batch: bi*P + r}
					}
					got, errs := layerSampleAll(ctx, ss, seeds, keys)
					for r := range P {
						if errs[r] != nil {
							t.Fatalf("%s batch %d rank %d: %v", name, bi, r, errs[r])
						}
						want := refLayer(t, g, cfg, seeds[r], keys[r])
						if !slices.Equal(got[r].Seeds, want.Seeds) {
							t.Fatalf("%s batch %d rank %d: seeds differ", name, bi, r)
						}
						if !cfg.EdgeIDs {
							for i := range got[r].Blocks {
								for _, e := range got[r].Blocks[i].EdgeIDs {
									if e != -1 {
										t.Fatalf("%s: edge ID %d without EdgeIDs", name, e)
									}
								}
								got[r].Blocks[i].EdgeIDs = want.Blocks[i].EdgeIDs
							}
						}
						compareBlocks(t, fmt.Sprintf("%s batch %d rank %d", name, bi, r), got[r].Blocks, want.Blocks)
					}
				}
				for r := range P {
					st := ss[r].Stats()
					if st.Batches != 4 || (P > 1 && (st.Exchanges == 0 || st.BytesSent[r] != 0)) || (P == 1 && st.Exchanges != 0) {
						t.Errorf("%s: rank %d stats %+v", name, r, st)
					}
					if w := 4 * wantLayerWaits(len(cfg.Fanouts), P > 1, cfg.EdgeIDs); st.Waits != w {
						t.Errorf("%s: rank %d waited %d times in 4 steps, want %d", name, r, st.Waits, w)
					}
				}
				done()
			}
		}
	}
}

// TestLayerBadSeedsFailEveryRank: invalid seeds on one rank make every
// rank fail at the first exchange (the bad one with ErrInput, the others
// with ErrPeer), and the group samples normally afterwards.
func TestLayerBadSeedsFailEveryRank(t *testing.T) {
	P := numGPUs(t)
	if P < 2 {
		t.Skip("needs 2 GPUs")
	}
	g := randomGraph(4, 5000, 6)
	off := make([]int64, P+1)
	for p := range off {
		off[p] = g.NumRows * int64(p) / int64(P)
	}
	ss, done := layerGroup(t, g, off, Config{Fanouts: []int{300, 300}})
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
	for r := range P {
		seeds[r] = ownedSeeds(uint64(r), off, r, 50)
		keys[r] = sample.Key{Seed: 1, Batch: r}
	}
	seeds[1] = append(slices.Clone(seeds[1]), seeds[1][0])
	start := time.Now()
	_, errs := layerSampleAll(ctx, ss, seeds, keys)
	checkFailedStep(t, errs, 1, 0, 0, ErrInput)
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("failing took %v: the ranks waited for a deadline", d)
	}
	seeds[1] = seeds[1][:len(seeds[1])-1]
	if _, errs := layerSampleAll(ctx, ss, seeds, keys); errors.Join(errs...) != nil {
		t.Fatalf("after a failed batch: %v", errors.Join(errs...))
	}
}
