package multi

import (
	"context"
	"math"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dsp/engine"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

func cora(t testing.TB) *dataset.Dataset {
	t.Helper()
	ds, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func cpus(t testing.TB, k int) []backend.Backend {
	t.Helper()
	out := make([]backend.Backend, k)
	for i := range out {
		b, err := cpu.New(cpu.Options{})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

func dspConfig(k int) engine.Config {
	c := engine.Defaults("sage", k)
	return c
}

func runDSP(t testing.TB, ds *dataset.Dataset, cfg link.Config, k int, mod func(*engine.Config, *engine.Options)) *link.Report {
	t.Helper()
	dc := dspConfig(k)
	opts := engine.Options{Backends: cpus(t, k)}
	if mod != nil {
		mod(&dc, &opts)
	}
	rep, _, err := RunDSP(context.Background(), ds, cfg, dc, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestAccuracyDSPCora: GraphSAGE (link's defaults: sampled, batches of
// 1024 links, dot decoder) on Cora's 85/5/10 split, in the DSP engine on
// 1 and 4 CPU virtual devices, seeds 1-3: the mean test AUC on 4 devices
// is at least 0.90, and within noise (0.02) of 1 device's.
func TestAccuracyDSPCora(t *testing.T) {
	if testing.Short() {
		t.Skip("accuracy: about 10 minutes of CPU on 2 cores; run without -short")
	}
	ds := cora(t)
	mean := map[int]float64{}
	for _, k := range []int{1, 4} {
		for seed := uint64(1); seed <= 3; seed++ {
			cfg := link.Defaults("sage")
			cfg.Seed = seed
			rep := runDSP(t, ds, cfg, k, nil)
			t.Logf("%d devices, seed %d: test %s (epoch %d, %.1fs)", k, seed, link.MetricsLine(rep.Test, cfg.HitsK), rep.SelectedEpoch, rep.TotalSeconds)
			mean[k] += rep.Test.AUC / 3
		}
	}
	t.Logf("mean test AUC: 1 device %.4f, 4 devices %.4f", mean[1], mean[4])
	if mean[4] < 0.90 || math.Abs(mean[4]-mean[1]) > 0.02 {
		t.Fatalf("mean test AUC: 1 device %.4f, 4 devices %.4f: want >= 0.90 on 4 and within 0.02", mean[1], mean[4])
	}
}
