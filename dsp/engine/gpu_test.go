package engine

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/tensor/backend"
)

// gpus returns the first n visible GPUs (up to 4) as back ends, skipping
// the test when there are fewer.
func gpus(t testing.TB, n int) []backend.Backend {
	t.Helper()
	devs := gputest.Devices(t, n)
	bs := make([]backend.Backend, n)
	for i, d := range devs {
		bs[i] = d
	}
	return bs
}

// TestGPUMatchesCPU: on 1, 2 and 4 GPUs (GPU sampling, the feature
// cache's NCCL all-to-alls, NCCL gradient all-reduce) every batch loss
// agrees with the same run on CPU back ends, the pipeline off gives the
// same numbers bit for bit, and so do the cache layouts.
func TestGPUMatchesCPU(t *testing.T) {
	for _, k := range []int{1, 2, 4} {
		visible := len(gputest.All(t))
		if visible < k {
			t.Logf("skipping %d GPUs: %d available", k, visible)
			continue
		}
		cfg := small(k, 2)
		cfg.CacheBytes = 300 * 16 * 4
		want := run(t, cfg, Options{})
		got := run(t, cfg, Options{Backends: gpus(t, k)})
		wl, gl := losses(want), losses(got)
		if len(wl) != len(gl) || len(wl) == 0 {
			t.Fatalf("k=%d: %d losses, want %d", k, len(gl), len(wl))
		}
		worst := 0.0
		for i := range wl {
			worst = max(worst, math.Abs(gl[i]-wl[i])/math.Abs(wl[i]))
		}
		t.Logf("k=%d: %d losses, largest relative difference to the CPU %.2e; test accuracy %.4f (CPU %.4f); comm %s; sampler stream %v",
			k, len(wl), worst, got.TestAccuracy, want.TestAccuracy, got.DSP.Comm, got.Run.SamplerStream)
		if worst > 1e-3 {
			t.Fatalf("k=%d: losses differ from the CPU run by up to %.2e relative", k, worst)
		}
		if math.Abs(got.TestAccuracy-want.TestAccuracy) > 0.02 || !got.Run.ReplicasEqual {
			t.Fatalf("k=%d: test accuracy %.4f (CPU %.4f), replicas equal %v", k, got.TestAccuracy, want.TestAccuracy, got.Run.ReplicasEqual)
		}
		if k > 1 && (!got.Run.Exchange || got.Metrics.Summary.Cache.PeerHits == 0) {
			t.Fatalf("k=%d: no feature exchange: %+v", k, got.Metrics.Summary.Cache)
		}
		if k != min(visible, 4) {
			continue // the variants on the most GPUs only
		}
		for name, f := range map[string]func(*Config){
			"pipeline off":  func(c *Config) { c.NoPipeline = true },
			"replicate g=1": func(c *Config) { c.CachePolicy, c.CacheGroup = cache.Replicate, 1 },
			"no cache":      func(c *Config) { c.CacheBytes = 0 },
			"full sampler":  func(c *Config) { c.Sampler = SamplerFull },
			"shared stream": func(c *Config) { c.SharedStream = true },
			// About half of each patch in host memory (gpusample.Split; a
			// patch of the tiny graph takes ~23 kB at k=4, the graph 91 kB).
			"split topology":               func(c *Config) { c.TopologyBytes = 11000 },
			"split topology, full sampler": func(c *Config) { c.TopologyBytes, c.Sampler = 40000, SamplerFull },
			"auto cache policy":            func(c *Config) { c.CachePolicy = cache.Auto },
			"2 samplers":                   func(c *Config) { c.SamplerWorkers = 2 },
			"3 samplers, queue 1":          func(c *Config) { c.SamplerWorkers, c.QueueCapacity = 3, 1 },
			"2 samplers, full sampler":     func(c *Config) { c.SamplerWorkers, c.Sampler = 2, SamplerFull },
			"2 samplers, split topology":   func(c *Config) { c.SamplerWorkers, c.TopologyBytes = 2, 11000 },
		} {
			vc := cfg
			f(&vc)
			v := run(t, vc, Options{Backends: gpus(t, k)})
			vl := losses(v)
			for i := range gl {
				if vl[i] != gl[i] {
					t.Fatalf("k=%d %s: batch %d loss %v, want %v", k, name, i, vl[i], gl[i])
				}
			}
			if v.Metrics.Summary.Cache.Requests != got.Metrics.Summary.Cache.Requests {
				t.Fatalf("k=%d %s: %d cache requests, want %d", k, name, v.Metrics.Summary.Cache.Requests, got.Metrics.Summary.Cache.Requests)
			}
		}
	}
}

// TestGPUFusedStep: on GPUs the loader's input dropout (the feature
// gather kernels, and the exchange's scatter kernels with a partitioned
// cache) and the one-buffer gradients with one Adam launch give the
// unfused step's losses bit for bit (the model's own Dropout, Adam per
// parameter), on 1 GPU and on 2 with rows exchanged.
func TestGPUFusedStep(t *testing.T) {
	visible := len(gputest.All(t))
	for _, k := range []int{1, 2} {
		if visible < k {
			t.Logf("skipping %d GPUs: %d available", k, visible)
			continue
		}
		cfg := small(k, 2)
		cfg.CacheBytes, cfg.CachePolicy = 300*16*4, cache.Partition
		want := run(t, cfg, Options{Backends: gpus(t, k), unfused: true})
		got := run(t, cfg, Options{Backends: gpus(t, k)})
		wl, gl := losses(want), losses(got)
		if len(wl) == 0 || len(wl) != len(gl) {
			t.Fatalf("k=%d: %d losses, unfused %d", k, len(gl), len(wl))
		}
		for i := range wl {
			if gl[i] != wl[i] {
				t.Fatalf("k=%d batch %d: loss %v, the unfused step's %v", k, i, gl[i], wl[i])
			}
		}
		if k > 1 && !got.Run.Exchange {
			t.Fatalf("k=%d: no feature exchange", k)
		}
	}
}

