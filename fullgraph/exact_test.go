package fullgraph

import (
	"context"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
)

// TestExactEqualsSingleDevice: without staleness, training on P CPU
// virtual devices gives the losses and accuracies of single-device
// full-graph training (the nn models on an autograd tape) on the same
// renumbered graph, for P = 1, 2, 4; P = 1 is bit-identical.
func TestExactEqualsSingleDevice(t *testing.T) {
	ds := cora(t)
	epochs := 12
	cases := []struct {
		model string
		p     int
	}{{GCN, 1}, {GCN, 2}, {GCN, 4}, {SAGE, 1}, {SAGE, 3}}
	if testing.Short() {
		epochs, cases = 3, cases[2:]
	}
	for _, tc := range cases {
		cfg := Defaults(tc.model)
		cfg.Epochs = epochs
		cfg.Seed = 7
		pds, _, err := PartitionDataset(context.Background(), ds, tc.p, cfg.Partition, cfg.PartitionSeed)
		if err != nil {
			t.Fatal(err)
		}
		ref := cfg
		ref.Engine = EngineTape
		want := run(t, pds, ref, 1)
		got := run(t, ds, cfg, tc.p)
		if got.Engine != "distributed" || want.Engine != "tape" {
			t.Fatalf("engines %q and %q", got.Engine, want.Engine)
		}
		for e := range want.Epochs {
			w, g := want.Epochs[e], got.Epochs[e]
			if d := relDiff(g.Loss, w.Loss); d > 1e-5 || (tc.p == 1 && g.Loss != w.Loss) {
				t.Errorf("%s P=%d epoch %d: loss %.9f, single device %.9f (rel diff %.2g)", tc.model, tc.p, e+1, g.Loss, w.Loss, d)
			}
			if g.TrainAccuracy != w.TrainAccuracy || g.ValAccuracy != w.ValAccuracy || g.TestAccuracy != w.TestAccuracy {
				t.Errorf("%s P=%d epoch %d: accuracies %v/%v/%v, single device %v/%v/%v", tc.model, tc.p, e+1,
					g.TrainAccuracy, g.ValAccuracy, g.TestAccuracy, w.TrainAccuracy, w.ValAccuracy, w.TestAccuracy)
			}
			if relDiff(g.ValLoss, w.ValLoss) > 1e-5 {
				t.Errorf("%s P=%d epoch %d: val loss %v, single device %v", tc.model, tc.p, e+1, g.ValLoss, w.ValLoss)
			}
		}
		if tc.p > 1 && (got.Comm.BytesSent == 0 || got.Comm.BytesAvoided != 0 || got.Comm.BroadcastsSkipped != 0) {
			t.Errorf("%s P=%d exact run: comm %+v", tc.model, tc.p, got.Comm)
		}
	}
}

// TestTapeMatchesNNModel: the single-device reference is nn's own model
// (nn.New + ForwardSparse, as package train's full-batch mode runs it):
// same initial weights and bit-identical losses.
func TestTapeMatchesNNModel(t *testing.T) {
	ds := cora(t)
	b := cpuBackend(t)
	for _, kind := range []string{GCN, SAGE, GAT} {
		cfg := Defaults(kind)
		cfg.Epochs = 3
		if testing.Short() {
			cfg.Epochs = 2
		}
		rep := run(t, ds, cfg, 1)

		pr, err := prepare(context.Background(), ds, &cfg, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		mc := nn.Config{Kind: kind, InDim: ds.FeatDim, Hidden: cfg.Hidden, OutDim: ds.NumClasses, Layers: cfg.Layers,
			Heads: cfg.Heads, OutHeads: cfg.OutHeads, Dropout: float32(cfg.Dropout), InputDropout: float32(cfg.Dropout),
			AttnDropout: float32(cfg.AttnDrop), Seed: rng.Derive(cfg.Seed, tagInit)}
		if kind != GAT {
			mc.Heads, mc.OutHeads = 0, 0
		}
		model, err := nn.New(b, mc)
		if err != nil {
			t.Fatal(err)
		}
		// The engine builds the same initial weights.
		_, ps, err := buildParams(b, &cfg, ds.FeatDim, ds.NumClasses, mc.Seed)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := nn.SaveParams(b, ps)
		w, _ := nn.SaveParams(b, model.Params())
		if len(a) != len(w) {
			t.Fatalf("%s: %d params, nn has %d", kind, len(a), len(w))
		}
		for i := range a {
			if a[i].Name != w[i].Name || len(a[i].Data) != len(w[i].Data) {
				t.Fatalf("param %d: %s vs %s", i, a[i].Name, w[i].Name)
			}
			for j := range a[i].Data {
				if a[i].Data[j] != w[i].Data[j] {
					t.Fatalf("param %s differs at %d", a[i].Name, j)
				}
			}
		}
		nn.FreeParams(b, ps)

		blk, err := nn.UploadGraph(b, pr.in)
		if err != nil {
			t.Fatal(err)
		}
		h := pr.feats.sparse
		xs, err := autograd.NewSparseInput(b, h.Rows, h.Cols, h.Indptr, h.Indices, h.Values)
		if err != nil {
			t.Fatal(err)
		}
		labels := make([]int32, len(ds.Train))
		for i, v := range ds.Train {
			labels[i] = ds.Labels[v]
		}
		rows, _ := uploadI32(b, ds.Train)
		lab, _ := uploadI32(b, labels)
		opt := optim.NewAdam(b, model.Params(), float32(cfg.LR), 0.9, 0.999, 1e-8, float32(cfg.WeightDecay))
		blocks := make([]*nn.Block, cfg.Layers)
		for i := range blocks {
			blocks[i] = blk
		}
		for e := 0; e < cfg.Epochs; e++ {
			tp := autograd.NewTape(b)
			logits, err := model.ForwardSparse(tp, xs, blocks, true, rng.Derive(cfg.Seed, tagDropout, uint64(e)))
			if err != nil {
				t.Fatal(err)
			}
			logp, _ := tp.LogSoftmax(logits)
			lv, loss, err := tp.NLLLoss(logp, rows, lab)
			if err != nil {
				t.Fatal(err)
			}
			opt.ZeroGrad()
			if err := tp.Backward(lv); err != nil {
				t.Fatal(err)
			}
			opt.Step()
			tp.Release()
			if loss != rep.Epochs[e].Loss {
				t.Errorf("%s epoch %d: fullgraph loss %.9f, nn model %.9f", kind, e+1, rep.Epochs[e].Loss, loss)
			}
		}
		opt.Free()
		nn.FreeParams(b, model.Params())
		blk.Free()
		xs.Free(b)
		b.Free(rows)
		b.Free(lab)
	}
}
