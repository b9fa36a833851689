package fullgraph

import (
	"testing"
)

// TestConstantFeaturesSkipExactly: with dense features narrower than the
// hidden layer, SAGE's first payload is the (dropped-out) features. With
// staleness each block of it is sent once, dropout-free, and the
// receivers draw the owners' masks themselves, so with a zero variation
// bound (nothing else is skipped) the run equals the exact one bit for
// bit, for global and local masks, while layer 0 sends nothing after the
// first epoch.
func TestConstantFeaturesSkipExactly(t *testing.T) {
	ds := tiny(t)
	epochs := 6
	for _, masks := range []string{MasksGlobal, MasksLocal} {
		cfg := Defaults(SAGE)
		cfg.Hidden, cfg.Layers, cfg.Epochs, cfg.Masks = 32, 2, epochs, masks
		want := run(t, ds, cfg, 3)
		cfg.Staleness = Staleness{Enabled: true, EpochBound: 3, Epsilon: 0}
		got := run(t, ds, cfg, 3)
		checkBounds(t, got, cfg.Staleness)
		for e := range want.Epochs {
			if got.Epochs[e].Loss != want.Epochs[e].Loss || got.Epochs[e].TestAccuracy != want.Epochs[e].TestAccuracy {
				t.Fatalf("%s masks, epoch %d: loss %v acc %v with staleness, exact %v %v", masks, e+1,
					got.Epochs[e].Loss, got.Epochs[e].TestAccuracy, want.Epochs[e].Loss, want.Epochs[e].TestAccuracy)
			}
		}
		for _, b := range got.Comm.Blocks {
			wantSent := int64(epochs)
			if b.Layer == 0 {
				wantSent = 1
			}
			if b.Sent != wantSent || b.MaxAge != 0 {
				t.Errorf("%s masks: layer %d block %d sent %d times (want %d), max age %d", masks, b.Layer, b.Block, b.Sent, wantSent, b.MaxAge)
			}
		}
		if got.Comm.BytesSent >= want.Comm.BytesSent || got.Comm.EvalBytes >= want.Comm.EvalBytes {
			t.Errorf("%s masks: %d broadcast and %d evaluation bytes sent, exact %d and %d", masks,
				got.Comm.BytesSent, got.Comm.EvalBytes, want.Comm.BytesSent, want.Comm.EvalBytes)
		}
	}
}

// TestParamDrift: the variation bound on the parameters' change. The
// drift is the same for every block of a layer (the replicas agree), it
// grows while a block is cached and resets when it is sent, the bounds
// hold, and on cora it skips more than the embedding drift, whose
// dropout noise floor on the hidden layer exceeds the bound.
func TestParamDrift(t *testing.T) {
	ds := cora(t)
	epochs := 30
	if testing.Short() {
		epochs = 12
	}
	cfg := Defaults(GCN)
	cfg.Epochs = epochs
	cfg.Staleness = DefaultStaleness()
	emb := run(t, ds, cfg, 4)
	cfg.Staleness.Drift = DriftParams
	par := run(t, ds, cfg, 4)
	checkBounds(t, par, cfg.Staleness)
	byLayer := map[int]BlockStats{}
	for _, b := range par.Comm.Blocks {
		if first, ok := byLayer[b.Layer]; ok {
			if b.MeanDrift != first.MeanDrift || b.Sent != first.Sent {
				t.Errorf("layer %d: block %d drift %v sent %d, block 0 %v %d", b.Layer, b.Block, b.MeanDrift, b.Sent, first.MeanDrift, first.Sent)
			}
		} else {
			byLayer[b.Layer] = b
		}
		if !(b.MaxDrift > 0) {
			t.Errorf("layer %d block %d: max drift %v", b.Layer, b.Block, b.MaxDrift)
		}
	}
	t.Logf("avoided: embedding drift %.1f%%, parameter drift %.1f%%; test %.4f / %.4f",
		100*emb.Comm.AvoidedFraction, 100*par.Comm.AvoidedFraction, emb.TestAccuracy, par.TestAccuracy)
	if par.Comm.AvoidedFraction <= emb.Comm.AvoidedFraction {
		t.Errorf("parameter drift avoided %.3f of the bytes, embedding drift %.3f", par.Comm.AvoidedFraction, emb.Comm.AvoidedFraction)
	}
	// Still training: above chance and near the embedding drift's run
	// after as many epochs (30 epochs: 0.6150 against 0.6180; GCN's
	// reproduction needs 200).
	if floor := map[bool]float64{false: 0.55, true: 0.3}[testing.Short()]; par.TestAccuracy < floor || par.TestAccuracy < emb.TestAccuracy-0.03 {
		t.Errorf("test accuracy %.4f after %d epochs: want >= %.2f and within 3 points of the embedding drift's %.4f", par.TestAccuracy, epochs, floor, emb.TestAccuracy)
	}
}
