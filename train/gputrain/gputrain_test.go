package gputrain

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/dataset/importer"
	"github.com/strata-gnn/strata/fullgraph"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/testkit"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

// gpu returns GPU 0, skipping the test without one.
var gpu = gputest.One

func cpuBackend(t testing.TB) backend.Backend {
	t.Helper()
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func run(t *testing.T, ds *dataset.Dataset, cfg train.Config, opts train.Options) *train.Report {
	t.Helper()
	rep, err := train.Run(context.Background(), ds, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// runFull trains the whole graph on b.
func runFull(t *testing.T, ds *dataset.Dataset, cfg fullgraph.Config, b backend.Backend) *fullgraph.Report {
	t.Helper()
	rep, err := fullgraph.Run(context.Background(), ds, cfg, fullgraph.Options{Backends: []backend.Backend{b}})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestNeedsCUDA: a back end without device sampling (the CPU's) is
// refused, naming the capabilities it lacks; so is none.
func TestNeedsCUDA(t *testing.T) {
	_, err := New(Options{})(cpuBackend(t), nil, nil, 0, 0, nil)
	if err == nil || !strings.Contains(err.Error(), "cpu cannot sample") || !strings.Contains(err.Error(), "backend.Kernels") {
		t.Fatalf("a cpu back end: %v", err)
	}
	if _, err := New(Options{})(nil, nil, nil, 0, 0, nil); err == nil {
		t.Fatal("no back end was accepted")
	}
}

// TestSampledMatchesCPU trains sampled 3-layer GraphSAGE on a generated
// graph with dense features twice with the same seed: on the CPU (host
// sampler) and on cuda:0 with this package's source (GPU sampler and
// feature store, part of the rows cold). The GPU sampler draws the same
// batches and dropout masks are the same, so the losses agree up to
// float rounding.
func TestSampledMatchesCPU(t *testing.T) {
	d := gpu(t)
	cfg0, err := gen.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := gen.Generate(cfg0, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := train.Defaults(train.SAGE)
	cfg.Layers, cfg.Fanouts, cfg.BatchSize, cfg.Epochs, cfg.Hidden = 3, []int{15, 10, 5}, 64, 3, 64
	ref := run(t, ds, cfg, train.Options{Backend: cpuBackend(t)})
	var src *Source
	budget := int64(4*ds.NumNodes()) + int64(ds.NumNodes())*int64(ds.FeatDim) // about a quarter of the rows hot
	mk := New(Options{FeatureBudget: budget})
	got := run(t, ds, cfg, train.Options{Backend: d, Batches: func(b backend.Backend, in *graph.CSR, x []float32, rows, cols int, f []int) (train.BatchSource, error) {
		s, err := mk(b, in, x, rows, cols, f)
		if err == nil {
			src = s.(*Source)
		}
		return s, err
	}})
	if src == nil {
		t.Fatal("the GPU source was not used")
	}
	if h := src.Features().HotRows(); h == 0 || h >= int(ds.NumNodes()) {
		t.Fatalf("%d of %d rows hot, want some but not all", h, ds.NumNodes())
	}
	var la, lb []float64
	for i := range ref.Epochs {
		la = append(la, ref.Epochs[i].BatchLosses...)
		lb = append(lb, got.Epochs[i].BatchLosses...)
	}
	if len(la) != len(lb) || len(la) == 0 {
		t.Fatalf("%d vs %d losses", len(la), len(lb))
	}
	worst := 0.0
	for i := range la {
		worst = max(worst, math.Abs(la[i]-lb[i])/math.Abs(la[i]))
	}
	t.Logf("%d batches: first loss cpu %.6f gpu %.6f, last cpu %.6f gpu %.6f, worst relative difference %.2e; test accuracy cpu %.4f gpu %.4f",
		len(la), la[0], lb[0], la[len(la)-1], lb[len(lb)-1], worst, ref.TestAccuracy, got.TestAccuracy)
	if d0 := math.Abs(la[0]-lb[0]) / la[0]; d0 > 1e-4 {
		t.Fatalf("first batch: loss %v on the GPU, %v on the CPU", lb[0], la[0])
	}
	if worst > 2e-2 {
		t.Fatalf("losses drift apart: worst relative difference %.3g", worst)
	}
	if math.Abs(ref.TestAccuracy-got.TestAccuracy) > 0.02 {
		t.Fatalf("test accuracy %.4f on the GPU, %.4f on the CPU", got.TestAccuracy, ref.TestAccuracy)
	}
}

// EnvParitySeeds sets how many seeds TestAccuracyParity runs per model
// and dataset (default 3).
const EnvParitySeeds = "STRATA_PARITY_SEEDS"

// TestAccuracyParity trains GCN and GAT (paper settings, full batch:
// package fullgraph on one device, as 'strata train --mode full') on
// Cora and CiteSeer with the same seeds on the CPU and on cuda:0 and
// requires the mean test accuracies to agree within 1 point and each
// seed's within 2.5 points: the runs differ only in float rounding.
func TestAccuracyParity(t *testing.T) {
	if testing.Short() {
		t.Skip("accuracy parity: skipped in -short mode")
	}
	d := gpu(t)
	n := 3
	if v, err := strconv.Atoi(os.Getenv(EnvParitySeeds)); err == nil && v > 0 {
		n = v
	}
	cora, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	citeseer, err := importer.LoadShared(filepath.Join(testkit.DatasetsDir(t), "citeseer"), importer.Options{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	c := cpuBackend(t)
	for _, ds := range []*dataset.Dataset{cora, citeseer} {
		for _, model := range []string{train.GCN, train.GAT} {
			cfg := fullgraph.Defaults(model)
			var mc, mg float64
			var accC, accG []float64
			for s := 1; s <= n; s++ {
				cfg.Seed = uint64(s)
				rc := runFull(t, ds, cfg, c)
				rg := runFull(t, ds, cfg, d)
				accC, accG = append(accC, rc.TestAccuracy), append(accG, rg.TestAccuracy)
				mc += rc.TestAccuracy / float64(n)
				mg += rg.TestAccuracy / float64(n)
			}
			t.Logf("%s on %s, seeds 1..%d: test accuracy cpu %.4f %v, cuda %.4f %v", model, ds.Name, n, mc, accC, mg, accG)
			if math.Abs(mc-mg) > 0.01 {
				t.Errorf("%s on %s: mean test accuracy %.4f on cuda, %.4f on cpu", model, ds.Name, mg, mc)
			}
			for i := range accC {
				if math.Abs(accC[i]-accG[i]) > 0.025 {
					t.Errorf("%s on %s seed %d: test accuracy %.4f on cuda, %.4f on cpu", model, ds.Name, i+1, accG[i], accC[i])
				}
			}
		}
	}
}
