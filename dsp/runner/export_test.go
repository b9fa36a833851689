package runner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

// evalSetup partitions the tiny dataset for k devices and makes an
// untrained model on a CPU back end, freed at the end of the test.
type evalSetup struct {
	cfg    Config
	pd     *Partitioned
	x      []float32
	sparse bool
	b      backend.Backend
	model  nn.Model
}

func newEvalSetup(t *testing.T, k int) *evalSetup {
	t.Helper()
	e := &evalSetup{cfg: small(k, 1)}
	if err := e.cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.pd, err = Partition(context.Background(), tiny(t), &e.cfg, nil); err != nil {
		t.Fatal(err)
	}
	e.x, _, e.sparse = Features(e.pd.Dataset, train.RowNormAuto)
	if e.b, err = cpu.New(cpu.Options{}); err != nil {
		t.Fatal(err)
	}
	if e.model, err = nn.New(e.b, ModelConfig(e.cfg.Train, e.pd.Dataset.FeatDim, e.pd.Dataset.NumClasses)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nn.FreeParams(e.b, e.model.Params()) })
	return e
}

// TestExports: the exported pieces are the ones Run uses: the same
// assignment, and an evaluator that scores a model as Run does.
func TestExports(t *testing.T) {
	ds := tiny(t)
	e := newEvalSetup(t, 3)
	cfg, pd, x, sparse, b, model := e.cfg, e.pd, e.x, e.sparse, e.b, e.model
	if pd.Book.K() != 3 || pd.Dataset.NumNodes() != ds.NumNodes() {
		t.Fatalf("partition: %d parts, %d nodes", pd.Book.K(), pd.Dataset.NumNodes())
	}
	got, dropped, err := AssignBatches(pd.Dataset.Train, pd.Book, 16, Pad, 7, 2)
	if err != nil {
		t.Fatal(err)
	}
	want, err := assign(pd.Dataset.Train, pd.Book, 16, Pad, 7, 2)
	if err != nil {
		t.Fatal(err)
	}
	if dropped != want.dropped || len(got) != 3 {
		t.Fatalf("dropped %d (want %d), %d devices", dropped, want.dropped, len(got))
	}
	for r := range got {
		if !slices.EqualFunc(got[r], want.batches[r], slices.Equal[[]graph.NodeID]) {
			t.Fatalf("device %d: batches differ", r)
		}
	}
	if _, _, err := AssignBatches(pd.Dataset.Train, nil, 16, Pad, 7, 2); err == nil {
		t.Fatal("nil book accepted")
	}
	if DropoutSeed(1, 2, 3) == DropoutSeed(1, 2, 4) {
		t.Fatal("dropout seeds of different batches agree")
	}
	cfg.Train.Eval, cfg.Train.EvalFanouts = train.Sampled, []int{5, 5}
	ev, err := NewEvaluator(b, pd.Dataset, x, sparse, cfg.Train)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Free()
	rec, err := ev.Run(model)
	if err != nil {
		t.Fatal(err)
	}
	if rec.TestAccuracy < 0 || rec.TestAccuracy > 1 || !(rec.ValLoss > 0) {
		t.Fatalf("untrained model scored %+v", rec)
	}
	if _, err := NewEvaluator(b, pd.Dataset, x[:len(x)-1], sparse, cfg.Train); err == nil {
		t.Fatal("short feature table accepted")
	}
	if _, err := HotOrder(pd.Dataset.Graph, "presample"); err == nil {
		t.Fatal("presample hotness without a sampling pass accepted")
	}
	if n := CrossEdges(pd.Dataset.Graph, pd.Book); n <= 0 || n > pd.Dataset.Graph.NumEdges() {
		t.Fatalf("cross edges %d of %d", n, pd.Dataset.Graph.NumEdges())
	}
}

