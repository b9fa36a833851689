package train

import (
	"strings"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// TestKeeper: the kept parameters are those of the epoch the report's
// headline selects, downloaded when it was offered.
func TestKeeper(t *testing.T) {
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := nn.NewParam(b, "w", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	params := []*nn.Param{p}
	epochs := []EpochRecord{
		{Epoch: 1, ValAccuracy: 0.5, ValLoss: 1},
		{Epoch: 2, ValAccuracy: 0.7, ValLoss: 0.9},
		{Epoch: 3, ValAccuracy: 0.7, ValLoss: 0.95}, // a tie lost on the loss
		{Epoch: 4, EvalSkipped: true},
		{Epoch: 5, ValAccuracy: 0.6, ValLoss: 0.8},
	}
	offer := func(k *Keeper, recs []EpochRecord, last bool) {
		for i := range recs {
			// The parameter holds the epoch's number, so the kept value says
			// which epoch's it is.
			if err := b.Upload(p.Value, []float32{float32(recs[i].Epoch)}); err != nil {
				t.Fatal(err)
			}
			if err := k.Offer(&recs[i], last && i == len(recs)-1, b, params); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		rule  string
		want  int
		prior []EpochRecord
		note  string
	}{
		{rule: SelectBest, want: 2},
		{rule: SelectLast, want: 5},
		{rule: SelectBest, want: 2, prior: []EpochRecord{{Epoch: 0, ValAccuracy: 0.6}}},
		{rule: SelectBest, want: 5, prior: []EpochRecord{{Epoch: 0, ValAccuracy: 0.9}}, note: "before the run was resumed"},
	} {
		k := NewKeeper(tc.rule)
		k.Resumed(tc.prior)
		offer(k, epochs, true)
		rec, ps, note, ok := k.Kept()
		if !ok || rec.Epoch != tc.want || ps[0].Data[0] != float32(tc.want) {
			t.Errorf("%s after %v: kept epoch %d with parameter %v (ok %v), want epoch %d", tc.rule, tc.prior, rec.Epoch, ps, ok, tc.want)
		}
		if (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
			t.Errorf("%s after %v: note %q, want one containing %q", tc.rule, tc.prior, note, tc.note)
		}
		// The report selects the same epoch.
		r := Report{Config: Config{Common: Common{Select: tc.rule}}, Epochs: epochs}
		r.Summarize()
		if tc.prior == nil && r.SelectedEpoch != tc.want {
			t.Errorf("%s: the report selects epoch %d, the keeper %d", tc.rule, r.SelectedEpoch, tc.want)
		}
	}
	var none *Keeper
	if err := none.Offer(&epochs[0], true, b, params); err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := none.Kept(); ok {
		t.Error("a nil keeper kept something")
	}
}

// TestEvaluatorMatchesOnePass: the layer-wise whole-graph evaluation
// gives the tally of the former one-pass evaluation (the nn model over
// the whole graph, scored on the device) exactly, for every model.
func TestEvaluatorMatchesOnePass(t *testing.T) {
	ds, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := ds.InGraph()
	for _, kind := range []string{SAGE, GCN, GAT} {
		cfg := Defaults(kind).Common
		f, err := NewFeatures(ds.Features, int(ds.NumNodes()), ds.FeatDim, cfg.RowNorm)
		if err != nil {
			t.Fatal(err)
		}
		m, err := nn.New(b, cfg.ModelConfig(ds.FeatDim, ds.NumClasses))
		if err != nil {
			t.Fatal(err)
		}
		ev, err := NewEvaluator(b, ds, in, f, cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ev.Run(m)
		if err != nil {
			t.Fatal(err)
		}
		ev.Close()

		blk, err := nn.UploadGraph(b, in)
		if err != nil {
			t.Fatal(err)
		}
		tp := autograd.NewTape(b)
		xs, err := autograd.NewSparseInput(b, f.Rows, f.Cols, f.Sparse.Indptr, f.Sparse.Indices, f.Sparse.Values)
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.ForwardSparse(tp, xs, []*nn.Block{blk, blk}, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Score(b, out.Value, out.Rows, out.Cols, DatasetSplits(ds))
		if err != nil {
			t.Fatal(err)
		}
		tp.Release()
		xs.Free(b)
		blk.Free()
		nn.FreeParams(b, m.Params())
		if got != want {
			t.Errorf("%s: layer-wise tally %+v, one-pass %+v", kind, got, want)
		}
		if got.Count[SplitTest] != int64(len(ds.Test)) {
			t.Errorf("%s: %d test nodes counted, want %d", kind, got.Count[SplitTest], len(ds.Test))
		}
	}
}
