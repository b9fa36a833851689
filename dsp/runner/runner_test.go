package runner

import (
	"context"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

var (
	coraOnce sync.Once
	coraDS   *dataset.Dataset
	coraErr  error
)

// cora loads the built-in Cora once; runs never modify it.
func cora(t testing.TB) *dataset.Dataset {
	t.Helper()
	coraOnce.Do(func() { coraDS, coraErr = builtin.Load("cora") })
	if coraErr != nil {
		t.Fatal(coraErr)
	}
	return coraDS
}

// TestOneDeviceEqualsTrainer: on one device the pipeline, the collective
// sampler, the feature cache and the gradient all-reduce change nothing:
// every batch loss and every accuracy equals the single-device trainer's,
// bit for bit.
func TestOneDeviceEqualsTrainer(t *testing.T) {
	tc := train.Defaults(train.SAGE)
	tc.Epochs = 4
	if testing.Short() {
		tc.Epochs = 1
	}
	oneDeviceEqualsTrainer(t, cora(t), tc)
}

// TestOneDeviceEqualsTrainerDense: the same with dense (signed, not
// row-normalized) features of a generated graph and sampled evaluation.
func TestOneDeviceEqualsTrainerDense(t *testing.T) {
	tc := train.Defaults(train.SAGE)
	tc.Epochs = 2
	tc.Hidden = 8
	tc.Eval, tc.EvalFanouts, tc.EvalBatchSize = train.Sampled, []int{5, 5}, 500
	oneDeviceEqualsTrainer(t, tiny(t), tc)
}

func tiny(t testing.TB) *dataset.Dataset {
	t.Helper()
	cfg, err := gen.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := gen.Generate(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func oneDeviceEqualsTrainer(t *testing.T, ds *dataset.Dataset, tc train.Config) {
	t.Helper()
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := train.Run(context.Background(), ds, tc, train.Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Train: tc, Devices: 1, CacheBytes: 100 * 1433 * 4}
	got, err := Run(context.Background(), ds, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Epochs) != len(want.Epochs) {
		t.Fatalf("%d epochs, want %d", len(got.Epochs), len(want.Epochs))
	}
	for e := range want.Epochs {
		g, w := got.Epochs[e], want.Epochs[e]
		if len(g.BatchLosses) != len(w.BatchLosses) {
			t.Fatalf("epoch %d: %d batches, want %d", e+1, len(g.BatchLosses), len(w.BatchLosses))
		}
		for i := range w.BatchLosses {
			if g.BatchLosses[i] != w.BatchLosses[i] {
				t.Fatalf("epoch %d batch %d: loss %v, want %v", e+1, i, g.BatchLosses[i], w.BatchLosses[i])
			}
		}
		if g.ValAccuracy != w.ValAccuracy || g.TestAccuracy != w.TestAccuracy || g.TrainAccuracy != w.TrainAccuracy || g.ValLoss != w.ValLoss {
			t.Fatalf("epoch %d: accuracies %+v, want %+v", e+1, g, w)
		}
	}
}
