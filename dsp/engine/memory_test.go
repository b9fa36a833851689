package engine

import (
	"math"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/infer"
	"github.com/strata-gnn/strata/train"
)

// papersShape is `strata gen --preset papers`' manifest, computed (not
// generated): 111,059,956 nodes, 128-d signed (Gaussian) features, 172
// classes, the splits' expected sizes, and 3.23B stored edges (the
// preset's mean degree less the 1% it loses to duplicates at full size).
func papersShape(t *testing.T) train.Shape {
	t.Helper()
	c, err := gen.Preset("papers")
	if err != nil {
		t.Fatal(err)
	}
	n := c.NumNodes
	return train.Shape{Nodes: n, Edges: int64(float64(n) * c.AvgDegree * 0.99), FeatDim: int64(c.FeatDim),
		Classes: int64(c.NumClasses), TrainNodes: int64(float64(n) * c.TrainFrac),
		EvalNodes: int64(float64(n) * (c.TrainFrac + c.ValFrac + c.TestFrac)), Signed: true}
}

func papersConfig(t *testing.T, k int, edit func(*Config)) Config {
	t.Helper()
	cfg := Defaults(train.SAGE, k)
	cfg.CachePolicy, cfg.Partition = cache.Auto, Range // the command's defaults with --partition range
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func part(m train.MemoryEstimate, what string) (train.MemoryPart, bool) {
	for _, p := range m.Parts {
		if p.What == what {
			return p, true
		}
	}
	return train.MemoryPart{}, false
}

// TestEstimateMemoryPapersShape: on 4 GPUs caching every row (the
// defaults), the papers shape's host memory besides the dataset is the
// in-adjacency, the patches' row offsets and the layer-wise evaluation's
// hidden layer: about 45 GiB, where the estimate once counted 171 GB of
// normalized features and setup garbage that setup does not hold (the
// features are signed: no normalized copy; the table goes up in chunks:
// no pinned copy). With --cache 0 every GPU pins the table, and the
// estimate says so.
func TestEstimateMemoryPapersShape(t *testing.T) {
	s := papersShape(t)
	n, e, f := float64(s.Nodes), float64(s.Edges), float64(s.FeatDim)
	if s.Nodes != 111_059_956 || s.FeatDim != 128 || s.Classes != 172 || e < 3.1e9 || e > 3.3e9 {
		t.Fatalf("papers shape %+v: not the preset's", s)
	}
	cfg := papersConfig(t, 4, nil)
	if cfg.Train.Layers != 2 || cfg.Train.Hidden != 64 || cfg.Train.Eval != train.Full {
		t.Fatalf("defaults changed: %d layers, hidden %d, eval %s", cfg.Train.Layers, cfg.Train.Hidden, cfg.Train.Eval)
	}
	m := EstimateMemory(cfg, s, false)
	table := 4 * n * f
	for _, gone := range []string{"setup garbage", "normalized features", "pinned feature table", "feature upload staging"} {
		if p, ok := part(m, gone); ok {
			t.Errorf("%q counted: %+v (%s)", gone, p, m.String())
		}
	}
	// By hand: in-adjacency 12n+4e; per GPU the patch's row offsets
	// (8(n+1)) and places (n/4); the evaluation's first layer for every
	// node (4n x 64) and the last for the split nodes (4 x 172 each);
	// the chunk builders' scratches (8n a builder, by the host's cores).
	scratch := float64(infer.ScratchBytes(s.Nodes, 4))
	want := 12*n + 4*e + 4*(8*(n+1)+n/4) + 4*n*64 + 4*float64(s.EvalNodes)*172 + scratch
	if got := m.Total(); math.Abs(got-want) > 1e-9*want {
		t.Errorf("total %.4g bytes, want %.4g (%s)", got, want, m.String())
	}
	if got := m.Total() - scratch; got > 48<<30 || got < 40<<30 {
		t.Errorf("total %.1f GiB, want about 45 GiB (%s)", got/(1<<30), m.String())
	}
	if table < 56e9 || table > 57e9 {
		t.Fatalf("feature table %.4g bytes", table)
	}

	// --cache 0: every GPU reads every row through UVA from its own
	// pinned copy of the table (feature.New), and stages nothing else.
	uva := EstimateMemory(papersConfig(t, 4, func(c *Config) { c.CacheBytes = 0 }), s, false)
	if p, ok := part(uva, "pinned feature table"); !ok || p.Bytes != table || p.Count != 4 || p.Flag != "--cache" {
		t.Errorf("--cache 0: pinned table %+v (ok %v), want %.4g bytes x 4 naming --cache", p, ok, table)
	}
	if d := uva.Total() - m.Total(); math.Abs(d-4*table-4*(256<<20)) > 1 {
		t.Errorf("--cache 0 adds %.4g bytes, want 4 pinned tables and staging chunks (%s)", d, uva.String())
	}
	// A partial cache on 1 GPU: one pinned copy; the whole table on 1
	// GPU: none.
	one := EstimateMemory(papersConfig(t, 1, func(c *Config) { c.CacheBytes = 1 << 30 }), s, false)
	if p, ok := part(one, "pinned feature table"); !ok || p.Count != 1 {
		t.Errorf("1 GPU, 1 GiB cache: pinned table %+v (ok %v)", p, ok)
	}
	if _, ok := part(EstimateMemory(papersConfig(t, 1, nil), s, false), "pinned feature table"); ok {
		t.Error("1 GPU caching every row: a pinned table counted")
	}
	// --cache-policy partition with the whole table as budget: each GPU
	// caches its quarter, its peers the rest: no pinned table; with a
	// quarter of the table as budget the estimate counts the copies.
	partCfg := papersConfig(t, 4, func(c *Config) { c.CachePolicy = cache.Partition })
	if p, ok := part(EstimateMemory(partCfg, s, false), "pinned feature table"); ok {
		t.Errorf("partition policy, whole table: pinned table %+v counted", p)
	}
	quarter := papersConfig(t, 4, func(c *Config) { c.CachePolicy = cache.Partition; c.CacheBytes = int64(table / 4) })
	if p, ok := part(EstimateMemory(quarter, s, false), "pinned feature table"); !ok || p.Count != 4 {
		t.Errorf("partition policy, a quarter: pinned table %+v (ok %v)", p, ok)
	}

	// Non-negative features (or --row-norm on): the trainer's normalized
	// copy; bf16: a rounded copy and a pinned table of 2 bytes a value.
	s2 := s
	s2.Signed = false
	if p, ok := part(EstimateMemory(cfg, s2, false), "normalized features"); !ok || p.Bytes != table {
		t.Errorf("non-negative features: normalized copy %+v (ok %v)", p, ok)
	}
	off := papersConfig(t, 4, func(c *Config) { c.Train.RowNorm = train.RowNormOff })
	if _, ok := part(EstimateMemory(off, s2, false), "normalized features"); ok {
		t.Error("--row-norm off: a normalized copy counted")
	}
	bf := papersConfig(t, 4, func(c *Config) { c.Train.Precision = "bf16"; c.CacheBytes = 0 })
	mb := EstimateMemory(bf, s, false)
	if p, ok := part(mb, "pinned feature table"); !ok || p.Bytes != table/2 {
		t.Errorf("bf16: pinned table %+v (ok %v), want %.4g bytes", p, ok, table/2)
	}
	if _, ok := part(mb, "normalized features"); !ok {
		t.Errorf("bf16: the rounded copy not counted (%s)", mb.String())
	}

	// CPU virtual devices read the table in place: no pinned copy, and
	// each device's evaluation chunks within infer's budget, and the
	// chunk builders' scratches.
	host := EstimateMemory(papersConfig(t, 4, func(c *Config) { c.CacheBytes = 0 }), s, true)
	if _, ok := part(host, "pinned feature table"); ok {
		t.Error("CPU devices: a pinned table counted")
	}
	ev, _ := part(host, "evaluation")
	if want := 4*n*64 + 4*float64(s.EvalNodes)*172 + 4*infer.DefaultBudget + float64(infer.ScratchBytes(s.Nodes, 4)); math.Abs(ev.Bytes-want) > 1e-9*want {
		t.Errorf("CPU devices: evaluation %.4g bytes, want %.4g", ev.Bytes, want)
	}
	if strings.Contains(host.String(), "garbage") {
		t.Errorf("setup garbage on CPU devices: %s", host.String())
	}
}

// TestEstimateEvaluationReceptiveField: with the split nodes' in-degrees
// known, the layer below the last is counted for those nodes and their
// in-neighbors only (infer's plan computes no more), every node further
// down (the papers model, 3 x 256, on one GPU).
func TestEstimateEvaluationReceptiveField(t *testing.T) {
	s := papersShape(t)
	n, ev := float64(s.Nodes), float64(s.EvalNodes)
	cfg := papersConfig(t, 1, func(c *Config) { c.Train.Layers, c.Train.Hidden, c.Train.Fanouts = 3, 256, []int{15, 10, 5} })
	scratch := float64(infer.ScratchBytes(s.Nodes, 1))
	eval := func(s train.Shape) float64 {
		p, ok := part(EstimateMemory(cfg, s, false), "evaluation")
		if !ok {
			t.Fatal("no evaluation part")
		}
		return p.Bytes - scratch
	}
	// Unknown degrees: layers 1 and 2 for every node.
	if got, want := eval(s), 4*n*256+4*n*256; math.Abs(got-want) > 1e-9*want {
		t.Errorf("unknown degrees: %.4g bytes, want %.4g", got, want)
	}
	s.EvalEdges = 20 * s.EvalNodes
	r2 := ev + float64(s.EvalEdges)
	if got, want := eval(s), 4*n*256+4*r2*256; math.Abs(got-want) > 1e-9*want {
		t.Errorf("split nodes' degrees %d: %.4g bytes, want %.4g", s.EvalEdges, got, want)
	}
	// More in-edges than nodes: every node, never more.
	s.EvalEdges = 2 * s.Nodes
	if got, want := eval(s), 8*n*256; math.Abs(got-want) > 1e-9*want {
		t.Errorf("degrees past the node count: %.4g bytes, want %.4g", got, want)
	}
}