// TestGPUBF16StepNoConversions (STRATA_TEST_PRECISION=bf16): on 1 GPU
// and on 2 with rows exchanged, the bf16 step on bfloat16 rows from the
// loader (feat_gather_b2b8, gc_scatter_rows_bf16x8) with the weights
// converted in one launch gives the losses of the first pass's step
// (float32 rows converted by the model, each weight on its own) bit for
// bit.
func TestGPUBF16StepNoConversions(t *testing.T) {
	if p, err := gputest.Precision(); err != nil || p != backend.BF16 {
		t.Skipf("the GPUs are not opened at bf16 (%s=bf16)", gputest.EnvPrecision)
	}
	visible := len(gputest.All(t))
	for _, k := range []int{1, 2} {
		if visible < k {
			t.Logf("skipping %d GPUs: %d available", k, visible)
			continue
		}
		cfg := small(k, 2)
		cfg.Train.Precision = "bf16"
		cfg.CacheBytes, cfg.CachePolicy = 300*16*2, cache.Partition
		want := run(t, cfg, Options{Backends: gpus(t, k), halfConvert: true})
		got := run(t, cfg, Options{Backends: gpus(t, k)})
		wl, gl := losses(want), losses(got)
		if len(wl) == 0 || len(wl) != len(gl) {
			t.Fatalf("k=%d: %d losses, the first pass's %d", k, len(gl), len(wl))
		}
		for i := range wl {
			if gl[i] != wl[i] {
				t.Fatalf("k=%d batch %d: loss %v, the first pass's step's %v", k, i, gl[i], wl[i])
			}
		}
		if k > 1 && !got.Run.Exchange {
			t.Fatalf("k=%d: no feature exchange", k)
		}
	}
}

// TestGPURandomDelays: random delays at every stage step and collective
// on the GPUs never deadlock the coordinated NCCL collectives.
func TestGPURandomDelays(t *testing.T) {
	bs := gpus(t, 2)
	if len(gputest.All(t)) >= 4 {
		bs = gpus(t, 4)
	}
	cfg := small(len(bs), 2)
	cfg.CacheBytes = 100 * 16 * 4
	cfg.QueueCapacity = 1
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	want, err := Run(ctx, tiny(t), cfg, Options{Backends: bs})
	if err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{1, 2} {
		c := cfg
		c.SamplerWorkers = workers
		got, err := Run(ctx, tiny(t), c, Options{Backends: bs, Hook: randomDelays()})
		if err != nil {
			t.Fatalf("%d sampler workers: %v", workers, err)
		}
		wl, gl := losses(want), losses(got)
		for i := range wl {
			if wl[i] != gl[i] {
				t.Fatalf("%d sampler workers: batch %d loss %v, want %v", workers, i, gl[i], wl[i])
			}
		}
	}
}

func randomDelays() pipeline.Hook { return pipeline.RandomDelays(11, 3*time.Millisecond, 0.3) }

// TestGPUJobAcrossProcesses: two simulated processes of one GPU each
// (comm/world.JoinLocal: their NCCL groups found through the job's
// store, host groups over TCP) train as one process with both GPUs.
// With two ranks every sum has one order, so the losses agree closely.
func TestGPUJobAcrossProcesses(t *testing.T) {
	bs := gpus(t, 2)
	cfg := small(2, 2)
	cfg.CacheBytes = 300 * 16 * 4
	want := run(t, cfg, Options{Backends: bs})
	ws := joinJob(t, []int{1, 1})
	reps, errs := make([]*Report, 2), make([]error, 2)
	var wg sync.WaitGroup
	for p, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			reps[p], errs[p] = Run(ctx, tiny(t), cfg, Options{Backends: bs[p : p+1], World: w})
			if errs[p] != nil {
				w.Leave(errs[p])
			}
		}()
	}
	wg.Wait()
	for p, err := range errs {
		if err != nil {
			t.Fatalf("process %d: %v", p, err)
		}
	}
	wl, gl := losses(want), losses(reps[0])
	if len(wl) != len(gl) || len(wl) == 0 {
		t.Fatalf("%d losses, want %d", len(gl), len(wl))
	}
	worst := 0.0
	for i := range wl {
		worst = max(worst, math.Abs(gl[i]-wl[i])/math.Abs(wl[i]))
	}
	t.Logf("%d losses, largest relative difference to one process %.2e; comm %s; world %+v", len(wl), worst, reps[0].DSP.Comm, reps[0].World)
	if worst > 1e-5 || reps[0].DSP.Comm != "nccl" || !reps[0].Run.ReplicasEqual {
		t.Fatalf("losses differ by up to %.2e relative; comm %s; replicas equal %v", worst, reps[0].DSP.Comm, reps[0].Run.ReplicasEqual)
	}
}
