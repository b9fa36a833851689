package link

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/train"
)

func TestMain(m *testing.M) {
	progress.Quiet = true
	os.Exit(m.Run())
}

// communities is a planted-partition graph: k groups of size nodes,
// edges inside a group with probability pIn and across with pOut, both
// directions stored; a node's features are its group's one-hot plus
// noise. Links inside groups are easy to predict: a small model reaches
// a high AUC in a few epochs.
func communities(t testing.TB, k, size int, pIn, pOut float64, seed uint64) *dataset.Dataset {
	t.Helper()
	n := k * size
	st := rng.NewStream(seed)
	var src, dst []int32
	for u := range n {
		for v := u + 1; v < n; v++ {
			p := pOut
			if u/size == v/size {
				p = pIn
			}
			if float64(st.Uniform01()) < p {
				src, dst = append(src, int32(u), int32(v)), append(dst, int32(v), int32(u))
			}
		}
	}
	g, err := graph.FromEdges(int64(n), src, dst)
	if err != nil {
		t.Fatal(err)
	}
	dim := k
	x := make([]float32, n*dim)
	for u := range n {
		for j := range dim {
			x[u*dim+j] = 0.5 * st.Uniform01()
		}
		x[u*dim+u/size] += 1
	}
	return &dataset.Dataset{Name: "communities", Graph: g, FeatDim: dim, Features: x}
}

// quick is a small full-graph configuration for the synthetic graph.
func quick(model string) Config {
	c := Defaults(model)
	c.Hidden, c.Epochs, c.Dropout = 16, 15, 0
	if model == train.GAT {
		c.Hidden, c.Heads = 8, 2
	}
	return c
}

func runCfg(t *testing.T, ds *dataset.Dataset, cfg Config) *Report {
	t.Helper()
	rep, err := Run(context.Background(), ds, cfg, Options{Backend: cpuBackend(t)})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestLearnsCommunities: every encoder, decoder, mode, negative
// distribution and evaluation mode learns the planted links (test AUC
// well above chance), and the report holds what it says.
func TestLearnsCommunities(t *testing.T) {
	// 8 groups, few links across: a model that only tells whether two
	// nodes share a group scores an AUC near 0.92 against uniform
	// negatives (1 in 8 of which share a group).
	ds := communities(t, 8, 25, 0.3, 0.002, 1)
	cases := map[string]func(*Config){
		"gcn full dot":             func(*Config) {},
		"gcn full mlp":             func(c *Config) { c.Decoder = DecoderMLP; c.Epochs = 30 },
		"gcn full degree excluded": func(c *Config) { c.NegSample, c.NegExclude, c.NegRatio = NegDegree, true, 2 },
		"gcn full batches":         func(c *Config) { c.BatchSize = 100 },
		"sage sampled":             func(c *Config) { c.Model, c.Mode, c.BatchSize, c.Fanouts = train.SAGE, train.Sampled, 64, []int{5, 5} },
		"sage sampled eval sampled": func(c *Config) {
			c.Model, c.Mode, c.BatchSize, c.Fanouts = train.SAGE, train.Sampled, 64, []int{5, 5}
			c.Eval, c.EvalFanouts, c.EvalBatchSize = train.Sampled, []int{-1, -1}, 50
		},
		"gat full": func(c *Config) { c.Model, c.Heads, c.Hidden, c.LR, c.Epochs = train.GAT, 2, 8, 0.01, 30 },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := quick(train.GCN)
			edit(&cfg)
			rep := runCfg(t, ds, cfg)
			t.Logf("val %s, test %s (epoch %d)", MetricsLine(rep.Val, cfg.HitsK), MetricsLine(rep.Test, cfg.HitsK), rep.SelectedEpoch)
			if rep.Test.AUC < 0.85 {
				t.Fatalf("test AUC %.4f < 0.85 on planted communities", rep.Test.AUC)
			}
			if len(rep.Epochs) != cfg.Epochs || rep.Task != "link" || rep.Split.Test == 0 || rep.Split.TestNeg != rep.Split.Test {
				t.Fatalf("report: %d epochs, task %q, split %+v", len(rep.Epochs), rep.Task, rep.Split)
			}
			best := rep.Epochs[rep.SelectedEpoch-1]
			for _, e := range rep.Epochs {
				if e.Val.AUC > best.Val.AUC {
					t.Fatalf("epoch %d has val AUC %.4f above the selected epoch %d's %.4f", e.Epoch, e.Val.AUC, best.Epoch, best.Val.AUC)
				}
			}
			if rep.Test != best.Test {
				t.Fatalf("headline test metrics %+v are not the selected epoch's %+v", rep.Test, best.Test)
			}
			first, last := rep.Epochs[0].Loss, rep.Epochs[len(rep.Epochs)-1].Loss
			if !(last < first) {
				t.Fatalf("training loss went from %.4f to %.4f", first, last)
			}
		})
	}
}

