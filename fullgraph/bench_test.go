package fullgraph

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
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
	cfg.EvalEvery = train.MaxEpochs // only after the last epoch
	b.ResetTimer()
	rep, err := Run(context.Background(), ds, cfg, Options{Backends: bs})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	report(b, rep, 1, len(rep.Epochs))
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

// gpus returns CUDA devices 0..n-1 (gputest: opened once per test
// binary, at STRATA_TEST_PRECISION, gpu.sh's FG_PRECISION), skipping
// when there are fewer.
func gpus(t testing.TB, n int) []backend.Backend {
	ds := gputest.Devices(t, n)
	bs := make([]backend.Backend, len(ds))
	for i, d := range ds {
		bs[i] = d
	}
	return bs
}

func envInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

var (
	partMu    sync.Mutex
	partCache = map[int]partitioned{}
	commCache = map[int][]comm.Comm{}
)

type partitioned struct {
	ds  *dataset.Dataset
	off []int64
	src string
}

// benchPartition returns ds renumbered into p blocks, once per p: with
// $STRATA_BENCH_ORDER (a 'strata partition' file of k parts, k a
// multiple of p) renumbered by it, every k/p consecutive parts one block
// (so each block's nodes are also ordered by part: neighbors lie close in
// memory); else from $STRATA_BENCH_PARTS/p<P>.bin when it exists; else
// partitioned here (one block for p = 1).
func benchPartition(b *testing.B, ds *dataset.Dataset, p int) partitioned {
	partMu.Lock()
	defer partMu.Unlock()
	if pt, ok := partCache[p]; ok {
		return pt
	}
	t0 := time.Now()
	var pt partitioned
	var err error
	if path := os.Getenv("STRATA_BENCH_ORDER"); path != "" {
		var off []int64
		if pt.ds, off, err = ApplyPartitionFile(ds, path); err != nil {
			b.Fatal(err)
		}
		k := len(off) - 1
		if k%p != 0 {
			b.Fatalf("%s has %d parts, not a multiple of %d", path, k, p)
		}
		for i := 0; i <= p; i++ {
			pt.off = append(pt.off, off[i*(k/p)])
		}
		pt.src = fmt.Sprintf("%s, %d parts per block", path, k/p)
	} else if p == 1 {
		off, _ := RangeOffsets(int(ds.NumNodes()), 1)
		pt = partitioned{ds: ds, off: off, src: "one block"}
	}
	if dir := os.Getenv("STRATA_BENCH_PARTS"); dir != "" && pt.ds == nil {
		path := filepath.Join(dir, fmt.Sprintf("p%d.bin", p))
		if _, serr := os.Stat(path); serr == nil {
			pt.ds, pt.off, err = ApplyPartitionFile(ds, path)
			pt.src = path
		}
	}
	if pt.ds == nil && err == nil {
		pt.ds, pt.off, err = PartitionDataset(context.Background(), ds, p, PartitionMultilevel, 1)
		pt.src = "multilevel"
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("P=%d partition (%s): %.1fs", p, pt.src, time.Since(t0).Seconds())
	partCache[p] = pt
	return pt
}

// benchComms opens the device communicators of $STRATA_BENCH_COMM (auto
// by default) for bs, once per device count.
func benchComms(b *testing.B, bs []backend.Backend) []comm.Comm {
	partMu.Lock()
	defer partMu.Unlock()
	if cs, ok := commCache[len(bs)]; ok {
		return cs
	}
	kind := os.Getenv("STRATA_BENCH_COMM")
	// gpushm's STRATA_GPUSHM_* settings apply as in strata train.
	gso, _, err := gpushm.FromEnv(gpushm.Options{})
	if err != nil {
		b.Fatal(err)
	}
	cs, used, why, err := OpenDeviceComms(context.Background(), kind, bs, CommOptions{Timeout: 2 * time.Minute, GPUShm: gso})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d GPUs: device communicators %s (%s)", len(bs), used, why)
	commCache[len(bs)] = cs
	return cs
}

// BenchmarkProductsSAGE: full-graph 3-layer GraphSAGE-mean, hidden 256,
// dropout 0.5, Adam, on the products-shape dataset of
// $STRATA_BENCH_DATASET: one GPU (target: an epoch within 0.2 s), and 2
// and 4 GPUs exact and with skip-broadcast (default bounds), with
// per-device dropout masks, nodes by degree within each device's block
// ($STRATA_BENCH_NODE_ORDER=none keeps the dataset's order), and the
// device communicators of
// $STRATA_BENCH_COMM (auto: NCCL). Run with -benchtime 1x and the number
// of training epochs in $STRATA_BENCH_EPOCHS (default 5; the first is a
// warm-up and not timed), so every configuration is set up once.
// $STRATA_BENCH_PARTS names a folder of partition files p2.bin, p4.bin
// ('strata partition' output) to skip partitioning, $STRATA_BENCH_ORDER
// one file of k parts that orders the nodes for every device count (see
// benchPartition); with
// $STRATA_BENCH_PROFILE set, one more epoch is profiled on GPU 0 and its
// device time per op is logged (-test.v).
//
// $STRATA_BENCH_LR overrides the learning rate (0.003).
//
// Metrics: ms per training epoch, broadcast and gradient MiB per epoch
// and the share of broadcast bytes avoided, the run's peak and activation
// memory per device (its own count) and the CUDA allocator's high-water
// mark (dev_peak_GiB, cache included), test accuracy after the last epoch.
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
			for _, be := range bs {
				d, ok := be.(backend.Memory)
				if !ok {
					b.Fatalf("%s has no allocator counters (backend.Memory)", be.Name())
				}
				if err := d.ReleaseCache(); err != nil {
					b.Fatal(err)
				}
				d.ResetPeak()
			}
			cfg := Defaults(SAGE)
			cfg.Layers, cfg.Hidden, cfg.LR, cfg.WeightDecay = 3, 256, 0.003, 0
			if v := os.Getenv("STRATA_BENCH_LR"); v != "" {
				lr, err := strconv.ParseFloat(v, 64)
				if err != nil || !(lr > 0) {
					b.Fatalf("STRATA_BENCH_LR=%q", v)
				}
				cfg.LR = lr
			}
			cfg.Masks, cfg.Order = MasksLocal, OrderDegree
			if o := os.Getenv("STRATA_BENCH_NODE_ORDER"); o != "" {
				cfg.Order = o
			}
			if tc.stale {
				cfg.Staleness = DefaultStaleness()
			}
			opts := Options{Backends: bs}
			pt := benchPartition(b, ds, tc.p)
			run := pt.ds
			opts.Offsets = pt.off
			if tc.p > 1 {
				opts.DeviceComms = benchComms(b, bs)
			}
			epochs := envInt(b, "STRATA_BENCH_EPOCHS", max(b.N, 2))
			cfg.Epochs = epochs
			cfg.EvalEvery = envInt(b, "STRATA_BENCH_EVAL_EVERY", train.MaxEpochs)
			dev0 := bs[0]
			var prof []gputest.OpTime
			if os.Getenv("STRATA_BENCH_PROFILE") != "" {
				// Epoch epochs+1 is profiled; one more follows, so the
				// final evaluation is not in the profile.
				cfg.Epochs += 2
				opts.OnEpoch = func(r train.EpochRecord) {
					var err error
					switch r.Epoch {
					case epochs:
						err = gputest.StartProfile(dev0)
					case epochs + 1:
						prof, err = gputest.StopProfile(dev0)
					}
					if err != nil {
						b.Error(err)
					}
				}
			}
			if tc.p == 1 && os.Getenv("STRATA_BENCH_LOG") != "" {
				opts.Log = os.Stderr
			}
			rep, err := Run(context.Background(), run, cfg, opts)
			if err != nil {
				b.Fatal(err)
			}
			report(b, rep, 1, epochs)
			var devPeak int64
			for _, d := range bs {
				devPeak = max(devPeak, d.(backend.Memory).Stats().PeakBytes)
			}
			b.ReportMetric(float64(devPeak)/(1<<30), "dev_peak_GiB")
			b.Logf("setup %.1fs (partition %.1fs), %d epochs, test accuracy %.4f (best-val epoch %d: %.4f), skipped %.1f%% of broadcast bytes",
				rep.TotalSeconds-sumSeconds(rep), rep.Partition.Seconds, len(rep.Epochs), rep.LastTestAcc, rep.SelectedEpoch, rep.TestAccuracy, 100*rep.Comm.AvoidedFraction)
			if prof != nil {
				var total float64
				for _, p := range prof {
					total += p.Ms
				}
				b.Logf("profile of epoch %d on %s: %.1f ms of device time", epochs+1, dev0.Name(), total)
				for _, p := range prof {
					if p.Ms >= 0.05 {
						b.Logf("  %-28s %6d calls %9.2f ms %5.1f%%", p.Name, p.Calls, p.Ms, 100*p.Ms/total)
					}
				}
			}
		})
	}
}

func sumSeconds(rep *Report) float64 {
	var s float64
	for _, e := range rep.Epochs {
		s += e.Seconds + e.EvalSeconds
	}
	return s
}

// report puts the mean over epochs [from, to) of a run into the
// benchmark's metrics.
func report(b *testing.B, rep *Report, from, to int) {
	var sec float64
	var bytes, grad int64
	for i, e := range rep.Epochs[from:to] {
		sec += e.Seconds - e.EvalSeconds
		bytes += rep.EpochComm[from+i].BytesSent
		grad += rep.EpochComm[from+i].GradBytesSent
	}
	n := float64(to - from)
	b.ReportMetric(1e3*sec/n, "ms/epoch")
	b.ReportMetric(float64(bytes)/n/(1<<20), "MiB_bcast/epoch")
	b.ReportMetric(float64(grad)/n/(1<<20), "MiB_grad/epoch")
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
}
