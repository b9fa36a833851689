package gpurun

import (
	"context"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dsp/runner"
	"github.com/strata-gnn/strata/train"
)

// TestSparseFeaturesDropoutMatchesHostRunner: on Cora's bag-of-words
// features the host runner keeps a batch's rows sparse (the first layer an
// SpMM) and this engine keeps them dense; with dropout on, both draw the
// dense rows' masks (nn.ForwardSparseAsDense on the host), so every batch
// loss agrees up to summation order on 1 and 2 devices. (The host runner
// used to draw its input masks over the non-zeros: the losses differed by
// about 1% from the first epoch on.)
func TestSparseFeaturesDropoutMatchesHostRunner(t *testing.T) {
	ds, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{1, 2} {
		cfg := Defaults(train.SAGE, k)
		cfg.Train.Epochs = 2
		cfg.Train.Hidden = 16
		cfg.WaitTimeout = 20 * time.Second
		cfg.CommTimeout = 30 * time.Second
		if cfg.Train.Dropout <= 0 {
			t.Fatalf("dropout %v: the test needs dropout on", cfg.Train.Dropout)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		want, err := runner.Run(ctx, ds, cfg.Config, runner.Options{})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		got, err := Run(ctx, ds, cfg, Options{Backends: cpus(t, k)})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if !want.DSP.SparseFeatures {
			t.Fatal("Cora's features are not sparse: the test does not reach the sparse path")
		}
		checkMatchesHost(t, k, want, got)
	}
}
