package link

import (
	"context"
	"testing"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/train"
)

// TestKeep: Options.Keep keeps the epoch the report selects (best
// validation AUC, or last) with the encoder's and the decoder's
// parameters, and the kept parameters score the validation and test
// pairs as that epoch's record says.
func TestKeep(t *testing.T) {
	ds := communities(t, 4, 30, 0.3, 0.02, 2)
	for _, rule := range []string{train.SelectBest, train.SelectLast} {
		cfg := quick(train.SAGE)
		cfg.Epochs, cfg.Decoder, cfg.Select, cfg.LR = 6, DecoderMLP, rule, 0.05
		keep := train.NewKeeper(rule)
		b := cpuBackend(t)
		rep, err := Run(context.Background(), ds, cfg, Options{Backend: b, Keep: keep})
		if err != nil {
			t.Fatal(err)
		}
		rec, params, note, ok := keep.Kept()
		if !ok || note != "" || rec.Epoch != rep.SelectedEpoch || rec.ValAccuracy != rep.Val.AUC || rec.TestAccuracy != rep.Test.AUC {
			t.Fatalf("%s: kept epoch %d (val %v, test %v, %q, %v); the report selected %d (val %v, test %v)",
				rule, rec.Epoch, rec.ValAccuracy, rec.TestAccuracy, note, ok, rep.SelectedEpoch, rep.Val.AUC, rep.Test.AUC)
		}
		if rule == train.SelectLast && rec.Epoch != cfg.Epochs {
			t.Fatalf("last kept epoch %d of %d", rec.Epoch, cfg.Epochs)
		}
		enc, err := nn.New(b, cfg.ModelConfig(ds.FeatDim, cfg.Hidden))
		if err != nil {
			t.Fatal(err)
		}
		dec, err := NewDecoder(b, cfg.Decoder, cfg.Hidden, 99) // other initial weights: the kept ones replace them
		if err != nil {
			t.Fatal(err)
		}
		ps := append(enc.Params(), dec.Params()...)
		if err := nn.LoadParams(b, ps, params); err != nil {
			t.Fatalf("%s: the kept parameters do not fit the encoder and decoder: %v", rule, err)
		}
		s, err := MakeSplit(ds, &cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		feats, err := train.NewFeatures(ds.Features, int(ds.NumNodes()), ds.FeatDim, cfg.RowNorm)
		if err != nil {
			t.Fatal(err)
		}
		x := train.NewInputs(b, feats)
		ev, err := NewEvaluator(b, s, x, nil, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		val, test, err := ev.Run(enc, dec)
		ev.Close()
		x.Free()
		nn.FreeParams(b, ps)
		if err != nil {
			t.Fatal(err)
		}
		if val != rep.Val || test != rep.Test {
			t.Fatalf("%s: the kept parameters score val %+v test %+v; the report's epoch %d %+v %+v", rule, val, test, rep.SelectedEpoch, rep.Val, rep.Test)
		}
	}
}
