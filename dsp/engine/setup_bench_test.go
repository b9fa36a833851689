package engine

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/train"
)

// BenchmarkSetupFirstBatch times what issue 15 asks to cut: from opening
// the dataset in $STRATA_BENCH_DATASET (checksums verified, as strata
// train does) to the first training step, on 4 CPU virtual devices with
// the command line's defaults (`strata train --devices cpu:4 --partition
// range --eval sampled`: feature cache for every row, auto policy); the
// run is stopped there. It uses only Run and OnBatch, so the same file
// times builds from before the setup phases too. Run it with
// -test.benchtime 1x: every iteration opens and sets up anew.
func BenchmarkSetupFirstBatch(b *testing.B) {
	dir := os.Getenv("STRATA_BENCH_DATASET")
	if dir == "" {
		b.Skip("set STRATA_BENCH_DATASET to a dataset directory")
	}
	const k = 4
	cfg := Defaults(train.SAGE, k)
	cfg.Partition, cfg.CachePolicy = Range, cache.Auto
	cfg.Train.Epochs, cfg.Train.Hidden, cfg.Train.LR = 1, 64, 0.01
	cfg.Train.Eval, cfg.Train.EvalFanouts = train.Sampled, []int{10, 10}
	var opened, first time.Duration
	for range b.N {
		start := time.Now()
		ds, err := dataset.Open(dir, dataset.OpenOptions{Quiet: true})
		if err != nil {
			b.Fatal(err)
		}
		opened = time.Since(start)
		ctx, cancel := context.WithCancel(context.Background())
		var once sync.Once
		_, err = Run(ctx, ds, cfg, Options{Backends: cpus(b, k), OnBatch: func(rank, _, _ int, _ float64) {
			if rank == 0 {
				once.Do(func() { first = time.Since(start); cancel() })
			}
		}})
		cancel()
		ds.Close()
		if first == 0 {
			b.Fatalf("no first batch: %v", err)
		}
	}
	b.ReportMetric(opened.Seconds(), "open-s")
	b.ReportMetric(first.Seconds(), "first-batch-s")
}
