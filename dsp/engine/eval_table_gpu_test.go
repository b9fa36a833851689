package engine

import (
	"math"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// TestGPUEvalReadsFeatureCache: on 2 GPUs whose feature caches hold every
// row (replicated), the whole-graph evaluation reads layer 1's input from
// the caches' tables (through the trainer's alias of the loader's
// buffer) and scores every epoch as the run that uploads the features:
// the same accuracies, the validation loss to 1e-5 relative (both gather
// on the device; only the evaluation's input buffer differs). Skipped
// without 2 GPUs.
func TestGPUEvalReadsFeatureCache(t *testing.T) {
	cfg := small(2, 2)
	cfg.CachePolicy = cache.Replicate
	cfg.Train.Eval, cfg.Train.EvalFanouts = train.Full, nil
	var mu sync.Mutex
	passed := 0
	got := run(t, cfg, Options{Backends: gpus(t, 2), evalInputs: func(in []backend.Buffer) {
		mu.Lock()
		defer mu.Unlock()
		if len(in) == 2 && in[0] != nil && in[1] != nil {
			passed++
		}
	}})
	want := run(t, cfg, Options{Backends: gpus(t, 2), noEvalTable: true})
	if passed != cfg.Train.Epochs {
		t.Fatalf("%d of %d evaluations read the caches' tables", passed, cfg.Train.Epochs)
	}
	if len(got.Epochs) != len(want.Epochs) || len(got.Epochs) == 0 {
		t.Fatalf("%d epochs recorded, want %d", len(got.Epochs), len(want.Epochs))
	}
	for i, w := range want.Epochs {
		g := got.Epochs[i]
		if g.TrainAccuracy != w.TrainAccuracy || g.ValAccuracy != w.ValAccuracy || g.TestAccuracy != w.TestAccuracy ||
			math.Abs(g.ValLoss-w.ValLoss) > 1e-5*math.Abs(w.ValLoss) {
			t.Errorf("epoch %d: accuracies %.6f/%.6f/%.6f loss %.8f, uploading %.6f/%.6f/%.6f loss %.8f", i+1,
				g.TrainAccuracy, g.ValAccuracy, g.TestAccuracy, g.ValLoss, w.TrainAccuracy, w.ValAccuracy, w.TestAccuracy, w.ValLoss)
		}
	}
	t.Logf("test accuracy %.4f (uploading %.4f)", got.TestAccuracy, want.TestAccuracy)
}
