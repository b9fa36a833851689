package sample

import (
	"errors"
	"runtime"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
)

func TestSeedBatches(t *testing.T) {
	train := []graph.NodeID{}
	for i := 0; i < 1000; i += 3 {
		train = append(train, graph.NodeID(i))
	}
	orig := slices.Clone(train)
	key := Key{Seed: 11, Epoch: 2}
	batches, err := SeedBatches(train, 64, key)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(train, orig) {
		t.Fatalf("train modified")
	}
	if len(batches) != NumBatches(len(train), 64) || len(batches) != 6 {
		t.Fatalf("%d batches", len(batches))
	}
	var all []graph.NodeID
	for i, b := range batches {
		if want := min(64, len(train)-64*i); len(b) != want {
			t.Fatalf("batch %d has %d seeds, want %d", i, len(b), want)
		}
		all = append(all, b...)
	}
	if slices.Equal(all, orig) {
		t.Fatalf("not shuffled")
	}
	slices.Sort(all)
	if !slices.Equal(all, orig) {
		t.Fatalf("batches are not a permutation of train")
	}
	again, _ := SeedBatches(train, 64, Key{Seed: 11, Epoch: 2, Batch: 99})
	if !slices.EqualFunc(again, batches, slices.Equal) {
		t.Fatalf("same (seed, epoch) gave a different order")
	}
	other, _ := SeedBatches(train, 64, Key{Seed: 11, Epoch: 3})
	if slices.Equal(other[0], batches[0]) {
		t.Fatalf("different epochs gave the same order")
	}
	// Uniformity: where element 0 of 10 lands, over 5000 epochs.
	ten := allNodes(10)
	counts := make([]int, 10)
	for e := range 5000 {
		b, _ := SeedBatches(ten, 10, Key{Seed: 1, Epoch: e})
		counts[slices.Index(b[0], 0)]++
	}
	chi, crit := chiSquare(counts, expectUniform(5000, 10)), chiCritical(9)
	t.Logf("position chi-square %.2f (0.999 critical %.2f)", chi, crit)
	if chi > crit {
		t.Fatalf("shuffle not uniform: %v", counts)
	}
	if _, err := SeedBatches(train, 0, key); !errors.Is(err, ErrConfig) {
		t.Fatalf("batch size 0: %v", err)
	}
	if _, err := SeedBatches([]graph.NodeID{1, -4}, 2, key); !errors.Is(err, ErrNode) {
		t.Fatalf("negative ID: %v", err)
	}
	if b, err := SeedBatches(nil, 5, key); err != nil || len(b) != 0 {
		t.Fatalf("empty train: %v %v", b, err)
	}
}

