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
// device engine's evaluation on device 0) of a 3-layer GraphSAGE 256 on
// the dataset in $STRATA_BENCH_DATASET: newEvaluator (graph and
// features to the device), then per evaluation the forward pass, the
// logits' download and the host's scoring, and a per-op device profile
// of one forward pass.
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
	x, _, sparse := features(ds, cfg.RowNorm)
	t0 := time.Now()
	ev, err := newEvaluator(dev, ds, ds.InGraph(), x, &cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer ev.free()
	b.Logf("newEvaluator: %.3fs (%d nodes, %d edges, sparse %v: dense rows)", time.Since(t0).Seconds(), ds.NumNodes(), ds.Graph.NumEdges(), sparse)
	model, err := nn.New(dev, modelConfig(cfg, ds.FeatDim, ds.NumClasses))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ev.run(model); err != nil { // warm-up: allocator, modules
		b.Fatal(err)
	}
	var fwd, score time.Duration
	b.ResetTimer()
	for range b.N {
		_, f, s, err := ev.runFull(model)
		if err != nil {
			b.Fatal(err)
		}
		fwd, score = fwd+f, score+s
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(fwd.Seconds()/n*1e3, "forward+download-ms")
	b.ReportMetric(score.Seconds()/n*1e3, "score-ms")
	if err := dev.StartProfile(); err != nil {
		b.Fatal(err)
	}
	if _, err := ev.run(model); err != nil {
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
