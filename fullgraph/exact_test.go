package fullgraph

import (
	"context"
	"math"
	"reflect"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
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

// TestOneDeviceIsTrainsFullBatch: on one device the engine is package
// train's former full-batch trainer ('strata train --mode full' before it
// became this engine on one device): nn's model (train.Common.ModelConfig)
// over the whole graph on an autograd tape, one optimizer step an epoch
// with dropout keyed by train.Common.DropoutSeed(epoch, 0), then
// train.Evaluator's whole-graph evaluation. Same initial weights, and
// bit-identical losses, accuracies and validation losses, with sparse
// (Cora) and dense features, Adam and SGD with momentum, and GAT's heads.
func TestOneDeviceIsTrainsFullBatch(t *testing.T) {
	cases := []struct {
		name string
		ds   func(testing.TB) *dataset.Dataset
		cfg  func() Config
	}{
		{"gcn cora", cora, func() Config { return Defaults(GCN) }},
		{"sage cora", cora, func() Config { return Defaults(SAGE) }},
		{"gat cora", cora, func() Config {
			c := Defaults(GAT)
			c.Heads, c.OutHeads, c.AttnDrop = 4, 2, 0.3
			return c
		}},
		{"gcn dense", tiny, func() Config { return Defaults(GCN) }},
		{"sage dense sgd", tiny, func() Config {
			c := Defaults(SAGE)
			c.Layers, c.Optimizer, c.LR, c.Momentum = 3, "sgd", 0.1, 0.9
			return c
		}},
		{"gat dense", tiny, func() Config { return Defaults(GAT) }},
	}
	if testing.Short() {
		cases = []struct {
			name string
			ds   func(testing.TB) *dataset.Dataset
			cfg  func() Config
		}{cases[0], cases[2], cases[4]}
	}
	// nn's SAGE layers take one product of [x_dst | mean] and [W_self;
	// W_neigh] on back ends with backend.ConcatAggregator; the engine
	// takes the two products: the reference runs on a back end without it.
	b := twoProducts{cpuBackend(t)}
	for _, tc := range cases {
		ds, cfg := tc.ds(t), tc.cfg()
		cfg.Epochs = 3
		rep := run(t, ds, cfg, 1)
		want := trainFullBatch(t, b, ds, cfg)
		if rep.RowNormalized != want.rowNorm {
			t.Errorf("%s: row-normalized %v, train %v", tc.name, rep.RowNormalized, want.rowNorm)
		}
		for e, w := range want.epochs {
			g := rep.Epochs[e]
			if math.Float64bits(g.Loss) != math.Float64bits(w.Loss) || g.TrainAccuracy != w.TrainAccuracy ||
				g.ValAccuracy != w.ValAccuracy || g.TestAccuracy != w.TestAccuracy || math.Float64bits(g.ValLoss) != math.Float64bits(w.ValLoss) {
				t.Errorf("%s epoch %d: fullgraph %+v, train's full batch %+v", tc.name, e+1, g, w)
			}
		}
	}
}

// twoProducts hides a back end's backend.ConcatAggregator.
type twoProducts struct{ backend.Backend }

type fullBatch struct {
	epochs  []train.EpochRecord
	rowNorm bool
}

// trainFullBatch is package train's former full-batch training of cfg on
// ds (its fullStep and evaluation).
func trainFullBatch(t *testing.T, b backend.Backend, ds *dataset.Dataset, cfg Config) fullBatch {
	t.Helper()
	feats, err := train.NewFeatures(ds.Features, int(ds.NumNodes()), ds.FeatDim, cfg.RowNorm)
	if err != nil {
		t.Fatal(err)
	}
	model, err := nn.New(b, cfg.ModelConfig(ds.FeatDim, ds.NumClasses))
	if err != nil {
		t.Fatal(err)
	}
	defer nn.FreeParams(b, model.Params())
	// The engine builds the same initial weights.
	_, ps, err := buildParams(b, &cfg, ds.FeatDim, ds.NumClasses)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := nn.SaveParams(b, ps)
	w, _ := nn.SaveParams(b, model.Params())
	nn.FreeParams(b, ps)
	if !reflect.DeepEqual(a, w) {
		t.Fatalf("%s: the engine's initial parameters differ from nn.New's", cfg.Model)
	}
	opt := cfg.NewOptimizer(b, model.Params())
	defer opt.Free()
	in := ds.InGraph()
	blk, err := nn.UploadGraph(b, in)
	if err != nil {
		t.Fatal(err)
	}
	defer blk.Free()
	blocks := make([]*nn.Block, cfg.Layers)
	for i := range blocks {
		blocks[i] = blk
	}
	var xs *autograd.SparseInput
	var xd backend.Buffer
	if h := feats.Sparse; h != nil {
		if xs, err = autograd.NewSparseInput(b, h.Rows, h.Cols, h.Indptr, h.Indices, h.Values); err != nil {
			t.Fatal(err)
		}
		defer xs.Free(b)
	} else {
		if xd, err = upload(b, feats.Dense); err != nil {
			t.Fatal(err)
		}
		defer b.Free(xd)
	}
	splits := train.DatasetSplits(ds)
	rows, _ := uploadI32(b, splits[train.SplitTrain].Rows)
	lab, _ := uploadI32(b, splits[train.SplitTrain].Labels)
	defer b.Free(rows)
	defer b.Free(lab)
	ev, err := train.NewEvaluator(b, ds, in, feats, cfg.Common)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	out := fullBatch{rowNorm: feats.RowNormalized}
	for e := 0; e < cfg.Epochs; e++ {
		tp := autograd.NewTape(b)
		var logits *autograd.Var
		if xs != nil {
			logits, err = model.ForwardSparse(tp, xs, blocks, true, cfg.DropoutSeed(e, 0))
		} else {
			x, _ := tp.Const(xd, feats.Rows, feats.Cols)
			logits, err = model.Forward(tp, x, blocks, true, cfg.DropoutSeed(e, 0))
		}
		if err != nil {
			t.Fatal(err)
		}
		logp, _ := tp.LogSoftmax(logits)
		lv, loss, err := tp.NLLLoss(logp, rows, lab)
		if err != nil {
			t.Fatal(err)
		}
		if err := opt.ZeroGrad(); err != nil {
			t.Fatal(err)
		}
		if err := tp.Backward(lv); err != nil {
			t.Fatal(err)
		}
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
		tp.Release()
		tally, err := ev.Run(model)
		if err != nil {
			t.Fatal(err)
		}
		rec := train.EpochRecord{Epoch: e + 1, Loss: loss}
		rec.SetEvaluation(&tally)
		out.epochs = append(out.epochs, rec)
	}
	return out
}