func TestRandomWalk(t *testing.T) {
	g := smallGraph() // rows as out-adjacency here: 3 is a dead end
	starts := []graph.NodeID{0, 0, 4, 3, 2}
	w, err := RandomWalk(g, starts, 6, Key{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Nodes) != 5*7 {
		t.Fatalf("%d nodes", len(w.Nodes))
	}
	for i := range starts {
		walk := w.Walk(i)
		if walk[0] != starts[i] {
			t.Fatalf("walk %d starts at %d", i, walk[0])
		}
		for s := 1; s < len(walk); s++ {
			prev, cur := walk[s-1], walk[s]
			if prev == -1 || g.Degree(prev) == 0 {
				if cur != -1 {
					t.Fatalf("walk %d continues after a dead end: %v", i, walk)
				}
				continue
			}
			if !slices.Contains(g.Neighbors(prev), cur) {
				t.Fatalf("walk %d step %d: %d->%d is not an edge", i, s, prev, cur)
			}
		}
	}
	if w3 := w.Walk(3); !slices.Equal(w3, []graph.NodeID{3, -1, -1, -1, -1, -1, -1}) {
		t.Fatalf("dead-end walk %v", w3)
	}
	if slices.Equal(w.Walk(0), w.Walk(1)) {
		// Two walks from 0 of 6 steps on this graph agree with low
		// probability; with this fixed key they must differ.
		t.Fatalf("repeated starts gave identical walks")
	}
	// Determinism across worker counts and uniform steps.
	big := randomGraph(t, 9, 4000, 8)
	starts = allNodes(4000)
	ref, err := RandomWalker{G: big, Length: 10, Workers: 1}.Walk(starts, Key{Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	old := runtime.GOMAXPROCS(8)
	defer runtime.GOMAXPROCS(old)
	for _, workers := range []int{0, 3, 8} {
		got, _ := RandomWalker{G: big, Length: 10, Workers: workers}.Walk(starts, Key{Seed: 4})
		if !slices.Equal(got.Nodes, ref.Nodes) {
			t.Fatalf("walks depend on Workers=%d", workers)
		}
	}
	// One step from the center of a star is uniform over its 8 leaves.
	st := star(8, nil)
	centers := make([]graph.NodeID, 8000)
	one, _ := RandomWalk(st, centers, 1, Key{Seed: 8})
	counts := make([]int, 8)
	for i := range centers {
		counts[one.Walk(i)[1]-1]++
	}
	chi, crit := chiSquare(counts, expectUniform(8000, 8)), chiCritical(7)
	t.Logf("step chi-square %.2f (0.999 critical %.2f)", chi, crit)
	if chi > crit {
		t.Fatalf("steps not uniform: %v", counts)
	}
	for _, c := range []struct {
		name string
		err  error
		kind error
	}{
		{"negative length", func() error { _, err := RandomWalk(g, starts[:1], -1, Key{}); return err }(), ErrConfig},
		{"start range", func() error { _, err := RandomWalk(g, []graph.NodeID{5}, 2, Key{}); return err }(), ErrNode},
		{"non-square", func() error {
			_, err := RandomWalk(&graph.CSR{NumRows: 1, NumCols: 2, Indptr: []int64{0, 0}, Indices: []graph.NodeID{}}, nil, 2, Key{})
			return err
		}(), ErrGraph},
		{"workers", func() error { _, err := RandomWalker{G: g, Length: 1, Workers: -1}.Walk(nil, Key{}); return err }(), ErrConfig},
	} {
		if !errors.Is(c.err, c.kind) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.kind)
		}
	}
}

func TestUniformNegativeSampler(t *testing.T) {
	g := randomGraph(t, 12, 300, 20)
	if err := graph.SortRows(g); err != nil {
		t.Fatal(err)
	}
	var src, dst []graph.NodeID
	for u := range graph.NodeID(300) {
		for _, v := range g.Neighbors(u) {
			src, dst = append(src, u), append(dst, v)
		}
	}
	ns, err := NewUniformNegativeSampler(g, NegativeConfig{K: 4, ExcludeEdges: true, Trials: 30})
	if err != nil {
		t.Fatal(err)
	}
	neg, err := ns.Negatives(src, dst, Key{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(neg) != 4*len(src) {
		t.Fatalf("%d negatives for %d edges", len(neg), len(src))
	}
	for i, d := range neg {
		u := src[i/4]
		if d < 0 || d >= 300 {
			t.Fatalf("negative %d out of range", d)
		}
		// Rows have at most ~160 of 300 entries, so 30 trials find a
		// non-edge except with probability < 1e-8 per draw.
		if _, isEdge := slices.BinarySearch(g.Neighbors(u), d); isEdge {
			t.Fatalf("negative (%d,%d) is an edge", u, d)
		}
	}
	// Determinism across workers.
	ns2, _ := NewUniformNegativeSampler(g, NegativeConfig{K: 4, ExcludeEdges: true, Trials: 30, Workers: 1})
	if neg2, _ := ns2.Negatives(src, dst, Key{Seed: 1}); !slices.Equal(neg, neg2) {
		t.Fatalf("negatives depend on Workers")
	}
	// Without exclusion the destinations are uniform over all nodes.
	sg := star(9, nil)
	plain, _ := NewUniformNegativeSampler(sg, NegativeConfig{K: 5})
	many := make([]graph.NodeID, 2000)
	out, _ := plain.Negatives(many, many, Key{Seed: 2})
	counts := make([]int, 10)
	for _, d := range out {
		counts[d]++
	}
	chi, crit := chiSquare(counts, expectUniform(10000, 10)), chiCritical(9)
	t.Logf("negative chi-square %.2f (0.999 critical %.2f)", chi, crit)
	if chi > crit {
		t.Fatalf("negatives not uniform: %v", counts)
	}
	unsorted := smallGraph()
	unsorted.Indices[5], unsorted.Indices[6] = 3, 0
	unsorted.Indices[0], unsorted.Indices[1] = 2, 1
	if _, err := NewUniformNegativeSampler(unsorted, NegativeConfig{K: 1, ExcludeEdges: true}); !errors.Is(err, ErrGraph) {
		t.Fatalf("unsorted rows accepted: %v", err)
	}
	if _, err := NewUniformNegativeSampler(g, NegativeConfig{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("K=0 accepted: %v", err)
	}
	if _, err := ns.Negatives(src[:2], dst[:1], Key{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("length mismatch accepted: %v", err)
	}
	if _, err := ns.Negatives([]graph.NodeID{300}, []graph.NodeID{0}, Key{}); !errors.Is(err, ErrNode) {
		t.Fatalf("bad src accepted: %v", err)
	}
	var _ NegativeSampler = ns
	var _ Walker = RandomWalker{}
	var _ Sampler = &NeighborSampler{}
	var _ HopSampler = &NeighborSampler{}
}
