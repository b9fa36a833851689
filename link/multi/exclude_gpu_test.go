package multi

import (
	"context"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/dsp/engine"
	"github.com/strata-gnn/strata/internal/cudadsp"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// TestGPUExcludeMatchesHost needs a CUDA GPU (it skips without one):
// cudadsp.PairExcluder removes from a batch sampled on the GPU exactly
// the edges link.ExcludeTargets removes from its download, keeping the
// others in their order (every block's row pointers, sources and edge
// IDs equal), for several steps' positives of Cora, fanout -1 included.
func TestGPUExcludeMatchesHost(t *testing.T) {
	dev := gputest.One(t)
	ds := cora(t)
	cfg := link.Defaults("sage")
	s, err := link.MakeSplit(ds, &cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	neg, err := link.NewNegatives(s, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	x, err := cudadsp.NewPairExcluder(dev)
	if err != nil || x == nil {
		t.Fatalf("excluder: %v (nil %v)", err, x == nil)
	}
	defer x.Close()
	edges := link.EpochEdges(s, cfg.Seed, 0)
	for _, fan := range [][]int{{10, 10}, {-1, 5}} {
		smp, err := gpusample.New(dev, s.In, gpusample.Config{Fanouts: fan})
		if err != nil {
			t.Fatal(err)
		}
		for bi := 0; bi < 4; bi++ {
			lo, hi := bi*512, (bi+1)*512
			pos := link.Edges{Src: edges.Src[lo:hi], Dst: edges.Dst[lo:hi]}
			ng, err := neg.Draw(pos, 0, bi)
			if err != nil {
				t.Fatal(err)
			}
			b := link.NewBatch(pos, ng)
			gb, err := smp.SampleDevice(b.Seeds, sample.Key{Seed: 1, Batch: bi})
			if err != nil {
				t.Fatal(err)
			}
			want, err := gb.Download()
			if err != nil {
				t.Fatal(err)
			}
			wantRemoved := link.ExcludeTargets(want, pos)
			g := cudadsp.NewBatch(dev, gb)
			removed, err := x.Exclude(g, link.TargetKeys(pos))
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.Download()
			g.Free()
			if err != nil {
				t.Fatal(err)
			}
			if removed != int64(wantRemoved) || wantRemoved == 0 {
				t.Fatalf("fanouts %v batch %d: %d edges removed on the GPU, %d on the host (want > 0)", fan, bi, removed, wantRemoved)
			}
			for k := range want.Blocks {
				w, g := &want.Blocks[k], &got.Blocks[k]
				if w.NumDst != g.NumDst || !slices.Equal(w.SrcNodes, g.SrcNodes) || !slices.Equal(w.Indptr, g.Indptr) ||
					!slices.Equal(w.Indices, g.Indices) || !slices.Equal(w.EdgeIDs, g.EdgeIDs) {
					t.Fatalf("fanouts %v batch %d block %d: the GPU's kept edges differ from the host's (%d vs %d edges)",
						fan, bi, k, len(g.Indices), len(w.Indices))
				}
			}
		}
		smp.Close()
	}
}

// TestGPUOneDeviceMatchesCPU needs a CUDA GPU (it skips without one):
// link prediction in the DSP engine on cuda:0, whose batches lose their
// target links on the GPU and travel on as node classification's, gives
// cpu:1's losses (to 1e-3 relative) and test AUC (within 0.01).
func TestGPUOneDeviceMatchesCPU(t *testing.T) {
	dev := gputest.One(t)
	ds := cora(t)
	cfg := quickSAGE(3)
	want := runDSP(t, ds, cfg, 1, nil)
	got, _, err := RunDSP(context.Background(), ds, cfg, engine.Defaults(cfg.Model, 1), engine.Options{Backends: []backend.Backend{dev}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for e := range want.Epochs {
		a, b := got.Epochs[e].Loss, want.Epochs[e].Loss
		if d := (a - b) / b; d > 1e-3 || d < -1e-3 {
			t.Fatalf("epoch %d: loss %.7f on cuda:0, %.7f on cpu:1", e+1, a, b)
		}
	}
	if d := got.Test.AUC - want.Test.AUC; d > 0.01 || d < -0.01 {
		t.Fatalf("test AUC %.4f on cuda:0, %.4f on cpu:1", got.Test.AUC, want.Test.AUC)
	}
}
