package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/graph/graphtest"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

func TestAssignPad(t *testing.T) {
	b, _ := book.New([]int64{0, 10, 100, 300})
	var trainIDs []graph.NodeID
	for v := graph.NodeID(0); v < 300; v += 3 { // 100 nodes, 4 owned by rank 0
		trainIDs = append(trainIDs, v)
	}
	for _, bs := range []int{1, 7, 33, 34, 200} {
		p, err := assign(trainIDs, b, bs, Pad, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		nb := len(p.batches[0])
		seen := map[graph.NodeID]int{}
		for r, bt := range p.batches {
			if len(bt) != nb {
				t.Fatalf("batch %d: rank %d has %d batches, rank 0 %d", bs, r, len(bt), nb)
			}
			for _, seeds := range bt {
				if len(seeds) == 0 || len(seeds) > bs {
					t.Fatalf("batch size %d: a batch of %d", bs, len(seeds))
				}
				for _, v := range seeds {
					seen[v]++
				}
			}
		}
		if len(seen) != len(trainIDs) || p.dropped != 0 {
			t.Fatalf("batch %d: %d distinct nodes used, %d dropped; want all %d", bs, len(seen), p.dropped, len(trainIDs))
		}
		// The shares are 34, 33, 33: at most one padded repeat per rank.
		extra := 0
		for _, c := range seen {
			extra += c - 1
		}
		if extra > 2 {
			t.Fatalf("batch %d: %d repeats", bs, extra)
		}
	}
	// Rank 2 owns most training nodes and keeps its own first.
	p, _ := assign(trainIDs, b, 10, Pad, 1, 0)
	for _, seeds := range p.batches[2] {
		for _, v := range seeds {
			if v < 100 {
				t.Fatalf("rank 2 got node %d while it has spare nodes of its own", v)
			}
		}
	}
}

func TestAssignTrimAndOneDevice(t *testing.T) {
	b, _ := book.New([]int64{0, 50, 100})
	trainIDs := make([]graph.NodeID, 45)
	for i := range trainIDs {
		trainIDs[i] = graph.NodeID(2 * i)
	}
	p, err := assign(trainIDs, b, 10, Trim, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	for r, bt := range p.batches {
		if len(bt) != 2 {
			t.Fatalf("rank %d: %d batches, want 2", r, len(bt))
		}
		for _, seeds := range bt {
			if len(seeds) != 10 {
				t.Fatalf("trim: batch of %d", len(seeds))
			}
		}
	}
	if p.dropped != 5 {
		t.Fatalf("dropped %d, want 5", p.dropped)
	}
	if _, err := assign(trainIDs, b, 40, Trim, 3, 2); err == nil {
		t.Fatal("trim with no full batch per device accepted")
	}
	// One device: the trainer's shuffle, cut in order.
	one, _ := book.New([]int64{0, 100})
	p, _ = assign(trainIDs, one, 10, Pad, 3, 2)
	var flat []graph.NodeID
	for _, s := range p.batches[0] {
		flat = append(flat, s...)
	}
	if want := train.Shuffled(trainIDs, 3, 2); !slices.Equal(flat, want) {
		t.Fatalf("one device: %v, want the trainer's order %v", flat, want)
	}
}

// setupShared is the part of a run that the evaluator and the
// pre-sampling pass read: cfg (normalized here) over the tiny dataset
// partitioned for cfg.Devices devices, on the back ends bs.
func setupShared(t testing.TB, cfg Config, bs []backend.Backend) *shared {
	t.Helper()
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	pd, err := partitionData(context.Background(), tiny(t), &cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &shared{cfg: cfg, opts: Options{Backends: bs}, pd: pd, in: pd.ds.InGraph(), dim: pd.ds.FeatDim}
	if s.in == nil {
		t.Fatal("invalid graph")
	}
	s.feats = train.NewDenseFeatures(pd.ds.Features, int(pd.ds.NumNodes()), s.dim, cfg.Train.RowNorm)
	s.x = s.feats.Dense
	return s
}

// TestEvaluatorShards: sampled evaluation spread over k devices
// (train.Evaluator.RunShard, summed by sumTallies) gives the one-device
// evaluation's accuracies exactly (the same batches and neighborhoods),
// and its validation loss up to the summation order, on every device;
// whole-graph evaluation cannot be spread.
func TestEvaluatorShards(t *testing.T) {
	b := cpus(t, 1)[0]
	s := setupShared(t, small(1, 1), []backend.Backend{b})
	ds := s.pd.ds
	model, err := nn.New(b, s.cfg.Train.ModelConfig(ds.FeatDim, ds.NumClasses))
	if err != nil {
		t.Fatal(err)
	}
	defer nn.FreeParams(b, model.Params())
	tc := s.cfg.Train.Common
	tc.Eval, tc.EvalFanouts, tc.EvalBatchSize = train.Sampled, []int{5, 5}, 37
	ev, err := train.NewEvaluator(b, ds, s.in, s.feats, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	wt, err := ev.Run(model)
	if err != nil {
		t.Fatal(err)
	}
	want := wt.Record()
	if want.TestAccuracy < 0 || want.TestAccuracy > 1 || !(want.ValLoss > 0) {
		t.Fatalf("untrained model scored %+v", want)
	}
	for _, k := range []int{1, 2, 3, 4} {
		cs, err := inproc.New(k, comm.Options{})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]train.EpochRecord, k)
		errs := make([]error, k)
		var wg sync.WaitGroup
		for r := range k {
			wg.Go(func() {
				// Each device has its own evaluator, as in a run.
				e, err := train.NewEvaluator(b, ds, s.in, s.feats, tc)
				if err != nil {
					errs[r] = err
					return
				}
				defer e.Close()
				tl, err := e.RunShard(model, r, k)
				if err == nil {
					tl, err = sumTallies(context.Background(), cs[r], tl)
				}
				if errs[r] = err; err != nil {
					return
				}
				// Every node counted once over the shards.
				if tl.Count != wt.Count || tl.Correct != wt.Correct {
					errs[r] = fmt.Errorf("counted %v, correct %v; one device %v, %v", tl.Count, tl.Correct, wt.Count, wt.Correct)
				}
				got[r] = tl.Record()
			})
		}
		wg.Wait()
		for _, c := range cs {
			c.Close()
		}
		for r := range k {
			if errs[r] != nil {
				t.Fatalf("k=%d rank %d: %v", k, r, errs[r])
			}
			g := got[r]
			if g.TrainAccuracy != want.TrainAccuracy || g.ValAccuracy != want.ValAccuracy || g.TestAccuracy != want.TestAccuracy {
				t.Fatalf("k=%d rank %d: accuracies %v/%v/%v, one device %v/%v/%v", k, r, g.TrainAccuracy, g.ValAccuracy, g.TestAccuracy,
					want.TrainAccuracy, want.ValAccuracy, want.TestAccuracy)
			}
			if math.Abs(g.ValLoss-want.ValLoss) > 1e-12*math.Abs(want.ValLoss) || g.ValLoss != got[0].ValLoss {
				t.Fatalf("k=%d rank %d: validation loss %v (rank 0 %v), one device %v", k, r, g.ValLoss, got[0].ValLoss, want.ValLoss)
			}
		}
	}
	if _, err := ev.RunShard(model, 2, 2); err == nil {
		t.Fatal("shard 2 of 2 accepted")
	}
	tc.Eval = train.Full
	full, err := train.NewEvaluator(b, ds, s.in, s.feats, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	if _, err := full.RunShard(model, 0, 2); err == nil {
		t.Fatal("whole-graph evaluation split")
	}
}

// presampleReference is the pre-sampling pass done the plain way: one
// whole-graph sampler, the batches in order, int64 counts.
func presampleReference(t *testing.T, s *shared) []graph.NodeID {
	t.Helper()
	plan, err := newPresamplePlan(s.pd, &s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &s.cfg
	smps, err := wholeGraphSamplers(s.in, cfg.Scheme == LayerWise, sample.Config{Fanouts: cfg.Train.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted}, 1)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int64, s.in.NumRows)
	for r, batches := range plan.batches {
		for i, seeds := range batches {
			mb, err := smps[0](seeds, plan.key(r, i))
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range mb.InputNodes() {
				counts[v]++
			}
		}
	}
	return cache.ByCounts(counts)
}

// TestPresampleOnHost: the host's pre-sampling order is the same with 1
// goroutine or several (more than there are batches too), node-wise and
// layer-wise, and equals the plain sequential pass; a cancelled context
// stops it; the GPUs' pass refuses CPU back ends. A run with CPU back
// ends reports its time and says so.
func TestPresampleOnHost(t *testing.T) {
	for _, scheme := range []string{NodeWise, LayerWise} {
		cfg := small(3, 1)
		cfg.Train.BatchSize = 32
		cfg.Scheme, cfg.Hotness = scheme, cache.ByPreSampling
		if scheme == LayerWise {
			cfg.Train.Fanouts = []int{200, 400}
		}
		s := setupShared(t, cfg, cpus(t, 3))
		plan, err := newPresamplePlan(s.pd, &s.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(plan.batches[0]); len(plan.batches) != 3 || n < 4 {
			t.Fatalf("%d devices with %d batches each: too few to spread", len(plan.batches), n)
		}
		want := presampleReference(t, s)
		if len(want) != int(s.in.NumRows) {
			t.Fatalf("order of %d nodes for %d", len(want), s.in.NumRows)
		}
		for _, w := range []int{1, 2, 3, 7, 1000} {
			got, err := s.presampleOnHost(context.Background(), w)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("%s, %d workers: %v (order equal: %v)", scheme, w, err, slices.Equal(got, want))
			}
		}
		got, sec, err := s.hotOrder(context.Background(), false)
		if err != nil || !slices.Equal(got, want) || sec <= 0 {
			t.Fatalf("%s: hotOrder: %v in %.3fs (order equal: %v)", scheme, err, sec, slices.Equal(got, want))
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.presampleOnHost(ctx, 2); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled pass returned %v", err)
		}
		if _, err := s.presampleOnDevices(context.Background()); err == nil || !strings.Contains(err.Error(), "has no run-time kernels and queue") {
			t.Fatalf("device pass on CPU back ends: %v", err)
		}
	}
	if _, err := newPresamplePlan(nil, nil); err == nil {
		t.Fatal("nil partition accepted")
	}
	cfg := small(2, 1)
	cfg.Hotness = cache.ByPreSampling
	var log bytes.Buffer
	rep := run(t, cfg, Options{Log: &log})
	if !strings.Contains(log.String(), "pre-sampling hotness on the host") || !(rep.Run.PresampleSeconds > 0) {
		t.Fatalf("pre-sampling %.3fs; log:\n%s", rep.Run.PresampleSeconds, log.String())
	}
	cfg.Hotness = cache.ByInDegree
	log.Reset()
	if rep := run(t, cfg, Options{Log: &log}); rep.Run.PresampleSeconds != 0 || strings.Contains(log.String(), "pre-sampling") {
		t.Fatalf("in-degree hotness: pre-sampling %.3fs; log:\n%s", rep.Run.PresampleSeconds, log.String())
	}
}

// TestEstimateMemoryScales: the per-device parts count once per CPU
// virtual device and not at all on GPUs.
func TestEstimateMemoryScales(t *testing.T) {
	s := train.Shape{Nodes: 2708, Edges: 10556, FeatDim: 1433, Classes: 7, TrainNodes: 140}
	cfg := Defaults(train.SAGE, 8)
	cfg.CachePolicy = cache.Auto // the command's default
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	host := EstimateMemory(cfg, s, true)
	gpu := EstimateMemory(cfg, s, false)
	cfg.Devices = 16
	host16 := EstimateMemory(cfg, s, true)
	perDevice := (host16.Total() - host.Total()) / 8
	if perDevice < 1<<20 || perDevice > 40<<20 {
		t.Errorf("per device %.0f bytes", perDevice)
	}
	if gpu.Total() >= host.Total() {
		t.Errorf("host %v, gpu %v", host.Total(), gpu.Total())
	}
	if l := host16.Largest(); l.Count != 16 {
		t.Errorf("largest part %+v, want a per-device part on 16 devices", l)
	}
}

// BenchmarkPresampleOnHost: the host pre-sampling pass on the
// products-hard-s shape (49K nodes, 2.5M edges; fanouts 15,10,5, batches
// of 256 over 2 devices) with 1 goroutine and with GOMAXPROCS.
func BenchmarkPresampleOnHost(b *testing.B) {
	gc, err := gen.Preset("products-hard-s")
	if err != nil {
		b.Fatal(err)
	}
	ds, err := gen.Generate(gc, nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg := small(2, 1)
	cfg.Train.BatchSize = 256
	cfg.Train.Fanouts, cfg.Train.Layers = []int{15, 10, 5}, 3
	cfg.Partition = Range
	if err := cfg.Normalize(); err != nil {
		b.Fatal(err)
	}
	pd, err := partitionData(context.Background(), ds, &cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	s := &shared{cfg: cfg, pd: pd, in: pd.ds.InGraph()}
	plan, err := newPresamplePlan(pd, &cfg)
	if err != nil {
		b.Fatal(err)
	}
	batches := len(plan.batches) * len(plan.batches[0])
	for _, w := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			for b.Loop() {
				if _, err := s.presampleOnHost(context.Background(), w); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*batches), "ms/batch")
		})
	}
}

// TestSamplerStages: every sampler worker has its own stage, after the
// fixed ones for workers past the first, and maps back to itself; the
// loader's and trainer's stages are no worker's.
func TestSamplerStages(t *testing.T) {
	seen := map[int]bool{}
	for w := range MaxSamplerWorkers {
		st := samplerStage(w)
		if st < 0 || st >= numStages || seen[st] || (w > 0 && st < numFixedStages) || samplerWorker(st) != w {
			t.Fatalf("worker %d: stage %d (worker %d, seen %v)", w, st, samplerWorker(st), seen[st])
		}
		seen[st] = true
	}
	for _, st := range []int{stLoader, stTrainer, -1, numStages} {
		if w := samplerWorker(st); w != -1 {
			t.Errorf("stage %d is worker %d's", st, w)
		}
	}
}

// TestHostKit: on a CPU back end the kit of the full sampler has one
// host sampler per worker, each drawing the whole-graph sampler's batch,
// a host store reporting the hot rows, and refuses a cancelled context.
func TestHostKit(t *testing.T) {
	g := graphtest.Skewed(5, 500, 6, 20)
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const cols = 4
	x := make([]float32, 500*cols)
	hot := []graph.NodeID{7, 3, 11}
	scfg := gpusample.Config{Fanouts: []int{4, 3}}
	k, err := newKit(b, g, x, 500, cols, hot, false, scfg, samplerSpec{workers: 2}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	if len(k.smps) != 2 || k.store.HotRows() != len(hot) {
		t.Fatalf("%d samplers, %d hot rows; want 2 and %d", len(k.smps), k.store.HotRows(), len(hot))
	}
	ref, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: scfg.Fanouts})
	if err != nil {
		t.Fatal(err)
	}
	seeds, key := []graph.NodeID{1, 50, 499}, sample.Key{Seed: 9, Batch: 2}
	want, err := ref.Sample(seeds, key)
	if err != nil {
		t.Fatal(err)
	}
	for w, s := range k.smps {
		bt, err := s.Sample(context.Background(), seeds, key)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(bt.IDs(), want.InputNodes()) || bt.NumInputs() != len(want.InputNodes()) || bt.DeviceIDs() != nil {
			t.Errorf("worker %d: input nodes %v, want %v", w, bt.IDs(), want.InputNodes())
		}
		bt.Free()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := k.smps[1].Sample(ctx, seeds, key); !errors.Is(err, context.Canceled) {
		t.Errorf("sampling with a cancelled context: %v", err)
	}
}

// TestStallHint: the bf16 hint comes only for a stalled bf16 run on two
// or more GPUs of the process, and names the process count to launch.
func TestStallHint(t *testing.T) {
	stalled := []string{"rank 0 trainer: computing for 5m0s"}
	two := []string{"cuda:0", "cuda:1"}
	if h := stallHint(backend.BF16, two, stalled); !strings.Contains(h, "known issue") || !strings.Contains(h, "strata launch -n 2 ") {
		t.Fatalf("bf16 on 2 GPUs: %q", h)
	}
	for _, tc := range []struct {
		name    string
		p       backend.Precision
		devices []string
		stalled []string
	}{
		{"fp32", backend.FP32, two, stalled},
		{"one GPU", backend.BF16, []string{"cuda:0"}, stalled},
		{"CPU devices", backend.BF16, []string{"cpu:0", "cpu:1"}, stalled},
		{"nothing stalled", backend.BF16, two, nil},
	} {
		if h := stallHint(tc.p, tc.devices, tc.stalled); h != "" {
			t.Errorf("%s: hint %q, want none", tc.name, h)
		}
	}
	e := &RunError{Op: "training", Err: errors.New("x"), Stalled: stalled, Hint: stallHint(backend.BF16, two, stalled)}
	if !strings.HasSuffix(e.Error(), "; "+e.Hint) {
		t.Fatalf("error %q does not end with the hint", e.Error())
	}
}