// TestEvaluatorShards: sampled evaluation spread over k devices gives
// Run's accuracies exactly (the same batches and neighborhoods), and its
// validation loss up to the summation order, on every device.
func TestEvaluatorShards(t *testing.T) {
	e := newEvalSetup(t, 1)
	cfg, pd, x, sparse, b, model := e.cfg, e.pd, e.x, e.sparse, e.b, e.model
	tc := cfg.Train
	tc.Eval, tc.EvalFanouts, tc.EvalBatchSize = train.Sampled, []int{5, 5}, 37
	ev, err := NewEvaluator(b, pd.Dataset, x, sparse, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Free()
	want, err := ev.Run(model)
	if err != nil {
		t.Fatal(err)
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
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each device has its own evaluator, as in a run.
				e, err := NewEvaluator(b, pd.Dataset, x, sparse, tc)
				if err != nil {
					errs[r] = err
					return
				}
				defer e.Free()
				sum := SumOver(context.Background(), cs[r])
				got[r], errs[r] = e.RunShard(model, r, k, func(v []float64) error {
					if err := sum(v); err != nil {
						return err
					}
					// Every node counted once over the shards.
					for split, nodes := range [][]int32{pd.Dataset.Train, pd.Dataset.Val, pd.Dataset.Test} {
						if v[tCount+split] != float64(len(nodes)) {
							return fmt.Errorf("split %d: %v nodes counted, want %d", split, v[tCount+split], len(nodes))
						}
					}
					return nil
				})
			}()
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
				t.Fatalf("k=%d rank %d: accuracies %v/%v/%v, Run %v/%v/%v", k, r, g.TrainAccuracy, g.ValAccuracy, g.TestAccuracy,
					want.TrainAccuracy, want.ValAccuracy, want.TestAccuracy)
			}
			if math.Abs(g.ValLoss-want.ValLoss) > 1e-12*math.Abs(want.ValLoss) || g.ValLoss != got[0].ValLoss {
				t.Fatalf("k=%d rank %d: validation loss %v (rank 0 %v), Run %v", k, r, g.ValLoss, got[0].ValLoss, want.ValLoss)
			}
		}
	}
	if _, err := ev.RunShard(model, 2, 2, func([]float64) error { return nil }); err == nil {
		t.Fatal("shard 2 of 2 accepted")
	}
	full, err := NewEvaluator(b, pd.Dataset, x, sparse, cfg.Train)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Free()
	if full.Shardable() {
		t.Fatal("whole-graph evaluation reported as shardable")
	}
	if _, err := full.RunShard(model, 0, 2, func([]float64) error { return nil }); err == nil {
		t.Fatal("whole-graph evaluation split")
	}
}

// presampleReference is PresampleOrder's pass done the plain way: one
// whole-graph sampler, the batches in order, int64 counts.
func presampleReference(t *testing.T, in *graph.CSR, pd *Partitioned, cfg *Config) []graph.NodeID {
	t.Helper()
	plan, err := NewPresamplePlan(pd, cfg)
	if err != nil {
		t.Fatal(err)
	}
	smp, done, err := WholeGraphSampler(in, cfg.Scheme, cfg.Train.Fanouts, cfg.Replace, cfg.Weighted)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	counts := make([]int64, in.NumRows)
	for r, batches := range plan.Batches {
		for i, seeds := range batches {
			mb, err := smp.Sample(seeds, plan.Key(r, i))
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

// TestPresampleOrderWorkers: the pre-sampling order is the same with 1
// goroutine or several (more than there are batches too), node-wise and
// layer-wise, and equals the plain sequential pass; a cancelled context
// stops it.
func TestPresampleOrderWorkers(t *testing.T) {
	ds := tiny(t)
	for _, scheme := range []string{NodeWise, LayerWise} {
		t.Run(scheme, func(t *testing.T) {
			cfg := small(3, 1)
			cfg.Train.BatchSize = 32
			cfg.Scheme = scheme
			if scheme == LayerWise {
				cfg.Train.Fanouts = []int{200, 400}
			}
			if err := cfg.Normalize(); err != nil {
				t.Fatal(err)
			}
			pd, err := Partition(context.Background(), ds, &cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			in := pd.Dataset.InGraph()
			plan, err := NewPresamplePlan(pd, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(plan.Batches[0]); len(plan.Batches) != 3 || n < 4 {
				t.Fatalf("%d devices with %d batches each: too few to spread", len(plan.Batches), n)
			}
			want := presampleReference(t, in, pd, &cfg)
			if len(want) != int(in.NumRows) {
				t.Fatalf("order of %d nodes for %d", len(want), in.NumRows)
			}
			for _, w := range []int{1, 2, 3, 7, 1000} {
				got, err := presampleOrder(context.Background(), in, pd, &cfg, w)
				if err != nil {
					t.Fatalf("%d workers: %v", w, err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%d workers: order differs from the sequential pass", w)
				}
			}
			got, err := PresampleOrder(context.Background(), in, pd, &cfg)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("PresampleOrder: %v (order equal: %v)", err, slices.Equal(got, want))
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := presampleOrder(ctx, in, pd, &cfg, 2); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled pass returned %v", err)
			}
			if _, err := PresampleOrder(context.Background(), in, nil, &cfg); err == nil {
				t.Fatal("nil partition accepted")
			}
		})
	}
}

// BenchmarkPresampleOrder: the host pre-sampling pass on the
// products-hard-s shape (49K nodes, 2.5M edges; fanouts 15,10,5, batches
// of 256 over 2 devices) with 1 goroutine and with GOMAXPROCS.
func BenchmarkPresampleOrder(b *testing.B) {
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
	pd, err := Partition(context.Background(), ds, &cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	in := pd.Dataset.InGraph()
	plan, err := NewPresamplePlan(pd, &cfg)
	if err != nil {
		b.Fatal(err)
	}
	batches := len(plan.Batches) * len(plan.Batches[0])
	for _, w := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			for b.Loop() {
				if _, err := presampleOrder(context.Background(), in, pd, &cfg, w); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*batches), "ms/batch")
		})
	}
}