// TestDeterministic: the same seed gives bit-identical losses and
// metrics whatever GOMAXPROCS is; another seed gives another run.
func TestDeterministic(t *testing.T) {
	ds := communities(t, 4, 30, 0.3, 0.02, 2)
	for _, mode := range []string{train.Full, train.Sampled} {
		cfg := quick(train.SAGE)
		cfg.Mode, cfg.Epochs, cfg.Dropout, cfg.BatchSize, cfg.Fanouts = mode, 3, 0.3, 50, []int{4, 4}
		cfg.NegSample, cfg.NegExclude = NegDegree, true
		var reps []*Report
		for _, procs := range []int{1, 2} {
			old := runtime.GOMAXPROCS(procs)
			reps = append(reps, runCfg(t, ds, cfg))
			runtime.GOMAXPROCS(old)
		}
		a, b := reps[0], reps[1]
		for i := range a.Epochs {
			ea, eb := a.Epochs[i], b.Epochs[i]
			if !slices.Equal(ea.BatchLosses, eb.BatchLosses) || ea.Val != eb.Val || ea.Test != eb.Test {
				t.Fatalf("%s epoch %d differs with GOMAXPROCS 1 and 2: %+v vs %+v", mode, i+1, ea, eb)
			}
		}
		cfg.Seed = 2
		if c := runCfg(t, ds, cfg); slices.Equal(c.Epochs[0].BatchLosses, a.Epochs[0].BatchLosses) {
			t.Fatalf("%s: seeds 1 and 2 gave the same losses", mode)
		}
	}
}

