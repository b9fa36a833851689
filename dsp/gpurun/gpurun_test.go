package gpurun

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/dsp/runner"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

var (
	tinyOnce sync.Once
	tinyDS   *dataset.Dataset
	tinyErr  error
)

// tiny is the generated "tiny" preset: dense Gaussian features.
func tiny(t testing.TB) *dataset.Dataset {
	t.Helper()
	tinyOnce.Do(func() {
		var cfg gen.Config
		if cfg, tinyErr = gen.Preset("tiny"); tinyErr == nil {
			tinyDS, tinyErr = gen.Generate(cfg, nil)
		}
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyDS
}

func small(k, epochs int) Config {
	cfg := Defaults(train.SAGE, k)
	cfg.Train.Epochs = epochs
	cfg.Train.Hidden = 16
	cfg.Train.BatchSize = 64
	cfg.Train.Eval, cfg.Train.EvalFanouts = train.Sampled, []int{10, 10}
	cfg.WaitTimeout = 20 * time.Second
	cfg.CommTimeout = 30 * time.Second
	return cfg
}

func cpus(t testing.TB, k int) []backend.Backend {
	t.Helper()
	bs := make([]backend.Backend, k)
	for i := range bs {
		b, err := cpu.New(cpu.Options{})
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = b
	}
	return bs
}

func run(t *testing.T, cfg Config, opts Options) *Report {
	t.Helper()
	if opts.Backends == nil {
		opts.Backends = cpus(t, cfg.Devices)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, tiny(t), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func losses(r *Report) []float64 { return trainLosses(&r.Report.Report) }

func trainLosses(r *train.Report) []float64 {
	var out []float64
	for _, e := range r.Epochs {
		out = append(out, e.BatchLosses...)
	}
	return out
}

// checkMatchesHost fails t unless the device run got has the host
// runner's (want) batch losses within 1e-4 relative and its accuracies
// within 0.01, on k devices.
func checkMatchesHost(t *testing.T, k int, want *runner.Report, got *Report) {
	t.Helper()
	wl, gl := trainLosses(&want.Report), losses(got)
	if len(wl) != len(gl) || len(wl) == 0 {
		t.Fatalf("k=%d: %d losses, want %d", k, len(gl), len(wl))
	}
	for i := range wl {
		if d := math.Abs(gl[i]-wl[i]) / math.Abs(wl[i]); d > 1e-4 {
			t.Fatalf("k=%d batch %d: loss %v, host runner %v", k, i, gl[i], wl[i])
		}
	}
	if math.Abs(got.TestAccuracy-want.TestAccuracy) > 0.01 || math.Abs(got.ValAccuracy-want.ValAccuracy) > 0.01 {
		t.Fatalf("k=%d: val/test %.4f/%.4f, host runner %.4f/%.4f", k, got.ValAccuracy, got.TestAccuracy, want.ValAccuracy, want.TestAccuracy)
	}
}

// TestMatchesHostRunner: on CPU back ends the device run makes the host
// runner's batches, weights and dropout masks, so every batch loss and
// the accuracies agree (up to the loss's summation order: the device run
// computes it as a product on the device, the host runner on the tape).
func TestMatchesHostRunner(t *testing.T) {
	ks := []int{1, 2, 3}
	if testing.Short() {
		ks = []int{1, 2}
	}
	for _, k := range ks {
		cfg := small(k, 2)
		cfg.CacheBytes = 300 * 16 * 4
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		want, err := runner.Run(ctx, tiny(t), cfg.Config, runner.Options{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		got := run(t, cfg, Options{})
		checkMatchesHost(t, k, want, got)
		if !got.Run.ReplicasEqual || got.DSP.BatchesPerDevice != want.DSP.BatchesPerDevice {
			t.Fatalf("k=%d: replicas equal %v, %d batches per device (host %d)", k, got.Run.ReplicasEqual, got.DSP.BatchesPerDevice, want.DSP.BatchesPerDevice)
		}
	}
}

// TestPresampleMatchesHostRunner: the device run's pre-sampling hotness
// (on the host, over the whole graph) caches the rows the host runner's
// distributed pre-sampling pass caches, node-wise and layer-wise: with a
// cache too small for every row, both see the same local and peer hits
// on the same batches, and different ones than with in-degree hotness.
func TestPresampleMatchesHostRunner(t *testing.T) {
	for _, scheme := range []string{runner.NodeWise, runner.LayerWise} {
		t.Run(scheme, func(t *testing.T) { testPresample(t, scheme) })
	}
}

func testPresample(t *testing.T, scheme string) {
	cacheOf := func(h cache.Hotness, host bool) (metrics.CacheSnapshot, []float64) {
		cfg := small(2, 1)
		if scheme == runner.LayerWise {
			cfg = layerConfig(2, 1)
		}
		cfg.CacheBytes = 60 * 16 * 4
		cfg.Hotness = h
		if host {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := runner.Run(ctx, tiny(t), cfg.Config, runner.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return rep.Metrics.Summary.Cache, trainLosses(&rep.Report)
		}
		rep := run(t, cfg, Options{})
		return rep.Metrics.Summary.Cache, losses(rep)
	}
	want, wl := cacheOf(cache.ByPreSampling, true)
	got, gl := cacheOf(cache.ByPreSampling, false)
	deg, _ := cacheOf(cache.ByInDegree, false)
	if got.Requests != want.Requests || got.LocalHits != want.LocalHits || got.PeerHits != want.PeerHits {
		t.Fatalf("presample cache: device run %+v, host runner %+v", got, want)
	}
	if got.Misses == 0 || (deg.LocalHits == got.LocalHits && deg.PeerHits == got.PeerHits) {
		t.Fatalf("presample %+v vs in-degree %+v: the test's cache does not tell the orders apart", got, deg)
	}
	if len(gl) != len(wl) {
		t.Fatalf("%d losses, host runner %d", len(gl), len(wl))
	}
	for i := range wl {
		if d := math.Abs(gl[i]-wl[i]) / math.Abs(wl[i]); d > 1e-4 {
			t.Fatalf("batch %d: loss %v, host runner %v", i, gl[i], wl[i])
		}
	}
}

// TestSettingsDoNotChangeNumbers: the pipeline on or off, the cache
// budget and policy, the coordinator, the queue capacity and the bucket
// size move work around but never change a number.
func TestSettingsDoNotChangeNumbers(t *testing.T) {
	k := 3
	if testing.Short() {
		k = 2
	}
	base := small(k, 2)
	want := run(t, base, Options{})
	variants := map[string]func(*Config){
		"pipeline off":     func(c *Config) { c.NoPipeline = true },
		"no cache":         func(c *Config) { c.CacheBytes = 0 },
		"small cache":      func(c *Config) { c.CacheBytes = 50 * 16 * 4 },
		"replicate g=1":    func(c *Config) { c.CachePolicy, c.CacheGroup = cache.Replicate, 1 },
		"replicate g=k":    func(c *Config) { c.CachePolicy, c.CacheGroup, c.CacheBytes = cache.Replicate, k, 100*16*4 },
		"no coordinator":   func(c *Config) { c.NoCoordinator = true },
		"queue 1":          func(c *Config) { c.QueueCapacity = 1 },
		"tiny buckets":     func(c *Config) { c.BucketBytes = 4096 },
		"pagerank hotness": func(c *Config) { c.Hotness, c.CacheBytes = cache.ByPageRank, 80*16*4 },
		"2 samplers":       func(c *Config) { c.SamplerWorkers = 2 },
		"3 samplers, q 1":  func(c *Config) { c.SamplerWorkers, c.QueueCapacity = 3, 1 },
	}
	for name, f := range variants {
		cfg := base
		f(&cfg)
		got := run(t, cfg, Options{})
		wl, gl := losses(want), losses(got)
		if len(wl) != len(gl) {
			t.Fatalf("%s: %d losses, want %d", name, len(gl), len(wl))
		}
		for i := range wl {
			if wl[i] != gl[i] {
				t.Fatalf("%s: batch %d loss %v, want %v", name, i, gl[i], wl[i])
			}
		}
		if got.TestAccuracy != want.TestAccuracy || got.ValAccuracy != want.ValAccuracy {
			t.Fatalf("%s: accuracies %v/%v, want %v/%v", name, got.ValAccuracy, got.TestAccuracy, want.ValAccuracy, want.TestAccuracy)
		}
		if got.Run.Pipeline == cfg.NoPipeline || got.Run.SamplerWorkers != max(cfg.SamplerWorkers, 1) {
			t.Fatalf("%s: report says pipeline %v, %d sampler workers", name, got.Run.Pipeline, got.Run.SamplerWorkers)
		}
		if q := len(got.Metrics.Summary.Queues); !cfg.NoPipeline && q != max(cfg.SamplerWorkers, 1)+1 {
			t.Fatalf("%s: %d queues reported", name, q)
		}
	}
}

// TestRandomDelaysNoDeadlock: random sleeps at every stage step and
// before every collective never deadlock the coordinated stages.
func TestRandomDelaysNoDeadlock(t *testing.T) {
	cfg := small(3, 2)
	cfg.CacheBytes = 100 * 16 * 4
	cfg.QueueCapacity = 1
	want := run(t, cfg, Options{})
	for seed := range uint64(4) {
		c := cfg
		c.SamplerWorkers = 1 + int(seed%2) // two samplers per device in odd seeds
		got := run(t, c, Options{Hook: pipeline.RandomDelays(seed, 2*time.Millisecond, 0.3)})
		wl, gl := losses(want), losses(got)
		for i := range wl {
			if wl[i] != gl[i] {
				t.Fatalf("seed %d: batch %d loss %v, want %v", seed, i, gl[i], wl[i])
			}
		}
	}
}

// TestReportAndMetrics: the report carries the timings, per-device
// information, cache and byte counts, queue occupancy and only the
// evaluated epochs (EvalEvery).
func TestReportAndMetrics(t *testing.T) {
	cfg := small(2, 3)
	cfg.CacheBytes = 100 * 16 * 4
	cfg.EvalEvery = -1
	var mu sync.Mutex
	batches := map[int]int{}
	rep := run(t, cfg, Options{OnBatch: func(rank, epoch, batch int, loss float64) {
		mu.Lock()
		batches[rank]++
		mu.Unlock()
		if !(loss > 0) {
			t.Errorf("rank %d epoch %d batch %d: loss %v", rank, epoch, batch, loss)
		}
	}})
	if len(rep.Epochs) != 1 || rep.Epochs[0].Epoch != 3 {
		t.Fatalf("evaluated epochs %+v, want only the last", rep.Epochs)
	}
	r := rep.Run
	if len(r.EpochTrainSeconds) != 3 || len(r.EpochLosses) != 3 || r.EvalSeconds[0] != 0 || r.EvalSeconds[2] <= 0 || r.SteadyEpochSeconds <= 0 {
		t.Fatalf("timings %+v", r)
	}
	if !r.Pipeline || !r.Exchange || !r.ReplicasEqual || r.Sampler == "" {
		t.Fatalf("run info %+v", r)
	}
	nb := rep.DSP.BatchesPerDevice
	if batches[0] != 3*nb || batches[1] != 3*nb {
		t.Fatalf("OnBatch calls %v, want %d per device", batches, 3*nb)
	}
	s := rep.Metrics.Summary
	if s.Cache.Requests == 0 || s.Cache.PeerHits == 0 || s.Cache.LocalHits == 0 || s.Cache.Misses == 0 || s.Cache.HitRate <= 0 || s.Cache.HitRate >= 1 {
		t.Fatalf("cache %+v", s.Cache)
	}
	for _, pl := range [][2]string{{"feature", "peer"}, {"feature", "host"}, {"feature", "local"}, {"gradient", "peer"}} {
		if s.Bytes[pl[0]][pl[1]] <= 0 {
			t.Fatalf("no %s bytes on %s: %v", pl[0], pl[1], s.Bytes)
		}
	}
	if len(s.Queues) != 2 || s.Queues[0].Pushes != int64(2*3*nb) {
		t.Fatalf("queues %+v", s.Queues)
	}
	for _, st := range s.Stages {
		if st.Items != int64(3*nb) || st.BusySeconds <= 0 {
			t.Fatalf("stage %+v", st)
		}
	}
	if len(rep.DSP.PerDevice) != 2 || rep.DSP.PerDevice[1].CachedRows != 100 || rep.DSP.Comm == "none" {
		t.Fatalf("dsp info %+v", rep.DSP)
	}
	if !(rep.TestAccuracy > 0.35) { // 5 classes: chance is 0.2
		t.Fatalf("test accuracy %v", rep.TestAccuracy)
	}
}

func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]struct {
		cfg func(*Config)
		bs  func([]backend.Backend) []backend.Backend
	}{
		"too few":                     {bs: func(b []backend.Backend) []backend.Backend { return b[:1] }},
		"repeated":                    {bs: func(b []backend.Backend) []backend.Backend { return []backend.Backend{b[0], b[0]} }},
		"nil":                         {bs: func(b []backend.Backend) []backend.Backend { return []backend.Backend{b[0], nil} }},
		"full mode":                   {cfg: func(c *Config) { c.Train.Mode = train.Full }},
		"9 samplers":                  {cfg: func(c *Config) { c.SamplerWorkers = MaxSamplerWorkers + 1 }},
		"-1 samplers":                 {cfg: func(c *Config) { c.SamplerWorkers = -1 }},
		"samplers without pipeline":   {cfg: func(c *Config) { c.SamplerWorkers, c.NoPipeline = 2, true }},
		"samplers on a shared stream": {cfg: func(c *Config) { c.SamplerWorkers, c.SharedStream = 2, true }},
	} {
		cfg := small(2, 1)
		if c.cfg != nil {
			c.cfg(&cfg)
		}
		bs := cpus(t, 2)
		if c.bs != nil {
			bs = c.bs(bs)
		}
		_, err := Run(ctx, tiny(t), cfg, Options{Backends: bs})
		var ce *runner.ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("%s: %v, want a config error", name, err)
		}
	}
}

// TestInterrupted: cancelling the context stops every stage promptly with
// train.ErrInterrupted.
func TestInterrupted(t *testing.T) {
	cfg := small(2, 50)
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	start := time.Now()
	_, err := Run(ctx, tiny(t), cfg, Options{Backends: cpus(t, 2), OnBatch: func(rank, epoch, batch int, _ float64) {
		if epoch == 1 {
			once.Do(cancel)
		}
	}})
	if !errors.Is(err, train.ErrInterrupted) {
		t.Fatalf("got %v, want ErrInterrupted", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("took %v", d)
	}
}

// TestCheckpointResume: a run interrupted in its third epoch resumes from
// the checkpoint written after the second and ends with the history of an
// uninterrupted run, bit for bit; an existing checkpoint is not
// overwritten without Resume, one from another configuration or past the
// run's epochs is refused, and one that has done every epoch gives its
// results.
func TestCheckpointResume(t *testing.T) {
	cfg := small(2, 3)
	want := run(t, cfg, Options{})
	dir := t.TempDir()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Run(ctx, tiny(t), cfg, Options{Backends: cpus(t, 2), CheckpointDir: dir, OnBatch: func(rank, epoch, batch int, _ float64) {
		if epoch == 2 {
			cancel()
		}
	}})
	if !errors.Is(err, train.ErrInterrupted) {
		t.Fatalf("interrupted run: %v", err)
	}
	var ce *CheckpointError
	if _, err := Run(context.Background(), tiny(t), cfg, Options{Backends: cpus(t, 2), CheckpointDir: dir}); !errors.As(err, &ce) || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second run without resume: %v, want a CheckpointError", err)
	}
	other := cfg
	other.Train.Hidden = 32
	if _, err := Run(context.Background(), tiny(t), other, Options{Backends: cpus(t, 2), CheckpointDir: dir, Resume: true}); !errors.As(err, &ce) || !strings.Contains(err.Error(), "hidden") {
		t.Fatalf("resume with another hidden size: %v, want a CheckpointError naming it", err)
	}
	shorter := cfg
	shorter.Train.Epochs = 1
	if _, err := Run(context.Background(), tiny(t), shorter, Options{Backends: cpus(t, 2), CheckpointDir: dir, Resume: true}); !errors.As(err, &ce) || !strings.Contains(err.Error(), "past this run's 1") {
		t.Fatalf("resume past the schedule: %v", err)
	}
	// Every epoch of the run done: nothing is trained and the report is
	// the checkpoint's, the uninterrupted run's first two epochs.
	short := cfg
	short.Train.Epochs = 2
	steps := 0
	fin := run(t, short, Options{CheckpointDir: dir, Resume: true, OnBatch: func(int, int, int, float64) { steps++ }})
	if steps != 0 || fin.ResumedFrom == nil || fin.ResumedFrom.Epoch != 2 || len(fin.Epochs) != 2 || !slices.Equal(fin.Run.EpochLosses, want.Run.EpochLosses[:2]) {
		t.Fatalf("resume with every epoch done: %d steps, resumed from %+v, %d epochs, epoch losses %v (uninterrupted %v)", steps, fin.ResumedFrom,
			len(fin.Epochs), fin.Run.EpochLosses, want.Run.EpochLosses)
	}
	for i, g := range fin.Epochs {
		if w := want.Epochs[i]; !slices.Equal(g.BatchLosses, w.BatchLosses) || g.TestAccuracy != w.TestAccuracy || g.ValLoss != w.ValLoss {
			t.Fatalf("finished run, epoch %d: losses %v test %v; uninterrupted %v %v", w.Epoch, g.BatchLosses, g.TestAccuracy, w.BatchLosses, w.TestAccuracy)
		}
	}
	if fin.DSP.BatchesPerDevice != want.DSP.BatchesPerDevice || fin.LastTestAcc != want.Epochs[1].TestAccuracy {
		t.Fatalf("finished run: %d batches per device, last test %v", fin.DSP.BatchesPerDevice, fin.LastTestAcc)
	}

	got := run(t, cfg, Options{CheckpointDir: dir, Resume: true})
	if got.ResumedFrom == nil || got.ResumedFrom.Epoch != 2 {
		t.Fatalf("resumed from %+v, want epoch 2", got.ResumedFrom)
	}
	if len(got.Epochs) != len(want.Epochs) || len(got.Epochs) != 3 {
		t.Fatalf("%d epochs recorded, uninterrupted %d", len(got.Epochs), len(want.Epochs))
	}
	for i, w := range want.Epochs {
		g := got.Epochs[i]
		if !slices.Equal(g.BatchLosses, w.BatchLosses) || g.TestAccuracy != w.TestAccuracy || g.ValLoss != w.ValLoss {
			t.Fatalf("epoch %d: losses %v test %v val loss %v; uninterrupted %v %v %v", w.Epoch, g.BatchLosses, g.TestAccuracy, g.ValLoss,
				w.BatchLosses, w.TestAccuracy, w.ValLoss)
		}
	}
	if !slices.Equal(got.Run.EpochLosses, want.Run.EpochLosses) || len(got.Run.EpochTrainSeconds) != 3 || !got.Run.ReplicasEqual {
		t.Fatalf("epoch losses %v (uninterrupted %v), %d epoch times", got.Run.EpochLosses, want.Run.EpochLosses, len(got.Run.EpochTrainSeconds))
	}
}
