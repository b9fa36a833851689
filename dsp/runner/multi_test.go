package runner

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/train"
)

// small returns a quick configuration on k devices.
func small(k, epochs int) Config {
	cfg := Defaults(train.SAGE, k)
	cfg.Train.Epochs = epochs
	cfg.Train.Hidden = 16
	cfg.WaitTimeout = 20 * time.Second
	cfg.CommTimeout = 30 * time.Second
	return cfg
}

func losses(r *Report) []float64 {
	var out []float64
	for _, e := range r.Epochs {
		out = append(out, e.BatchLosses...)
	}
	return out
}

func run(t *testing.T, cfg Config, opts Options) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cora(t), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestLayoutDoesNotChangeResults: the cache budget and policy and the
// topology budget move bytes around but never change a number: the losses
// and accuracies are bit-identical.
func TestLayoutDoesNotChangeResults(t *testing.T) {
	epochs, k := 2, 3
	if testing.Short() {
		epochs, k = 1, 2
	}
	base := small(k, epochs)
	want := run(t, base, Options{})
	variants := map[string]func(*Config){
		"no cache":       func(c *Config) { c.CacheBytes = 0 },
		"small cache":    func(c *Config) { c.CacheBytes = 50 * 1433 * 4; c.Hotness = cache.ByPageRank },
		"replicated":     func(c *Config) { c.CacheBytes = 200 * 1433 * 4; c.CachePolicy = cache.Replicate; c.CacheGroup = 1 },
		"reverse-pr":     func(c *Config) { c.CacheBytes = 100 * 1433 * 4; c.Hotness = cache.ByReversePageRank },
		"presample":      func(c *Config) { c.CacheBytes = 100 * 1433 * 4; c.Hotness = cache.ByPreSampling },
		"host topology":  func(c *Config) { c.TopologyBytes = 1 },
		"no coordinator": func(c *Config) { c.NoCoordinator = true },
		"queue 1":        func(c *Config) { c.QueueCapacity = 1 },
		"tiny buckets":   func(c *Config) { c.BucketBytes = 4096 },
		"half topology":  func(c *Config) { c.TopologyBytes = 8000 },
		"queue 5":        func(c *Config) { c.QueueCapacity = 5 },
	}
	short := []string{"no cache", "presample", "host topology", "tiny buckets"}
	for name, f := range variants {
		if testing.Short() && !slices.Contains(short, name) {
			continue
		}
		cfg := base
		f(&cfg)
		got := run(t, cfg, Options{})
		if !slices.Equal(losses(got), losses(want)) {
			t.Fatalf("%s: losses %v, want %v", name, losses(got), losses(want))
		}
		if got.TestAccuracy != want.TestAccuracy || got.ValAccuracy != want.ValAccuracy {
			t.Fatalf("%s: accuracies differ", name)
		}
		hit := got.Metrics.Summary.Cache.HitRate
		switch name {
		case "no cache":
			if hit != 0 {
				t.Fatalf("no cache: hit rate %v", hit)
			}
		case "small cache", "reverse-pr", "presample":
			if hit <= 0 || hit >= 1 {
				t.Fatalf("%s: hit rate %v, want in (0, 1)", name, hit)
			}
		}
		if name == "host topology" && got.Metrics.Summary.Bytes["sample"]["host"] == 0 {
			t.Fatalf("topology in host memory but no host bytes counted")
		}
	}
}

// TestRandomDelaysNoDeadlock: random sleeps in every stage and before
// every collective (with the coordinator and without) neither deadlock nor
// change the results.
func TestRandomDelaysNoDeadlock(t *testing.T) {
	epochs, k := 3, 4
	if testing.Short() {
		epochs, k = 1, 3
	}
	base := small(k, epochs)
	want := run(t, base, Options{})
	seeds := uint64(2)
	if testing.Short() {
		seeds = 1
	}
	for _, coord := range []bool{true, false} {
		for seed := uint64(1); seed <= seeds; seed++ {
			cfg := base
			cfg.NoCoordinator = !coord
			var calls atomic.Int64
			delays := pipeline.RandomDelays(seed, 3*time.Millisecond, 0.3)
			hook := func(ctx context.Context, rank int, point string) {
				calls.Add(1)
				delays(ctx, rank, point)
			}
			start := time.Now()
			got := run(t, cfg, Options{Hook: hook})
			if !slices.Equal(losses(got), losses(want)) {
				t.Fatalf("coordinator %v, delays %d: losses differ", coord, seed)
			}
			if calls.Load() == 0 {
				t.Fatal("the hook was never called")
			}
			t.Logf("coordinator %v, delay seed %d: %d hook calls, %v", coord, seed, calls.Load(), time.Since(start).Round(time.Millisecond))
		}
	}
}

// TestStallNamesTheStage: a loader that never finishes one batch makes the
// run fail within the wait timeouts, naming the stalled device and stage.
func TestStallNamesTheStage(t *testing.T) {
	cfg := small(3, 2)
	cfg.WaitTimeout = time.Second
	cfg.CommTimeout = 3 * time.Second
	var n atomic.Int64
	hook := func(ctx context.Context, rank int, point string) {
		if rank == 2 && point == "loader" && n.Add(1) == 2 {
			<-ctx.Done() // stuck until the run gives up
		}
	}
	start := time.Now()
	_, err := Run(context.Background(), cora(t), cfg, Options{Hook: hook})
	took := time.Since(start)
	var re *RunError
	if !errors.As(err, &re) {
		t.Fatalf("error %v, want a *RunError", err)
	}
	if took > 10*time.Second {
		t.Fatalf("took %v to fail", took)
	}
	named := false
	for _, s := range re.Stalled {
		named = named || strings.HasPrefix(s, "rank 2 loader: loading")
	}
	if !named || !strings.Contains(err.Error(), "stalled: ") {
		t.Fatalf("error does not single out rank 2's loader: %v\nstates:\n%s", err, strings.Join(re.States, "\n"))
	}
	t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)
}

