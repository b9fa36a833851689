package multi

import (
	"context"
	"math"
	"testing"

	"github.com/strata-gnn/strata/dsp/engine"
	"github.com/strata-gnn/strata/fullgraph"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/tensor/backend"
)

// TestGPUMatchesCPU needs two CUDA GPUs (it skips without them): link
// prediction on cuda:0,1 in the DSP engine (collective sampling on the
// GPUs, target links removed on the GPUs, NCCL) and with the
// full-graph trainer gives the losses of cpu:2 (to 1e-3 relative: the
// GPUs sum in other orders) and its test AUC within 0.01.
func TestGPUMatchesCPU(t *testing.T) {
	gs := gputest.Devices(t, 2)
	bs := []backend.Backend{gs[0], gs[1]}
	ds := cora(t)
	check := func(name string, got, want *link.Report) {
		t.Helper()
		for e := range want.Epochs {
			a, b := got.Epochs[e].Loss, want.Epochs[e].Loss
			if d := math.Abs(a-b) / math.Max(math.Abs(b), 1e-12); !(d <= 1e-3) {
				t.Fatalf("%s epoch %d: loss %.7f on the GPUs, %.7f on cpu:2", name, e+1, a, b)
			}
		}
		if math.Abs(got.Test.AUC-want.Test.AUC) > 0.01 {
			t.Fatalf("%s: test AUC %.4f on the GPUs, %.4f on cpu:2", name, got.Test.AUC, want.Test.AUC)
		}
		t.Logf("%s: losses within 1e-3 of cpu:2's; test %s (cpu:2 AUC %.4f)", name, link.MetricsLine(got.Test, 50), want.Test.AUC)
	}
	cfg := quickSAGE(3)
	want := runDSP(t, ds, cfg, 2, nil)
	got, _, err := RunDSP(context.Background(), ds, cfg, engine.Defaults(cfg.Model, 2), engine.Options{Backends: bs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("dsp sage", got, want)

	gcn := link.Defaults("gcn")
	gcn.Epochs = 10
	wantFG, _ := runFG(t, ds, gcn, 2, nil)
	fc := fullgraph.Defaults("gcn")
	gotFG, _, err := RunFullGraph(context.Background(), ds, gcn, fc, fullgraph.Options{Backends: bs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("fullgraph gcn", gotFG, wantFG)
}
