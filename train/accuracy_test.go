package train

import (
	"context"
	"fmt"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// Accuracy tests reproduce published results on the standard Planetoid
// splits. The headline is test accuracy at the best-validation epoch, the
// papers' protocol. The whole-graph reproductions (GCN on Cora and
// CiteSeer, GAT on Cora) are package fullgraph's, which trains the whole
// graph; this one is the sampled trainer's.

func cora(t *testing.T) *dataset.Dataset {
	t.Helper()
	ds, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// seedsAccuracy trains cfg with seeds 1..n and returns the test
// accuracies. Results are kept for the test binary (the runs are
// deterministic), so the precision test reuses fp32's.
func seedsAccuracy(t *testing.T, ds *dataset.Dataset, cfg Config, n int) (mean float64, accs []float64) {
	t.Helper()
	key := fmt.Sprintf("%s %d %+v", ds.Name, n, cfg)
	if r, ok := accuracyRuns[key]; ok {
		return r.mean, r.accs
	}
	b, err := cpu.New(cpu.Options{Precision: cfg.Prec()})
	if err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= n; s++ {
		cfg.Seed = uint64(s)
		rep, err := Run(context.Background(), ds, cfg, Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		accs = append(accs, rep.TestAccuracy)
		mean += rep.TestAccuracy / float64(n)
	}
	t.Logf("%s %s on %s at %s, %d seeds: mean test accuracy %.4f %v", cfg.Model, cfg.Mode, ds.Name, cfg.Prec(), n, mean, accs)
	accuracyRuns[key] = accuracyRun{mean, accs}
	return mean, accs
}

type accuracyRun struct {
	mean float64
	accs []float64
}

var accuracyRuns = map[string]accuracyRun{}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("accuracy reproduction: skipped in -short mode")
	}
}

// TestAccuracySampledSAGECora checks the product's default run (strata
// train with no flags): sampled mini-batch GraphSAGE on the built-in Cora.
// Every seed must reach 0.78 and the mean 0.79.
func TestAccuracySampledSAGECora(t *testing.T) {
	skipShort(t)
	cfg := Defaults(SAGE)
	if cfg.Mode != Sampled {
		t.Fatalf("sage default mode %q, want sampled", cfg.Mode)
	}
	mean, accs := seedsAccuracy(t, cora(t), cfg, 10)
	if mean < 0.79 {
		t.Fatalf("sampled GraphSAGE on cora: mean test accuracy %.4f < 0.79", mean)
	}
	for i, a := range accs {
		if a < 0.78 {
			t.Fatalf("sampled GraphSAGE on cora, seed %d: test accuracy %.4f < 0.78", i+1, a)
		}
	}
}

// PrecisionSlack is how far (in accuracy, 0.005 = half a point) the mean
// test accuracy at tf32 or bf16 may fall below fp32's over the same seeds.
const PrecisionSlack = 0.005

// TestAccuracyPrecisionSAGECora: the default run (sampled GraphSAGE on
// Cora) at --precision tf32 and bf16 (CPU emulation: rounded products,
// bfloat16 features) reaches, over 10 seeds, a mean test accuracy no more
// than half a point below fp32's.
func TestAccuracyPrecisionSAGECora(t *testing.T) {
	skipShort(t)
	ds := cora(t)
	cfg := Defaults(SAGE)
	ref, _ := seedsAccuracy(t, ds, cfg, 10)
	for _, p := range []string{"tf32", "bf16"} {
		cfg.Precision = p
		mean, _ := seedsAccuracy(t, ds, cfg, 10)
		t.Logf("%s: %+.2f points from fp32", p, 100*(mean-ref))
		if mean < ref-PrecisionSlack {
			t.Errorf("sampled GraphSAGE on cora at %s: mean test accuracy %.4f, more than half a point below fp32's %.4f", p, mean, ref)
		}
	}
}