// TestReportAndMetrics: the JSON report carries the DSP settings and
// metrics that say what moved where.
func TestReportAndMetrics(t *testing.T) {
	cfg := small(2, 1)
	cfg.CacheBytes = 300 * 1433 * 4
	var lines strings.Builder
	rep := run(t, cfg, Options{Log: &lines})
	if !strings.Contains(lines.String(), "cache hit") {
		t.Fatalf("log lacks metrics: %q", lines.String())
	}
	path := filepath.Join(t.TempDir(), "report.json")
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.DSP.Devices != 2 || back.DSP.Partition != Multilevel || len(back.DSP.PerDevice) != 2 || back.Model != "sage" || len(back.Epochs) != 1 {
		t.Fatalf("report %+v", back.DSP)
	}
	if back.DSP.EdgeCut <= 0 || back.DSP.CrossEdges <= 0 || back.DSP.BatchesPerDevice != 3 {
		t.Fatalf("edge cut %d, cross edges %d, batches %d", back.DSP.EdgeCut, back.DSP.CrossEdges, back.DSP.BatchesPerDevice)
	}
	s := back.Metrics.Summary
	if s.Devices != 2 || s.Bytes["sample"]["peer"] == 0 || s.Bytes["feature"]["peer"] == 0 || s.Bytes["gradient"]["peer"] == 0 {
		t.Fatalf("bytes %v", s.Bytes)
	}
	if s.Cache.HitRate <= 0 || s.Cache.HitRate >= 1 || s.Cache.PeerHits == 0 {
		t.Fatalf("cache %+v", s.Cache)
	}
	for _, r := range back.Metrics.Ranks {
		if len(r.Queues) != 2 || r.Queues[0].Capacity != 2 || r.Queues[0].Pushes != 3 {
			t.Fatalf("rank %d queues %+v", r.Rank, r.Queues)
		}
		for _, st := range r.Stages {
			if st.Items != 3 || st.BusySeconds <= 0 {
				t.Fatalf("rank %d stage %+v", r.Rank, st)
			}
		}
	}
}

// TestLayerWiseAndWeightedTrain: the other samplers train too.
func TestLayerWiseAndWeightedTrain(t *testing.T) {
	variants := []func(*Config){
		func(c *Config) { c.Scheme = LayerWise; c.Train.Fanouts = []int{200, 400}; c.Replace = true },
		func(c *Config) { c.Scheme = LayerWise; c.Train.Fanouts = []int{200, 400} },
		func(c *Config) { c.Replace = true },
		func(c *Config) { c.Rebalance = Trim },
	}
	if testing.Short() {
		variants = variants[1:2]
	}
	for _, f := range variants {
		cfg := small(2, 2)
		f(&cfg)
		rep := run(t, cfg, Options{})
		if l := losses(rep); len(l) == 0 || l[len(l)-1] >= l[0] {
			t.Fatalf("%s %v: losses %v do not decrease", cfg.Scheme, cfg.Replace, l)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for name, f := range map[string]func(*Config){
		"devices":     func(c *Config) { c.Devices = 0 },
		"full mode":   func(c *Config) { c.Train.Mode = train.Full },
		"scheme":      func(c *Config) { c.Scheme = "edge" },
		"partition":   func(c *Config) { c.Partition = "random" },
		"group":       func(c *Config) { c.CachePolicy = cache.Replicate; c.CacheGroup = 3 },
		"hotness":     func(c *Config) { c.Hotness = "lfu" },
		"queue":       func(c *Config) { c.QueueCapacity = -1 },
		"rebalance":   func(c *Config) { c.Rebalance = "drop" },
		"layer w/o r": func(c *Config) { c.Scheme = LayerWise; c.Weighted = true },
		"eval fanout": func(c *Config) { c.Train.Eval = train.Sampled; c.Train.EvalFanouts = []int{5} },
	} {
		cfg := small(2, 1)
		f(&cfg)
		if _, err := Run(context.Background(), cora(t), cfg, Options{}); err == nil {
			t.Fatalf("%s: accepted", name)
		}
	}
}

// TestDenseFeaturesSeveralDevices: dense features (a generated graph) on 3
// devices with a partial cache, sampled evaluation, and a model that
// learns.
func TestDenseFeaturesSeveralDevices(t *testing.T) {
	cfg := small(3, 3)
	cfg.Train.Hidden = 16
	cfg.Train.Eval, cfg.Train.EvalFanouts = train.Sampled, []int{10, 10}
	cfg.CacheBytes = 200 * 16 * 4
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, tiny(t), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.DSP.SparseFeatures || rep.DSP.RowNormalized {
		t.Fatalf("tiny's Gaussian features treated as sparse (%v) or row-normalized (%v)", rep.DSP.SparseFeatures, rep.DSP.RowNormalized)
	}
	if rep.TestAccuracy < 0.5 { // 5 classes: chance is 0.2
		t.Fatalf("test accuracy %.4f", rep.TestAccuracy)
	}
	if h := rep.Metrics.Summary.Cache.HitRate; h <= 0 || h >= 1 {
		t.Fatalf("hit rate %v", h)
	}
}
