package fullgraph

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// envBenchDataset names a Strata dataset directory for the products-shape
// GPU benchmarks (the same variable as sample/gpusample's), e.g. after
// 'strata gen /tmp/products --preset products'.
const envBenchDataset = "STRATA_BENCH_DATASET"

// benchEpochs trains cfg for b.N epochs after one warm-up epoch (which
// builds transposes, compiles kernels and fills the allocator's cache)
// and reports the mean training epoch time without evaluation, the peak
// memory, the activation memory and the broadcast traffic.
func benchEpochs(b *testing.B, ds *dataset.Dataset, cfg Config, bs []backend.Backend) *Report {
	cfg.Epochs = b.N + 1
	cfg.EvalEvery = maxEpochs // only after the last epoch
	b.ResetTimer()
	rep, err := Run(context.Background(), ds, cfg, Options{Backends: bs})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	var sec float64
	var bytes int64
	for _, e := range rep.Epochs[1:] {
		sec += e.Seconds
		bytes += e.BytesSent
	}
	n := float64(len(rep.Epochs) - 1)
	b.ReportMetric(1e3*sec/n, "ms/epoch")
	b.ReportMetric(float64(bytes)/n/(1<<20), "MiB_bcast/epoch")
	b.ReportMetric(100*rep.Comm.AvoidedFraction, "%avoided")
	var peak, act int64
	for _, p := range rep.Memory.PeakBytes {
		peak = max(peak, p)
	}
	for _, a := range rep.Memory.ActivationBytes {
		act += a
	}
	b.ReportMetric(float64(peak)/(1<<30), "peak_GiB")
	b.ReportMetric(float64(act)/(1<<30), "act_GiB")
	b.ReportMetric(100*rep.LastTestAcc, "%test")
	return rep
}

var (
	smallOnce sync.Once
	smallDS   *dataset.Dataset
	smallErr  error
)

// BenchmarkEpochCPU: 2-layer GraphSAGE hidden 64 on the generated
// "small" graph (10,000 nodes, ~200k edges, 32 features) on 1 and 4 CPU
// virtual devices, exact and with skip-broadcast.
func BenchmarkEpochCPU(b *testing.B) {
	smallOnce.Do(func() {
		c, err := gen.Preset("small")
		if err != nil {
			smallErr = err
			return
		}
		smallDS, smallErr = gen.Generate(c, nil)
	})
	if smallErr != nil {
		b.Fatal(smallErr)
	}
	for _, tc := range []struct {
		p     int
		stale bool
	}{{1, false}, {4, false}, {4, true}} {
		name := fmt.Sprintf("devices=%d", tc.p)
		if tc.p > 1 {
			name += map[bool]string{false: "/exact", true: "/skip"}[tc.stale]
		}
		b.Run(name, func(b *testing.B) {
			cfg := Defaults(SAGE)
			if tc.stale {
				cfg.Staleness = DefaultStaleness()
			}
			benchEpochs(b, smallDS, cfg, devices(b, tc.p))
		})
	}
}

var (
	benchOnce sync.Once
	benchDS   *dataset.Dataset
	benchErr  error
)

func benchDataset(b *testing.B) *dataset.Dataset {
	dir := os.Getenv(envBenchDataset)
	if dir == "" {
		b.Skipf("set %s to a dataset directory (e.g. strata gen /tmp/products --preset products)", envBenchDataset)
	}
	benchOnce.Do(func() { benchDS, benchErr = dataset.Open(dir, dataset.OpenOptions{Quiet: true, SkipChecksums: true}) })
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchDS
}

var (
	gpuMu   sync.Mutex
	gpuDevs = map[int]*cuda.Device{}
)

// gpus opens CUDA devices 0..n-1, skipping the benchmark when there are
// fewer.
func gpus(b *testing.B, n int) []backend.Backend {
	gpuMu.Lock()
	defer gpuMu.Unlock()
	var bs []backend.Backend
	for i := 0; i < n; i++ {
		d, ok := gpuDevs[i]
		if !ok {
			var err error
			if d, err = cuda.Open(i, cuda.Options{}); err != nil {
				b.Skipf("%d GPUs needed, cuda:%d: %.120s", n, i, err.Error())
			}
			gpuDevs[i] = d
		}
		bs = append(bs, d)
	}
	return bs
}

// BenchmarkProductsSAGE: full-graph 3-layer GraphSAGE-mean, hidden 256,
// dropout 0.5, Adam, on the products-shape dataset of
// $STRATA_BENCH_DATASET: one GPU (target: an epoch within 0.2 s), and 2
// and 4 GPUs exact and with skip-broadcast (default bounds), with
// per-device dropout masks. Metrics: ms per training epoch, broadcast
// MiB per epoch and the share avoided, peak and activation memory (the
// run's own count; dev_peak_GiB is the CUDA allocator's high-water mark,
// cache included), and the test accuracy after the run's epochs (for
// accuracy, run with -benchtime 100x or use strata train).
func BenchmarkProductsSAGE(b *testing.B) {
	ds := benchDataset(b)
	for _, tc := range []struct {
		p     int
		stale bool
	}{{1, false}, {2, false}, {2, true}, {4, false}, {4, true}} {
		name := fmt.Sprintf("gpus=%d", tc.p)
		if tc.p > 1 {
			name += map[bool]string{false: "/exact", true: "/skip"}[tc.stale]
		}
		b.Run(name, func(b *testing.B) {
			bs := gpus(b, tc.p)
			cfg := Defaults(SAGE)
			cfg.Layers, cfg.Hidden, cfg.LR, cfg.WeightDecay = 3, 256, 0.003, 0
			cfg.Masks = MasksLocal
			if tc.stale {
				cfg.Staleness = DefaultStaleness()
			}
			benchEpochs(b, ds, cfg, bs)
			var devPeak int64
			for _, d := range bs {
				devPeak = max(devPeak, d.(*cuda.Device).Stats().PeakBytes)
			}
			b.ReportMetric(float64(devPeak)/(1<<30), "dev_peak_GiB")
		})
	}
}
