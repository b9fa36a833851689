package link

import (
	"context"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/train"
)

// smallHetero is the hetero preset with 400 papers (about 1200 writes
// links between 200 authors and 400 papers).
func smallHetero(t testing.TB) *dataset.Hetero {
	t.Helper()
	c := gen.HeteroPreset()
	c.Papers, c.Seed = 400, 2
	h, err := gen.GenerateHetero(c)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestHeteroStoredSplit: a stored split of the relation (written and read
// back through edge_split/) with the run's seed gives the in-run split's
// run: the same parts, every batch loss and every epoch's metrics equal;
// only the split's source differs. The held-out links are in neither the
// relation nor its reverse in message passing.
func TestHeteroStoredSplit(t *testing.T) {
	h := smallHetero(t)
	cfg := HeteroDefaults(train.HSAGE, "author,writes,paper")
	cfg.Relation = "writes"
	cfg.Seed, cfg.Epochs, cfg.Hidden, cfg.BatchSize = 4, 2, 16, 256
	cfg.NegSample, cfg.NegExclude, cfg.NegRatio = NegDegree, true, 2
	rel := h.EdgeType("writes")
	es, err := split.RelationEdges(h, rel, split.Fractions{0.85, 0.05, 0.10}, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := es.Replace(dir); err != nil {
		t.Fatal(err)
	}
	stored, err := split.ReadRelationEdges(dir, h, rel)
	if err != nil {
		t.Fatal(err)
	}
	run := func(es *split.EdgeSplit) (*HeteroReport, [][2]float64) {
		var losses [][2]float64
		rep, err := RunHetero(context.Background(), h, cfg, Options{Backend: cpuBackend(t), EdgeSplit: es,
			OnBatch: func(e, b int, loss float64) { losses = append(losses, [2]float64{float64(e*1000 + b), loss}) }})
		if err != nil {
			t.Fatal(err)
		}
		return rep, losses
	}
	inRun, l1 := run(nil)
	fromFile, l2 := run(stored)
	if inRun.Split.Source != SourceRandom || fromFile.Split.Source != SourceStored {
		t.Fatalf("sources %q, %q", inRun.Split.Source, fromFile.Split.Source)
	}
	a, b := inRun.Split, fromFile.Split
	a.Source, b.Source = "", ""
	if a != b || a.Train != len(es.Src[0]) || a.Test != len(es.Src[2]) {
		t.Fatalf("splits %+v and %+v; the stored one has %d/%d/%d links", a, b, len(es.Src[0]), len(es.Src[1]), len(es.Src[2]))
	}
	if len(l1) == 0 || !slices.Equal(l1, l2) {
		t.Fatalf("batch losses differ:\n%v\n%v", l1, l2)
	}
	if !reflect.DeepEqual(inRun.Epochs[len(inRun.Epochs)-1].Test, fromFile.Epochs[len(fromFile.Epochs)-1].Test) || inRun.Test != fromFile.Test || inRun.Val != fromFile.Val {
		t.Fatalf("metrics: in-run test %+v val %+v; stored test %+v val %+v", inRun.Test, inRun.Val, fromFile.Test, fromFile.Val)
	}
	if fromFile.Config.NegSample != NegDegree || !fromFile.Config.NegExclude {
		t.Fatalf("report config %+v", fromFile.Config)
	}

	// Message passing: no held-out link in either direction.
	r := &heteroRunner{cfg: cfg, b: cpuBackend(t)}
	if r.tl, err = findRelation(h, cfg.Relation); err != nil {
		t.Fatal(err)
	}
	defer r.free()
	if err := r.build(h, stored); err != nil {
		t.Fatal(err)
	}
	if r.tl.rev < 0 {
		t.Fatal("the preset has no rev_writes")
	}
	in, rev := r.mp.EdgeTypes[r.tl.rel].In, r.mp.EdgeTypes[r.tl.rev].In
	for _, part := range []int{1, 2} {
		for j := range stored.Src[part] {
			u, v := stored.Src[part][j], stored.Dst[part][j]
			if slices.Contains(in.Neighbors(v), u) || slices.Contains(rev.Neighbors(u), v) {
				t.Fatalf("held-out link %d -> %d is in message passing", u, v)
			}
		}
	}
	for j := range stored.Src[0][:50] {
		u, v := stored.Src[0][j], stored.Dst[0][j]
		if !slices.Contains(in.Neighbors(v), u) || !slices.Contains(rev.Neighbors(u), v) {
			t.Fatalf("training link %d -> %d is not in message passing", u, v)
		}
	}

	// A split of another relation is refused.
	other, err := split.RelationEdges(h, h.EdgeType("has_topic"), split.Fractions{0.8, 0.1, 0.1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RunHetero(context.Background(), h, cfg, Options{Backend: cpuBackend(t), EdgeSplit: other}); err == nil {
		t.Fatal("a split of paper___has_topic___field trained author___writes___paper")
	}
}

// heteroDraws builds a typed run's negatives (cfg's) on h's writes
// relation and draws rounds x NegRatio negatives per training link.
func heteroDraws(t *testing.T, h *dataset.Hetero, cfg HeteroConfig, rounds int) (*heteroRunner, Edges) {
	t.Helper()
	r := &heteroRunner{cfg: cfg, b: cpuBackend(t)}
	var err error
	if r.tl, err = findRelation(h, cfg.Relation); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.free)
	if err := r.build(h, nil); err != nil {
		t.Fatal(err)
	}
	var all Edges
	for i := range rounds {
		neg, err := r.negs.Draw(r.split.Train, 0, i)
		if err != nil {
			t.Fatal(err)
		}
		if neg.Len() != r.split.Train.Len()*cfg.NegRatio {
			t.Fatalf("%d negatives for %d links x %d", neg.Len(), r.split.Train.Len(), cfg.NegRatio)
		}
		all.Src, all.Dst = append(all.Src, neg.Src...), append(all.Dst, neg.Dst...)
	}
	return r, all
}

// checkDraws compares the counts of draws of nodes lo..hi-1 (n draws in
// all) with the weights w[lo:hi]: a node of weight 0 is never drawn; each
// count is within 5 binomial standard deviations of n*p (a node misses
// that with probability 6e-7, so the whole check about 1e-3 of the time
// for 1000 nodes: the fixed seed makes it pass or fail for good); and
// the chi-square statistic over the nodes is below its mean plus 5
// standard deviations (k-1 and sqrt(2(k-1)) for k nodes).
func checkDraws(t *testing.T, what string, ids []int32, lo, hi int32, w []float32) {
	t.Helper()
	counts := make([]float64, hi-lo)
	for _, v := range ids {
		if v < lo || v >= hi {
			t.Fatalf("%s: drew %d, outside [%d, %d)", what, v, lo, hi)
		}
		counts[v-lo]++
	}
	var total float64
	for _, x := range w[lo:hi] {
		total += float64(x)
	}
	n := float64(len(ids))
	chi, k := 0.0, 0
	for i, c := range counts {
		p := float64(w[lo+int32(i)]) / total
		if p == 0 {
			if c != 0 {
				t.Fatalf("%s: node %d of weight 0 drawn %v times", what, lo+int32(i), c)
			}
			continue
		}
		e := n * p
		if d := math.Abs(c - e); d > 5*math.Sqrt(e*(1-p)) {
			t.Fatalf("%s: node %d drawn %v times, expected %.1f (p %.5f of %v draws)", what, lo+int32(i), c, e, p, n)
		}
		chi += (c - e) * (c - e) / e
		k++
	}
	if lim := float64(k-1) + 5*math.Sqrt(2*float64(k-1)); chi > lim {
		t.Fatalf("%s: chi-square %.1f over %d nodes, above %.1f", what, chi, k, lim)
	}
	t.Logf("%s: %v draws over %d nodes, chi-square %.1f (dof %d)", what, n, k, chi, k-1)
}

// TestHeteroNegativeDistributions: a typed run's training negatives pair
// a source-type node with a destination-type node; uniform ones are
// uniform over each type; degree-biased ones follow out-degree^0.75 of
// the sources and in-degree^0.75 of the destinations in the relation's
// training links (nodes without one are never drawn). About 100k draws
// each, over 200 authors and 400 papers.
func TestHeteroNegativeDistributions(t *testing.T) {
	h := smallHetero(t)
	cfg := HeteroDefaults(train.HSAGE, "writes")
	cfg.Seed, cfg.NegRatio = 9, 10
	for _, mode := range []string{NegUniform, NegDegree} {
		cfg.NegSample = mode
		r, neg := heteroDraws(t, h, cfg, 10)
		off, end := r.tl.off, r.tl.off+int32(r.tl.nDst)
		srcW, dstW := make([]float32, end), make([]float32, end)
		if mode == NegDegree {
			srcW, dstW = DegreeWeights(r.split.Out), DegreeWeights(r.split.In)
			zero := 0
			for _, x := range dstW[off:] {
				if x == 0 {
					zero++
				}
			}
			if zero == 0 {
				t.Fatal("every paper has a training link: the check of weight 0 checks nothing")
			}
		} else {
			for v := range srcW {
				if int32(v) < off {
					srcW[v] = 1
				} else {
					dstW[v] = 1
				}
			}
		}
		checkDraws(t, mode+" sources", neg.Src, 0, off, srcW)
		checkDraws(t, mode+" destinations", neg.Dst, off, end, dstW)
	}
}

// TestHeteroNegativeExclusion: with NegExclude no negative is a training
// link of the relation (without it, some are, so the check can fail), and
// held-out links are not excluded (they are unknown to training).
func TestHeteroNegativeExclusion(t *testing.T) {
	h := smallHetero(t)
	cfg := HeteroDefaults(train.HSAGE, "writes")
	cfg.Seed, cfg.NegRatio = 9, 20
	for _, mode := range []string{NegUniform, NegDegree} {
		cfg.NegSample = mode
		known := func(r *heteroRunner, neg Edges) int {
			k := 0
			for i := range neg.Src {
				if hasEdge(r.split.Out, neg.Src[i], neg.Dst[i]) {
					k++
				}
			}
			return k
		}
		cfg.NegExclude = false
		r, neg := heteroDraws(t, h, cfg, 5)
		without := known(r, neg)
		cfg.NegExclude = true
		r, neg = heteroDraws(t, h, cfg, 5)
		with := known(r, neg)
		t.Logf("%s: %d of %d negatives are training links without exclusion, %d with", mode, without, neg.Len(), with)
		if without == 0 || with != 0 {
			t.Fatalf("%s: %d training links among the negatives without exclusion, %d with", mode, without, with)
		}
	}
}