// TestNegativesExclusion: with NegExclude no training negative is a
// training link or a self-pair (rows hold under half the nodes, so 20
// draws find a non-edge but with probability about 1e-8), but held-out links can be drawn (they are
// unknown to training); without it training links are drawn too. The
// k negatives of a step follow its positives.
func TestNegativesExclusion(t *testing.T) {
	ds := communities(t, 2, 6, 0.6, 0.1, 3) // 12 nodes: every pair is drawn often
	for _, dist := range []string{NegUniform, NegDegree} {
		cfg := Defaults(train.GCN)
		cfg.NegSample, cfg.NegRatio, cfg.Split = dist, 3, Fractions{0.6, 0.2, 0.2}
		s, err := NewSplit(ds.Graph, cfg.Split, 4)
		if err != nil {
			t.Fatal(err)
		}
		held := map[pair]bool{}
		for _, p := range append(pairs(s.Val), pairs(s.Test)...) {
			held[p], held[pair{p.v, p.u}] = true, true
		}
		for _, exclude := range []bool{true, false} {
			cfg.NegExclude = exclude
			ns, err := NewNegatives(s, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			var known, heldOut int
			for batch := range 50 {
				neg, err := ns.Draw(s.Train, 0, batch)
				if err != nil {
					t.Fatal(err)
				}
				if neg.Len() != 3*s.Train.Len() {
					t.Fatalf("%d negatives for %d positives at ratio 3", neg.Len(), s.Train.Len())
				}
				for _, p := range pairs(neg) {
					if p.u == p.v || hasEdge(s.Out, p.u, p.v) {
						known++
					}
					if held[p] {
						heldOut++
					}
				}
			}
			t.Logf("%s exclude=%v: %d known pairs, %d held-out pairs drawn", dist, exclude, known, heldOut)
			if exclude && known > 0 {
				t.Fatalf("%s: %d negatives are training links or self-pairs despite NegExclude", dist, known)
			}
			if !exclude && known == 0 {
				t.Fatalf("%s: no negative is a training link without exclusion: the draw is not uniform over pairs", dist)
			}
			if heldOut == 0 {
				t.Fatalf("%s exclude=%v: no held-out link was ever drawn: they must not be excluded", dist, exclude)
			}
		}
	}
}

func TestBatch(t *testing.T) {
	b := NewBatch(Edges{Src: []int32{5, 2}, Dst: []int32{9, 5}}, Edges{Src: []int32{5, 5, 2, 2}, Dst: []int32{7, 2, 0, 9}})
	if !slices.Equal(b.Seeds, []int32{0, 2, 5, 7, 9}) {
		t.Fatalf("seeds %v", b.Seeds)
	}
	if !slices.Equal(b.Labels, []int32{1, 1, 0, 0, 0, 0}) {
		t.Fatalf("labels %v", b.Labels)
	}
	for i := range b.Src {
		if b.Seeds[b.SrcRow[i]] != b.Src[i] || b.Seeds[b.DstRow[i]] != b.Dst[i] {
			t.Fatalf("pair %d (%d,%d) maps to seeds %d,%d", i, b.Src[i], b.Dst[i], b.Seeds[b.SrcRow[i]], b.Seeds[b.DstRow[i]])
		}
	}
}

func TestRunRefuses(t *testing.T) {
	ds := communities(t, 2, 20, 0.3, 0.05, 5)
	b := cpuBackend(t)
	var de *DataError
	noFeat := *ds
	noFeat.Features, noFeat.FeatDim = nil, 0
	if _, err := Run(context.Background(), &noFeat, quick(train.GCN), Options{Backend: b}); !errors.As(err, &de) {
		t.Errorf("no features: %v, want a *DataError", err)
	}
	var ce *train.ConfigError
	for name, edit := range map[string]func(*Config){
		"neg ratio 0":   func(c *Config) { c.NegRatio = 0 },
		"decoder":       func(c *Config) { c.Decoder = "bilinear" },
		"negatives":     func(c *Config) { c.NegSample = "popular" },
		"hits 0":        func(c *Config) { c.HitsK = 0 },
		"split sum":     func(c *Config) { c.Split = Fractions{0.9, 0.1, 0.1} },
		"sampled batch": func(c *Config) { c.Mode, c.BatchSize = train.Sampled, 0 },
		"fanouts":       func(c *Config) { c.Mode, c.BatchSize, c.Fanouts = train.Sampled, 8, []int{5} },
		"mode":          func(c *Config) { c.Mode = "fullgraph" },
		"typed model":   func(c *Config) { c.Model = "rgcn" },
		"lr":            func(c *Config) { c.LR = math.NaN() },
	} {
		cfg := quick(train.GCN)
		edit(&cfg)
		if _, err := Run(context.Background(), ds, cfg, Options{Backend: b}); !errors.As(err, &ce) {
			t.Errorf("%s: %v, want a *train.ConfigError", name, err)
		}
	}
	if _, err := Run(context.Background(), ds, quick(train.GCN), Options{}); err == nil {
		t.Error("no back end accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, ds, quick(train.GCN), Options{Backend: b}); !errors.Is(err, ErrInterrupted) {
		t.Errorf("cancelled context: %v, want ErrInterrupted", err)
	}
	// Cancelled during an epoch, while the next batch is prepared ahead
	// (prefetch): the run stops after the step under way.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	cfg := quick(train.SAGE)
	cfg.Mode, cfg.BatchSize, cfg.Fanouts, cfg.Epochs = train.Sampled, 20, []int{3, 3}, 2
	steps := 0
	_, err := Run(ctx, ds, cfg, Options{Backend: b, OnBatch: func(e, bi int, _ float64) {
		if steps++; e == 0 && bi == 1 {
			cancel()
		}
	}})
	if !errors.Is(err, ErrInterrupted) || steps != 2 {
		t.Errorf("cancelled after step 2: %v after %d steps, want ErrInterrupted after 2", err, steps)
	}
}

func TestReportJSON(t *testing.T) {
	ds := communities(t, 2, 20, 0.3, 0.05, 6)
	cfg := quick(train.GCN)
	cfg.Epochs, cfg.EvalEvery = 4, 3
	rep := runCfg(t, ds, cfg)
	path := filepath.Join(t.TempDir(), "r.json")
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
	if back.Task != "link" || back.HitsK != 50 || len(back.Epochs) != 4 || back.Test != rep.Test || back.Config.Decoder != DecoderDot {
		t.Fatalf("report read back: %+v", back)
	}
	// Epochs 1 and 2 were not evaluated (every 3rd and the last are).
	if !back.Epochs[0].EvalSkipped || !back.Epochs[1].EvalSkipped || back.Epochs[2].EvalSkipped || back.Epochs[3].EvalSkipped {
		t.Fatalf("evaluated epochs: %v %v %v %v", back.Epochs[0].EvalSkipped, back.Epochs[1].EvalSkipped, back.Epochs[2].EvalSkipped, back.Epochs[3].EvalSkipped)
	}
	if back.SelectedEpoch != 3 && back.SelectedEpoch != 4 {
		t.Fatalf("selected epoch %d was not evaluated", back.SelectedEpoch)
	}
}

// TestSampledEvalMatchesFull: sampled evaluation taking every neighbor
// (fanouts -1) in small batches embeds the nodes as the whole-graph pass
// does, so the training is the same and the metrics agree (up to the
// summation order of the aggregations).
func TestSampledEvalMatchesFull(t *testing.T) {
	ds := communities(t, 4, 20, 0.3, 0.02, 7)
	cfg := quick(train.SAGE)
	cfg.Mode, cfg.BatchSize, cfg.Fanouts, cfg.Epochs = train.Sampled, 40, []int{3, 3}, 3
	full := runCfg(t, ds, cfg)
	cfg.Eval, cfg.EvalFanouts, cfg.EvalBatchSize = train.Sampled, []int{-1, -1}, 7
	smp := runCfg(t, ds, cfg)
	for i := range full.Epochs {
		a, b := full.Epochs[i], smp.Epochs[i]
		if !slices.Equal(a.BatchLosses, b.BatchLosses) {
			t.Fatalf("epoch %d: the evaluation changed the training losses", i+1)
		}
		for _, m := range [][2]Metrics{{a.Val, b.Val}, {a.Test, b.Test}} {
			if math.Abs(m[0].AUC-m[1].AUC) > 1e-6 || math.Abs(m[0].MRR-m[1].MRR) > 1e-6 || math.Abs(m[0].Loss-m[1].Loss) > 1e-5 {
				t.Fatalf("epoch %d: full evaluation %+v, sampled with all neighbors %+v", i+1, m[0], m[1])
			}
		}
	}
}

// TestExcludeTargets: after ExcludeTargets no block edge joins the two
// endpoints of a positive (either direction) and every other sampled
// edge is kept, in order.
func TestExcludeTargets(t *testing.T) {
	ds := communities(t, 2, 10, 0.6, 0.1, 8)
	smp, err := sample.NewNeighborSampler(ds.Graph, sample.Config{Fanouts: []int{-1, -1}})
	if err != nil {
		t.Fatal(err)
	}
	var pos Edges
	for u := int32(0); u < 20; u += 3 {
		if nb := ds.Graph.Neighbors(u); len(nb) > 0 {
			pos.add(nb[0], u) // reversed: exclusion ignores the direction
		}
	}
	b := NewBatch(pos, Edges{})
	mb, err := smp.Sample(b.Seeds, sample.Key{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	orig, err := smp.Sample(b.Seeds, sample.Key{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	isTarget := map[pair]bool{}
	for _, p := range pairs(pos) {
		isTarget[p], isTarget[pair{p.v, p.u}] = true, true
	}
	removed := ExcludeTargets(mb, pos)
	want := 0
	for l, blk := range orig.Blocks {
		var kept []pair
		for i := range blk.NumDst {
			for e := blk.Indptr[i]; e < blk.Indptr[i+1]; e++ {
				p := pair{blk.SrcNodes[i], blk.SrcNodes[blk.Indices[e]]}
				if isTarget[p] {
					want++
				} else {
					kept = append(kept, p)
				}
			}
		}
		got := mb.Blocks[l]
		var have []pair
		for i := range got.NumDst {
			for e := got.Indptr[i]; e < got.Indptr[i+1]; e++ {
				have = append(have, pair{got.SrcNodes[i], got.SrcNodes[got.Indices[e]]})
			}
		}
		if !slices.Equal(have, kept) {
			t.Fatalf("block %d: kept %v, want %v", l, have, kept)
		}
	}
	if removed != want || want == 0 {
		t.Fatalf("removed %d edges, want %d (> 0)", removed, want)
	}
}

// TestEstimateMemory: the estimate grows with what sizes it (the width,
// the batch in sampled mode, the negatives per edge, the MLP decoder).
func TestEstimateMemory(t *testing.T) {
	s := train.Shape{Nodes: 100000, Edges: 2000000, FeatDim: 128}
	total := func(edit func(*Config)) float64 {
		c := Defaults(train.SAGE)
		edit(&c)
		m := EstimateMemory(c, s)
		return m.Total()
	}
	base := total(func(*Config) {})
	for name, edit := range map[string]func(*Config){
		"hidden":    func(c *Config) { c.Hidden *= 4 },
		"batch":     func(c *Config) { c.BatchSize *= 8 },
		"neg ratio": func(c *Config) { c.NegRatio = 5 },
		"mlp":       func(c *Config) { c.Decoder = DecoderMLP },
		"full":      func(c *Config) { c.Mode, c.BatchSize = train.Full, 0 },
	} {
		if got := total(edit); !(got > base) {
			t.Errorf("%s: estimate %.0f not above the default's %.0f", name, got, base)
		}
	}
}

// TestScoreChunks: the evaluation scores its pairs in chunks (bounded
// device memory at the products shape) to the same metrics as all at
// once, with both decoders.
func TestScoreChunks(t *testing.T) {
	ds := communities(t, 4, 30, 0.3, 0.02, 2)
	for _, dec := range []string{"dot", "mlp"} {
		cfg := quick(train.SAGE)
		cfg.Epochs, cfg.Decoder = 2, dec
		whole := runCfg(t, ds, cfg)
		old := scoreChunkBytes
		scoreChunkBytes = 3 * 4 * cfg.Hidden * 7 // 7 pairs a chunk
		chunked := runCfg(t, ds, cfg)
		scoreChunkBytes = old
		for i := range whole.Epochs {
			a, b := whole.Epochs[i], chunked.Epochs[i]
			if a.Val != b.Val || a.Test != b.Test {
				t.Fatalf("%s epoch %d: chunked scores give %+v / %+v, whole %+v / %+v", dec, i+1, b.Val, b.Test, a.Val, a.Test)
			}
		}
		if whole.Epochs[len(whole.Epochs)-1].Test.AUC <= 0.5 {
			t.Fatalf("%s: test AUC %v: nothing learned, the comparison says little", dec, whole.Epochs[len(whole.Epochs)-1].Test.AUC)
		}
	}
}
