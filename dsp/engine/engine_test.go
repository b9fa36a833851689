package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/internal/devbuf"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

var (
	tinyOnce sync.Once
	tinyDS   *dataset.Dataset
	tinyErr  error
	coraOnce sync.Once
	coraDS   *dataset.Dataset
	coraErr  error
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

// cora loads the built-in Cora once (sparse bag-of-words features); runs
// never modify it.
func cora(t testing.TB) *dataset.Dataset {
	t.Helper()
	coraOnce.Do(func() { coraDS, coraErr = builtin.Load("cora") })
	if coraErr != nil {
		t.Fatal(coraErr)
	}
	return coraDS
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

// layerConfig is small with the layer-wise scheme: Fanouts are edges per
// layer.
func layerConfig(k, epochs int) Config {
	cfg := small(k, epochs)
	cfg.Scheme = LayerWise
	cfg.Train.Fanouts = []int{300, 600}
	cfg.CacheBytes = 300 * 16 * 4
	return cfg
}

// cpus are k CPU back ends on gonum's products, whose rows do not
// depend on the row count: runs split differently (over processes, in
// chunks) are compared bit for bit, which OpenBLAS's size-dependent
// blocking (where it loads) does not promise.
func cpus(t testing.TB, k int) []backend.Backend {
	t.Helper()
	bs := make([]backend.Backend, k)
	for i := range bs {
		b, err := cpu.New(cpu.Options{Gemm: cpu.GemmGo})
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = b
	}
	return bs
}

// runOn trains cfg on ds (CPU virtual devices unless opts says otherwise).
func runOn(t *testing.T, ds *dataset.Dataset, cfg Config, opts Options) *Report {
	t.Helper()
	if opts.Backends == nil {
		opts.Backends = cpus(t, cfg.Devices)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, ds, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func run(t *testing.T, cfg Config, opts Options) *Report {
	t.Helper()
	return runOn(t, tiny(t), cfg, opts)
}

func losses(r *Report) []float64 { return trainLosses(&r.Report) }

func trainLosses(r *train.Report) []float64 {
	var out []float64
	for _, e := range r.Epochs {
		out = append(out, e.BatchLosses...)
	}
	return out
}

// sameEpochs fails unless got's evaluated epochs are want's bit for bit
// (all but the timings), and so are the headline numbers.
func sameEpochs(t *testing.T, got, want *train.Report) {
	t.Helper()
	if len(got.Epochs) != len(want.Epochs) || len(want.Epochs) == 0 {
		t.Fatalf("%d epochs recorded, want %d", len(got.Epochs), len(want.Epochs))
	}
	for i, w := range want.Epochs {
		g := got.Epochs[i]
		if g.Epoch != w.Epoch || g.Loss != w.Loss || len(g.BatchLosses) != len(w.BatchLosses) || g.TrainAccuracy != w.TrainAccuracy ||
			g.ValAccuracy != w.ValAccuracy || g.ValLoss != w.ValLoss || g.TestAccuracy != w.TestAccuracy {
			t.Fatalf("epoch %d: %+v\nwant %+v", w.Epoch, g, w)
		}
		for j := range w.BatchLosses {
			if g.BatchLosses[j] != w.BatchLosses[j] {
				t.Fatalf("epoch %d batch %d: loss %v, want %v", w.Epoch, j, g.BatchLosses[j], w.BatchLosses[j])
			}
		}
	}
	if got.TestAccuracy != want.TestAccuracy || got.ValAccuracy != want.ValAccuracy || got.SelectedEpoch != want.SelectedEpoch ||
		got.LastTestAcc != want.LastTestAcc {
		t.Fatalf("headline: test %v val %v epoch %d last %v; want %v %v %d %v", got.TestAccuracy, got.ValAccuracy, got.SelectedEpoch,
			got.LastTestAcc, want.TestAccuracy, want.ValAccuracy, want.SelectedEpoch, want.LastTestAcc)
	}
}

// hostSource is a train.BatchSource over a whole-graph sampler of this
// package (wholeGraphSamplers: sample.NeighborSampler, or the layer-wise
// sampler alone on the whole graph) with the features gathered on the
// host, as the engine's CPU devices do.
type hostSource struct {
	b    backend.Backend
	smp  func([]graph.NodeID, sample.Key) (*sample.MiniBatch, error)
	x    []float32
	cols int
}

func (h *hostSource) Prefetch([]int32, sample.Key) error { return nil }
func (h *hostSource) Close() error                       { return nil }

func (h *hostSource) Batch(seeds []int32, key sample.Key) ([]*nn.Block, backend.Buffer, func(), error) {
	mb, err := h.smp(seeds, key)
	if err != nil {
		return nil, nil, nil, err
	}
	blocks, err := nn.UploadBlocks(h.b, mb)
	if err != nil {
		return nil, nil, nil, err
	}
	in := mb.InputNodes()
	x := make([]float32, 0, len(in)*h.cols)
	for _, v := range in {
		x = append(x, h.x[int(v)*h.cols:int(v+1)*h.cols]...)
	}
	buf, err := devbuf.Upload(h.b, x)
	if err != nil {
		nn.FreeBlocks(blocks)
		return nil, nil, nil, err
	}
	return blocks, buf, func() { nn.FreeBlocks(blocks); h.b.Free(buf) }, nil
}

// trainer runs the single-device trainer on ds under cfg.Train, its
// batches drawn by the whole-graph sampler of cfg's scheme.
func trainer(t *testing.T, ds *dataset.Dataset, cfg Config) *train.Report {
	t.Helper()
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := func(bb backend.Backend, in *graph.CSR, x []float32, rows, cols int, fanouts []int) (train.BatchSource, error) {
		ss, err := wholeGraphSamplers(in, cfg.Scheme == LayerWise, sample.Config{Fanouts: fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted}, 1)
		if err != nil {
			return nil, err
		}
		return &hostSource{b: bb, smp: ss[0], x: x, cols: cols}, nil
	}
	rep, err := train.Run(context.Background(), ds, cfg.Train, train.Options{Backend: b, Batches: src})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestOneDeviceEqualsTrainer: on one device the pipeline, the sampler,
// the feature cache and the device-side loss change nothing: every batch
// loss, every accuracy and the validation losses equal the single-device
// trainer's (given the engine's dense feature rows, as a train.BatchSource),
// bit for bit, node-wise and layer-wise, with whole-graph and sampled
// evaluation, with the pipeline on and off.
func TestOneDeviceEqualsTrainer(t *testing.T) {
	for name, f := range map[string]func(*Config){
		"sampled eval":     func(*Config) {},
		"full eval, adam":  func(c *Config) { c.Train.Eval, c.Train.Optimizer = train.Full, "adam" },
		"layer-wise":       func(c *Config) { *c = layerConfig(1, c.Train.Epochs) },
		"no pipeline":      func(c *Config) { c.NoPipeline = true },
		"with replacement": func(c *Config) { c.Replace = true },
		"full sampler, gat": func(c *Config) {
			c.Sampler, c.Train.Model, c.Train.Heads, c.Train.OutHeads = SamplerFull, train.GAT, 2, 1
		},
		"no cache, 2 layers": func(c *Config) { c.CacheBytes = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := small(1, 2)
			f(&cfg)
			got := run(t, cfg, Options{})
			want := trainer(t, tiny(t), cfg)
			sameEpochs(t, &got.Report, want)
		})
	}
}

// TestCollectiveEqualsWholeGraph: CPU virtual devices sample collectively
// (csp's protocols on the CPU machine, the code GPUs run: its exchanges
// count as sampling bytes between the devices), node-wise and
// layer-wise, and draw the batches of the single-device samplers over the
// whole graph (Sampler full: sample.NeighborSampler, the layer-wise
// sampler alone on the whole graph), so every loss and accuracy is the
// same, bit for bit, on 2 and 3 devices.
func TestCollectiveEqualsWholeGraph(t *testing.T) {
	peer := func(r *Report) int64 { return r.Metrics.Summary.Bytes["sample"]["peer"] }
	ks := []int{2, 3}
	if testing.Short() {
		ks = ks[:1]
	}
	for _, k := range ks {
		for _, scheme := range []string{NodeWise, LayerWise} {
			cfg := small(k, 2)
			if scheme == LayerWise {
				cfg = layerConfig(k, 2)
				cfg.Replace = k == 3
			}
			cfg.SamplerWorkers = 2
			got := run(t, cfg, Options{})
			if !strings.HasPrefix(got.Run.Sampler, "collective") || peer(got) <= 0 || got.DSP.Scheme != scheme {
				t.Fatalf("k=%d %s: sampler %q, %d sampling bytes between devices: want collective sampling", k, scheme, got.Run.Sampler, peer(got))
			}
			full := cfg
			full.Sampler = SamplerFull
			want := run(t, full, Options{})
			if !strings.HasPrefix(want.Run.Sampler, "host") || peer(want) != 0 {
				t.Fatalf("k=%d %s: full sampler %q, %d sampling bytes between devices", k, scheme, want.Run.Sampler, peer(want))
			}
			sameEpochs(t, &got.Report, &want.Report)
			if !got.Run.ReplicasEqual || got.DSP.BatchesPerDevice != want.DSP.BatchesPerDevice {
				t.Fatalf("k=%d %s: replicas equal %v, %d batches per device", k, scheme, got.Run.ReplicasEqual, got.DSP.BatchesPerDevice)
			}
		}
	}
	// The scheme is used: node-wise sampling with the layer-wise fanouts
	// gives other losses.
	lc := layerConfig(2, 1)
	nc := lc
	nc.Scheme = NodeWise
	if slices.Equal(losses(run(t, lc, Options{})), losses(run(t, nc, Options{}))) {
		t.Fatalf("node-wise sampling with fanouts %v gives the layer-wise losses", lc.Train.Fanouts)
	}
}

// TestSettingsDoNotChangeNumbers: the pipeline on or off, the cache
// budget, policy and hotness, the topology budget, the coordinator, the
// queue capacity, the bucket size and the sampler workers move work
// around but never change a number.
func TestSettingsDoNotChangeNumbers(t *testing.T) {
	k := 3
	if testing.Short() {
		k = 2
	}
	base := small(k, 2)
	want := run(t, base, Options{})
	variants := map[string]func(*Config){
		"pipeline off":      func(c *Config) { c.NoPipeline = true },
		"no cache":          func(c *Config) { c.CacheBytes = 0 },
		"small cache":       func(c *Config) { c.CacheBytes = 50 * 16 * 4 },
		"replicate g=1":     func(c *Config) { c.CachePolicy, c.CacheGroup = cache.Replicate, 1 },
		"replicate g=k":     func(c *Config) { c.CachePolicy, c.CacheGroup, c.CacheBytes = cache.Replicate, k, 100*16*4 },
		"auto policy":       func(c *Config) { c.CachePolicy = cache.Auto },
		"no coordinator":    func(c *Config) { c.NoCoordinator = true },
		"queue 1":           func(c *Config) { c.QueueCapacity = 1 },
		"queue 5":           func(c *Config) { c.QueueCapacity = 5 },
		"tiny buckets":      func(c *Config) { c.BucketBytes = 4096 },
		"pagerank hotness":  func(c *Config) { c.Hotness, c.CacheBytes = cache.ByPageRank, 80*16*4 },
		"reverse pagerank":  func(c *Config) { c.Hotness, c.CacheBytes = cache.ByReversePageRank, 80*16*4 },
		"presample":         func(c *Config) { c.Hotness, c.CacheBytes = cache.ByPreSampling, 80*16*4 },
		"all cached":        func(c *Config) { c.Hotness, c.CachePolicy = cache.ByPreSampling, cache.Auto }, // no ranking computed
		"host topology":     func(c *Config) { c.TopologyBytes = 1 },
		"half topology":     func(c *Config) { c.TopologyBytes = 8000 },
		"2 samplers":        func(c *Config) { c.SamplerWorkers = 2 },
		"3 samplers, q 1":   func(c *Config) { c.SamplerWorkers, c.QueueCapacity = 3, 1 },
		"sync, no priority": func(c *Config) { c.SyncCollectives, c.NoStagePriority = true, true }, // GPUs only
		"range partition":   func(c *Config) { c.Partition = Range },                               // the numbers of another partition: see below
	}
	var rng *Report
	for name, f := range variants {
		cfg := base
		f(&cfg)
		got := run(t, cfg, Options{})
		if name == "range partition" {
			rng = got
			continue
		}
		sameEpochs(t, &got.Report, &want.Report)
		if got.Run.Pipeline == cfg.NoPipeline || got.Run.SamplerWorkers != max(cfg.SamplerWorkers, 1) {
			t.Fatalf("%s: report says pipeline %v, %d sampler workers", name, got.Run.Pipeline, got.Run.SamplerWorkers)
		}
		if q := len(got.Metrics.Summary.Queues); !cfg.NoPipeline && q != max(cfg.SamplerWorkers, 1)+1 {
			t.Fatalf("%s: %d queues reported", name, q)
		}
		hit := got.Metrics.Summary.Cache.HitRate
		switch name {
		case "no cache":
			if hit != 0 {
				t.Fatalf("no cache: hit rate %v", hit)
			}
		case "all cached":
			if hit != 1 || got.Run.PresampleSeconds != 0 || got.DSP.CacheLayout != "replicate/1" {
				t.Fatalf("all cached: hit rate %v, pre-sampling %.3fs, layout %s", hit, got.Run.PresampleSeconds, got.DSP.CacheLayout)
			}
		case "small cache", "pagerank hotness", "presample":
			if hit <= 0 || hit >= 1 {
				t.Fatalf("%s: hit rate %v, want in (0, 1)", name, hit)
			}
		case "host topology":
			if p := got.DSP.PerDevice[0]; p.TopologyDeviceBytes != 0 || p.TopologyHostBytes == 0 {
				t.Fatalf("topology in host memory: %+v", p)
			}
		}
	}
	if rng.DSP.Partition != Range || rng.DSP.EdgeCut != -1 || slices.Equal(losses(rng), losses(want)) {
		t.Fatalf("range partition: %q, edge cut %d, the multilevel partition's losses %v", rng.DSP.Partition, rng.DSP.EdgeCut, slices.Equal(losses(rng), losses(want)))
	}
}

// TestRandomDelaysNoDeadlock: random sleeps at every stage step and
// before every collective, with the coordinator and without, never
// deadlock the stages nor change a number.
func TestRandomDelaysNoDeadlock(t *testing.T) {
	cfg := small(3, 2)
	cfg.CacheBytes = 100 * 16 * 4
	cfg.QueueCapacity = 1
	want := run(t, cfg, Options{})
	seeds := uint64(4)
	if testing.Short() {
		seeds = 2
	}
	for seed := range seeds {
		c := cfg
		c.SamplerWorkers = 1 + int(seed%2) // two samplers per device in odd seeds
		c.NoCoordinator = seed >= 2
		var calls atomic.Int64
		delays := pipeline.RandomDelays(seed, 2*time.Millisecond, 0.3)
		got := run(t, c, Options{Hook: func(ctx context.Context, rank int, point string) {
			calls.Add(1)
			delays(ctx, rank, point)
		}})
		if !slices.Equal(losses(got), losses(want)) || calls.Load() == 0 {
			t.Fatalf("seed %d: losses %v, want %v (%d hook calls)", seed, losses(got), losses(want), calls.Load())
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
	var log bytes.Buffer
	start := time.Now()
	_, err := Run(context.Background(), tiny(t), cfg, Options{Backends: cpus(t, 3), Hook: hook, Log: &log})
	took := time.Since(start)
	var re *RunError
	if !errors.As(err, &re) {
		t.Fatalf("error %v, want a *RunError", err)
	}
	if took > 20*time.Second {
		t.Fatalf("took %v to fail", took)
	}
	named := false
	for _, s := range re.Stalled {
		named = named || strings.HasPrefix(s, "rank 2 loader: loading")
	}
	if !named || !strings.Contains(err.Error(), "stalled: ") || !strings.Contains(log.String(), "stages at the failure:\n  rank 0 ") {
		t.Fatalf("error does not single out rank 2's loader: %v\nstates:\n%s\nlog:\n%s", err, strings.Join(re.States, "\n"), log.String())
	}
}

// TestReportAndMetrics: the report (and its JSON) carries the DSP
// settings, the timings, per-device information, cache and byte counts,
// queue occupancy and only the evaluated epochs (Train.EvalEvery).
func TestReportAndMetrics(t *testing.T) {
	cfg := small(2, 3)
	cfg.CacheBytes = 100 * 16 * 4
	cfg.Train.EvalEvery = cfg.Train.Epochs // after the last only
	var mu sync.Mutex
	batches := map[int]int{}
	var lines bytes.Buffer
	rep := run(t, cfg, Options{Log: &lines, OnBatch: func(rank, epoch, batch int, loss float64) {
		mu.Lock()
		batches[rank]++
		mu.Unlock()
		if !(loss > 0) {
			t.Errorf("rank %d epoch %d batch %d: loss %v", rank, epoch, batch, loss)
		}
	}})
	if !strings.Contains(lines.String(), "cache hit") || !strings.Contains(lines.String(), "epoch 3/3") {
		t.Fatalf("log lacks the epoch lines with their metrics: %q", lines.String())
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
	if len(back.Epochs) != 1 || back.Epochs[0].Epoch != 3 || back.Model != "sage" {
		t.Fatalf("evaluated epochs %+v, want only the last", back.Epochs)
	}
	r := back.Run
	if len(r.EpochTrainSeconds) != 3 || len(r.EpochLosses) != 3 || r.EvalSeconds[0] != 0 || r.EvalSeconds[2] <= 0 || r.SteadyEpochSeconds <= 0 {
		t.Fatalf("timings %+v", r)
	}
	if !r.Pipeline || !r.Exchange || !r.ReplicasEqual || r.Sampler == "" || !r.FeaturesDense || r.EvalEvery != 3 {
		t.Fatalf("run info %+v", r)
	}
	nb := back.DSP.BatchesPerDevice
	if batches[0] != 3*nb || batches[1] != 3*nb {
		t.Fatalf("OnBatch calls %v, want %d per device", batches, 3*nb)
	}
	d := back.DSP
	if d.Devices != 2 || d.Partition != Multilevel || d.EdgeCut <= 0 || d.CrossEdges <= 0 || len(d.Book) != 3 || d.Comm == "none" ||
		len(d.PerDevice) != 2 || d.PerDevice[1].CachedRows != 100 || d.GradientBuckets != 1 || d.SparseFeatures {
		t.Fatalf("dsp info %+v", d)
	}
	s := back.Metrics.Summary
	if s.Cache.Requests == 0 || s.Cache.PeerHits == 0 || s.Cache.LocalHits == 0 || s.Cache.Misses == 0 || s.Cache.HitRate <= 0 || s.Cache.HitRate >= 1 {
		t.Fatalf("cache %+v", s.Cache)
	}
	for _, pl := range [][2]string{{"feature", "peer"}, {"feature", "host"}, {"feature", "local"}, {"gradient", "peer"}, {"sample", "peer"}} {
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
	for _, rk := range back.Metrics.Ranks {
		if len(rk.Queues) != 2 || rk.Queues[0].Capacity != 2 {
			t.Fatalf("rank %d queues %+v", rk.Rank, rk.Queues)
		}
	}
	if !(back.TestAccuracy > 0.35) { // 5 classes: chance is 0.2
		t.Fatalf("test accuracy %v", back.TestAccuracy)
	}
}

// TestEpochMetrics: each epoch line shows that epoch's pipeline figures,
// not the run's so far: device 0's trainer ran exactly the epoch's
// batches (a peer's at most one more, counted late), the epochs add up to
// the run's total, and each line ends with its epoch's figures.
func TestEpochMetrics(t *testing.T) {
	var log bytes.Buffer
	cfg := small(2, 3)
	cfg.Train.BatchSize = 16
	rep := run(t, cfg, Options{Log: &log})
	m, n := rep.Metrics, int64(rep.DSP.BatchesPerDevice)
	if len(m.Epochs) != 3 || n < 2 {
		t.Fatalf("%d epochs of metrics, %d batches per device", len(m.Epochs), n)
	}
	var steps int64
	for i, e := range m.Epochs {
		tr := e.Stages[metrics.Trainer]
		if e.Epoch != i+1 || tr.Items < n || tr.Items > n+1 {
			t.Fatalf("epoch %d: %d trainer steps, want %d or %d", e.Epoch, tr.Items, n, n+1)
		}
		steps += tr.Items
		line, seen := fmt.Sprintf("epoch %d/3 ", e.Epoch), false
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.HasPrefix(l, line) {
				seen = true
				if !strings.HasSuffix(l, "  "+e.Summary.String()) {
					t.Fatalf("epoch %d's line %q does not end with its figures %q", e.Epoch, l, e.Summary.String())
				}
			}
		}
		if !seen {
			t.Fatalf("no line for epoch %d:\n%s", e.Epoch, log.String())
		}
	}
	if total := m.Summary.Stages[metrics.Trainer].Items; total != 3*n || steps < total || steps > total+2 {
		t.Fatalf("per-epoch trainer steps add up to %d, the run's total is %d (%d batches per device)", steps, total, n)
	}
}

// TestVariantsTrain: the sampling variants and trimmed batches train
// (the losses fall), on Cora's sparse features too.
func TestVariantsTrain(t *testing.T) {
	variants := map[string]func(*Config){
		"layer, replace": func(c *Config) { *c = layerConfig(2, c.Train.Epochs); c.Replace = true },
		"replace":        func(c *Config) { c.Replace = true },
		"trim":           func(c *Config) { c.Rebalance = Trim },
		"cora":           func(c *Config) { c.Train.Eval = train.Full },
	}
	for name, f := range variants {
		if testing.Short() && name != "cora" {
			continue
		}
		cfg := small(2, 3)
		f(&cfg)
		ds := tiny(t)
		if name == "cora" {
			ds = cora(t)
		}
		rep := runOn(t, ds, cfg, Options{})
		l := losses(rep)
		if n := len(l); n == 0 || l[n-1] >= l[0] {
			t.Fatalf("%s: losses %v do not fall", name, l)
		}
		if name == "trim" && rep.DSP.DroppedSeeds == 0 {
			t.Fatalf("trim dropped no seeds")
		}
		if name == "cora" && (!rep.DSP.SparseFeatures || !rep.DSP.RowNormalized) {
			t.Fatalf("cora: sparse %v, row-normalized %v", rep.DSP.SparseFeatures, rep.DSP.RowNormalized)
		}
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
		"devices":                     {cfg: func(c *Config) { c.Devices = 0 }},
		"full mode":                   {cfg: func(c *Config) { c.Train.Mode = train.Full }},
		"scheme":                      {cfg: func(c *Config) { c.Scheme = "edge" }},
		"partition":                   {cfg: func(c *Config) { c.Partition = "random" }},
		"group":                       {cfg: func(c *Config) { c.CachePolicy, c.CacheGroup = cache.Replicate, 3 }},
		"auto group":                  {cfg: func(c *Config) { c.CachePolicy, c.CacheGroup = cache.Auto, 1 }},
		"partition group":             {cfg: func(c *Config) { c.CacheGroup = 1 }},
		"policy":                      {cfg: func(c *Config) { c.CachePolicy = "lru" }},
		"hotness":                     {cfg: func(c *Config) { c.Hotness = "lfu" }},
		"queue":                       {cfg: func(c *Config) { c.QueueCapacity = -1 }},
		"rebalance":                   {cfg: func(c *Config) { c.Rebalance = "drop" }},
		"buckets":                     {cfg: func(c *Config) { c.BucketBytes = 3 }},
		"timeouts":                    {cfg: func(c *Config) { c.WaitTimeout = -1 }},
		"layer weighted w/o replace":  {cfg: func(c *Config) { c.Scheme, c.Weighted = LayerWise, true }},
		"sampler":                     {cfg: func(c *Config) { c.Sampler = "gpu" }},
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
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "dsp: config ") {
			t.Fatalf("%s: %v, want a config error", name, err)
		}
	}
	bad := *tiny(t)
	bad.Val = nil
	var re *RunError
	if _, err := Run(ctx, &bad, small(2, 1), Options{Backends: cpus(t, 2)}); !errors.As(err, &re) || re.Op != "dataset" {
		t.Fatalf("dataset without validation nodes: %v", err)
	}
	tc := small(2, 1).Train
	tc.EvalFanouts = []int{5}
	var te *train.ConfigError
	if _, err := Run(ctx, tiny(t), Config{Train: tc, Devices: 2}, Options{Backends: cpus(t, 2)}); !errors.As(err, &te) {
		t.Fatalf("one evaluation fanout for two layers: %v", err)
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

// TestAccuracyAcrossDevices: sampled GraphSAGE on Cora (the trainer's
// defaults) reaches the same accuracy on 1, 2 and 4 devices: the mean test
// accuracy over seeds 1-3 is within 0.025 of the 1-device mean, and every
// run reaches 0.77. More devices take fewer, larger steps per epoch (the
// global batch grows with the device count), hence a small expected drop.
func TestAccuracyAcrossDevices(t *testing.T) {
	if testing.Short() {
		t.Skip("accuracy over 9 runs: skipped in -short mode")
	}
	const seeds = 3
	means := map[int]float64{}
	for _, k := range []int{1, 2, 4} {
		var accs []float64
		for s := 1; s <= seeds; s++ {
			cfg := Defaults(train.SAGE, k)
			cfg.Train.Seed = uint64(s)
			rep := runOn(t, cora(t), cfg, Options{})
			if rep.TestAccuracy < 0.77 {
				t.Errorf("%d devices, seed %d: test accuracy %.4f < 0.77", k, s, rep.TestAccuracy)
			}
			accs = append(accs, rep.TestAccuracy)
			means[k] += rep.TestAccuracy / seeds
		}
		t.Logf("%d devices: mean test accuracy %.4f %v", k, means[k], accs)
	}
	for _, k := range []int{2, 4} {
		if d := math.Abs(means[k] - means[1]); d > 0.025 {
			t.Errorf("%d devices: mean %.4f differs from 1 device's %.4f by %.4f > 0.025", k, means[k], means[1], d)
		}
	}
}
