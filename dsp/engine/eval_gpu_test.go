package engine

import (
	"os"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/train"
)

// BenchmarkEvalFullGPU times the whole-graph evaluation on one GPU (the
// device engine's evaluation on device 0: train.Evaluator) of a 3-layer
// GraphSAGE 256 on the dataset in $STRATA_BENCH_DATASET: the first
// evaluation with the graph's and the features' uploads, then per
// evaluation the forward pass, the classes' download and the scoring,
// and a per-op device profile of one evaluation.
func BenchmarkEvalFullGPU(b *testing.B) {
	dir := os.Getenv("STRATA_BENCH_DATASET")
	if dir == "" {
		b.Skip("set STRATA_BENCH_DATASET to a dataset directory")
	}
	dev := gputest.One(b)
	ds, err := dataset.Open(dir, dataset.OpenOptions{Quiet: true, SkipChecksums: true})
	if err != nil {
		b.Fatal(err)
	}
	cfg := train.Defaults("sage")
	cfg.Layers, cfg.Hidden = 3, 256
	feats := train.NewDenseFeatures(ds.Features, int(ds.NumNodes()), ds.FeatDim, cfg.RowNorm)
	t0 := time.Now()
	ev, err := train.NewEvaluator(dev, ds, ds.InGraph(), feats, cfg.Common)
	if err != nil {
		b.Fatal(err)
	}
	defer ev.Close()
	model, err := nn.New(dev, cfg.ModelConfig(ds.FeatDim, ds.NumClasses))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ev.Run(model); err != nil { // warm-up: uploads, allocator, modules
		b.Fatal(err)
	}
	b.Logf("first evaluation with the uploads: %.3fs (%d nodes, %d edges, sparse %v: dense rows)", time.Since(t0).Seconds(),
		ds.NumNodes(), ds.Graph.NumEdges(), train.MostlyZero(feats.Dense))
	b.ResetTimer()
	for range b.N {
		if _, err := ev.Run(model); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := dev.StartProfile(); err != nil {
		b.Fatal(err)
	}
	if _, err := ev.Run(model); err != nil {
		b.Fatal(err)
	}
	ops, err := dev.StopProfile()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, o := range ops {
		total += o.Ms
	}
	b.Logf("profile of one evaluation: %.1f ms of device time", total)
	for i, o := range ops {
		if i == 15 {
			break
		}
		b.Logf("  %-40s %6d calls %9.2f ms", o.Name, o.Calls, o.Ms)
	}
}
