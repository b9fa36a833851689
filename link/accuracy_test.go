package link

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/importer"
	"github.com/strata-gnn/strata/internal/testkit"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

// cpuBackend is a CPU back end on gonum's products, whose rows do not
// depend on the row count (chunked and whole results are compared bit
// for bit; OpenBLAS's blocking, where it loads, depends on it).
func cpuBackend(t testing.TB) backend.Backend {
	t.Helper()
	b, err := cpu.New(cpu.Options{Gemm: cpu.GemmGo})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Accuracy tests reproduce GAE's link-prediction protocol (Kipf & Welling
// 2016: 85/5/10 random edge split, held-out edges removed from message
// passing, as many random non-edges as test edges): GAE reports test AUC
// 0.910 on Cora and 0.895 on CiteSeer. Each seed draws its own split.

// seedsAUC trains cfg with seeds 1..n and returns the mean test AUC.
func seedsAUC(t *testing.T, ds *dataset.Dataset, cfg Config, n int) float64 {
	t.Helper()
	b := cpuBackend(t)
	var mean float64
	var aucs []float64
	for s := 1; s <= n; s++ {
		cfg.Seed = uint64(s)
		rep, err := Run(context.Background(), ds, cfg, Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		aucs = append(aucs, rep.Test.AUC)
		if testing.Verbose() {
			for i := 0; i < len(rep.Epochs); i += max(1, len(rep.Epochs)/10) {
				e := rep.Epochs[i]
				t.Logf("  epoch %d loss %.4f val auc %.4f loss %.4f test auc %.4f", e.Epoch, e.Loss, e.Val.AUC, e.Val.Loss, e.Test.AUC)
			}
		}
		mean += rep.Test.AUC / float64(n)
		t.Logf("seed %d: epoch %d val %s test %s (%.1fs)", s, rep.SelectedEpoch, MetricsLine(rep.Val, cfg.HitsK), MetricsLine(rep.Test, cfg.HitsK), rep.TotalSeconds)
	}
	t.Logf("%s %s %s on %s, %d seeds: mean test AUC %.4f %v", cfg.Model, cfg.Mode, cfg.Decoder, ds.Name, n, mean, aucs)
	return mean
}

func citeseerDS(t *testing.T) *dataset.Dataset {
	t.Helper()
	ds, err := importer.LoadShared(filepath.Join(testkit.DatasetsDir(t), "citeseer"), importer.Options{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("accuracy reproduction: skipped in -short mode")
	}
}

// TestAccuracyLinkGCNCora: GCN encoder, dot decoder, whole graph (the gcn
// defaults), 5 seeds: mean test AUC >= 0.90.
func TestAccuracyLinkGCNCora(t *testing.T) {
	skipShort(t)
	if mean := seedsAUC(t, cora(t), Defaults(train.GCN), 5); mean < 0.90 {
		t.Fatalf("GCN link prediction on cora: mean test AUC %.4f < 0.90", mean)
	}
}

// TestAccuracyLinkGCNCiteseer: the same on CiteSeer: mean >= 0.88.
func TestAccuracyLinkGCNCiteseer(t *testing.T) {
	skipShort(t)
	if mean := seedsAUC(t, citeseerDS(t), Defaults(train.GCN), 5); mean < 0.88 {
		t.Fatalf("GCN link prediction on citeseer: mean test AUC %.4f < 0.88", mean)
	}
}

// TestAccuracyLinkSAGECora checks 'strata train --task link' with no
// other flag: sampled GraphSAGE, edge-seeded batches, 3 seeds: mean test
// AUC >= 0.90.
func TestAccuracyLinkSAGECora(t *testing.T) {
	skipShort(t)
	if mean := seedsAUC(t, cora(t), Defaults(train.SAGE), 3); mean < 0.90 {
		t.Fatalf("sampled GraphSAGE link prediction on cora: mean test AUC %.4f < 0.90", mean)
	}
}
