package partition

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/metis"
)

var bg = context.Background()

func mustPartition(t *testing.T, s *graph.CSR, o Options) *Result {
	t.Helper()
	r, err := PartitionSymmetric(bg, s, o)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, s, o, r)
	return r
}

// checkResult verifies the reported numbers against the parts.
func checkResult(t *testing.T, s *graph.CSR, o Options, r *Result) {
	t.Helper()
	n := int(s.NumRows)
	if len(r.Parts) != n {
		t.Fatalf("%d parts for %d nodes", len(r.Parts), n)
	}
	for v, p := range r.Parts {
		if p < 0 || int(p) >= o.K {
			t.Fatalf("node %d in part %d, want [0, %d)", v, p, o.K)
		}
	}
	// Cut by brute force over the edge list.
	var cut int64
	for v := 0; v < n; v++ {
		for _, u := range s.Neighbors(int32(v)) {
			if int(u) > v && r.Parts[u] != r.Parts[v] {
				cut++
			}
		}
	}
	if cut != r.EdgeCut {
		t.Fatalf("reported cut %d, recount %d", r.EdgeCut, cut)
	}
	if r.Edges != s.NumEdges()/2 {
		t.Fatalf("reported %d edges, want %d", r.Edges, s.NumEdges()/2)
	}
}

func TestTwoCliques(t *testing.T) {
	s := twoCliques(10)
	for seed := uint64(0); seed < 10; seed++ {
		r := mustPartition(t, s, Options{K: 2, Seed: seed})
		if r.EdgeCut != 1 {
			t.Fatalf("seed %d: cut %d, want 1 (parts %v)", seed, r.EdgeCut, r.Parts)
		}
		for v := 1; v < 20; v++ {
			if same := r.Parts[v] == r.Parts[0]; same != (v < 10) {
				t.Fatalf("seed %d: node %d in part %d, node 0 in %d", seed, v, r.Parts[v], r.Parts[0])
			}
		}
		if r.Balance[0] != 1 {
			t.Fatalf("balance %v, want 1", r.Balance[0])
		}
	}
}

func TestGridCut(t *testing.T) {
	// A 40x40 grid: the best bisection cuts 40 edges, the best 4-way
	// split 80; a random split cuts about half (k=2) or 3/4 (k=4) of the
	// 3120 edges.
	s := grid(40, 40)
	for _, c := range []struct {
		k      int
		maxCut int64
	}{{2, 60}, {4, 120}, {8, 220}} {
		r := mustPartition(t, s, Options{K: c.k, Seed: 7})
		if r.EdgeCut > c.maxCut {
			t.Errorf("k=%d: cut %d, want <= %d", c.k, r.EdgeCut, c.maxCut)
		}
		if r.Balance[0] > DefaultImbalance {
			t.Errorf("k=%d: balance %v > %v", c.k, r.Balance[0], DefaultImbalance)
		}
	}
}

func TestBalanceRandomGraphs(t *testing.T) {
	for i, c := range []struct {
		n   int32
		k   int
		imb float64
	}{{1000, 2, 1.03}, {1500, 3, 1.03}, {2000, 4, 1.01}, {3000, 7, 1.05}, {2500, 8, 1.03}, {4000, 16, 1.03}} {
		s := plantedGraph(c.n, 8, 12, 0.7, uint64(i))
		r := mustPartition(t, s, Options{K: c.k, Imbalance: c.imb, Seed: uint64(i)})
		limit := c.imb * float64(c.n) / float64(c.k)
		var sizes = make([]int64, c.k)
		for _, p := range r.Parts {
			sizes[p]++
		}
		for p, sz := range sizes {
			if float64(sz) > limit {
				t.Errorf("n=%d k=%d: part %d has %d nodes > %.1f", c.n, c.k, p, sz, limit)
			}
		}
		if mx := float64(slices.Max(sizes)) * float64(c.k) / float64(c.n); math.Abs(mx-r.Balance[0]) > 1e-12 {
			t.Errorf("reported balance %v, recount %v", r.Balance[0], mx)
		}
		// Planted communities: a good partition cuts far fewer edges
		// than a random one.
		rnd := EdgeCut(s, randomParts(int(c.n), c.k, 99))
		if float64(r.EdgeCut) > 0.7*float64(rnd) {
			t.Errorf("n=%d k=%d: cut %d, random partition %d", c.n, c.k, r.EdgeCut, rnd)
		}
	}
}

func TestMultiConstraint(t *testing.T) {
	// Training nodes all in the top tenth of a grid: balancing nodes
	// alone would leave most parts without any, and a bisection that
	// balances one constraint unbalances the other.
	const w, h = 100, 100
	s := grid(w, h)
	var train []int32
	for v := int32(0); v < w*10; v++ {
		train = append(train, v)
	}
	wts, err := NodeWeights(s, train, ConstraintNodes, ConstraintTrain, ConstraintEdges)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{2, 3, 8, 16} {
		o := Options{K: k, Seed: 3, Weights: wts}
		r := mustPartition(t, s, o)
		if !slices.Equal(r.Constraints, []string{"nodes", "train", "edges"}) {
			t.Fatalf("constraints %v", r.Constraints)
		}
		for c, b := range r.Balance {
			if b > DefaultImbalance {
				t.Errorf("k=%d: constraint %s balance %.4f > %v", k, r.Constraints[c], b, DefaultImbalance)
			}
		}
		// Recount the training nodes per part.
		cnt := make([]int64, k)
		for _, v := range train {
			cnt[r.Parts[v]]++
		}
		for p := 0; p < k; p++ {
			if cnt[p] != r.PartWeights[p*3+1] {
				t.Errorf("part %d: %d training nodes, reported %d", p, cnt[p], r.PartWeights[p*3+1])
			}
		}
		// Balancing three constraints costs some cut, but stays far from
		// a random split (which cuts about (k-1)/k of the 19800 edges).
		if limit := int64(100 * k); r.EdgeCut > limit {
			t.Errorf("k=%d: cut %d > %d", k, r.EdgeCut, limit)
		}
	}
}

func TestDeterministicAcrossGOMAXPROCS(t *testing.T) {
	// Large enough that contraction and gain computation run in parallel.
	n := int32(40000)
	if testing.Short() {
		n = 15000
	}
	s := plantedGraph(n, 16, 10, 0.8, 5)
	var ref []int32
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 5} {
		runtime.GOMAXPROCS(procs)
		r, err := PartitionSymmetric(bg, s, Options{K: 4, Seed: 11})
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			ref = r.Parts
			continue
		}
		if !slices.Equal(ref, r.Parts) {
			t.Fatalf("GOMAXPROCS=%d gives a different partition", procs)
		}
	}
	r2, err := PartitionSymmetric(bg, s, Options{K: 4, Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(ref, r2.Parts) {
		t.Fatalf("seeds 11 and 12 gave the same partition")
	}
}

func TestEdgeCases(t *testing.T) {
	// No nodes.
	empty := &graph.CSR{Indptr: []int64{0}}
	r, err := PartitionSymmetric(bg, empty, Options{K: 1})
	if err != nil || len(r.Parts) != 0 || r.EdgeCut != 0 {
		t.Fatalf("empty graph: %v %v", r, err)
	}
	// k = 1.
	s := grid(10, 10)
	r = mustPartition(t, s, Options{K: 1})
	if r.EdgeCut != 0 || slices.Max(r.Parts) != 0 {
		t.Fatalf("k=1: cut %d", r.EdgeCut)
	}
	// No edges: any balanced split has cut 0.
	iso := &graph.CSR{NumRows: 100, NumCols: 100, Indptr: make([]int64, 101)}
	r = mustPartition(t, iso, Options{K: 4, Seed: 1})
	if r.EdgeCut != 0 || r.Balance[0] > DefaultImbalance {
		t.Fatalf("isolated nodes: cut %d balance %v", r.EdgeCut, r.Balance[0])
	}
	// Many parts of a few nodes each (1.03 x 6.25 nodes cannot be met
	// exactly; the result must still be a valid partition, close to it).
	r = mustPartition(t, grid(20, 20), Options{K: 64, Seed: 1})
	sizes := make([]int, 64)
	for _, p := range r.Parts {
		sizes[p]++
	}
	if slices.Max(sizes) > 8 {
		t.Fatalf("k=64: largest part has %d nodes", slices.Max(sizes))
	}
	// k = n.
	r = mustPartition(t, grid(3, 3), Options{K: 9, Seed: 1})
	if r.Balance[0] != 1 {
		t.Fatalf("k=n: balance %v", r.Balance[0])
	}
	// Several components, a directed input with self-loops and duplicates.
	g, err := graph.FromEdges(6, []int32{0, 1, 2, 3, 4, 5, 0, 0}, []int32{1, 2, 0, 4, 5, 3, 0, 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err = Partition(bg, g, Options{K: 2, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	if r.EdgeCut != 0 || r.Edges != 6 {
		t.Fatalf("two triangles: cut %d of %d edges, parts %v", r.EdgeCut, r.Edges, r.Parts)
	}
}

func TestInputErrors(t *testing.T) {
	s := grid(4, 4)
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"k=0", Options{K: 0}},
		{"k>n", Options{K: 17}},
		{"k huge", Options{K: MaxParts + 1}},
		{"imbalance<1", Options{K: 2, Imbalance: 0.9}},
		{"imbalance NaN", Options{K: 2, Imbalance: math.NaN()}},
		{"method", Options{K: 2, Method: "spectral"}},
		{"weights length", Options{K: 2, Weights: &Weights{NCon: 1, W: make([]int32, 5)}}},
		{"weights negative", Options{K: 2, Weights: &Weights{NCon: 1, W: append(make([]int32, 15), -1)}}},
		{"weights ncon", Options{K: 2, Weights: &Weights{NCon: 9, W: make([]int32, 16*9)}}},
	} {
		if _, err := PartitionSymmetric(bg, s, c.o); !errors.Is(err, ErrInput) {
			t.Errorf("%s: err = %v, want ErrInput", c.name, err)
		}
	}
	// Not symmetric, self-loop, unsorted rows.
	asym := &graph.CSR{NumRows: 3, NumCols: 3, Indptr: []int64{0, 1, 2, 2}, Indices: []int32{1, 2}}
	loop := &graph.CSR{NumRows: 2, NumCols: 2, Indptr: []int64{0, 2, 3}, Indices: []int32{0, 1, 0}}
	unsorted := &graph.CSR{NumRows: 3, NumCols: 3, Indptr: []int64{0, 2, 3, 4}, Indices: []int32{2, 1, 0, 0}}
	for name, g := range map[string]*graph.CSR{"asymmetric": asym, "self-loop": loop, "unsorted": unsorted} {
		if _, err := PartitionSymmetric(bg, g, Options{K: 2}); !errors.Is(err, ErrInput) {
			t.Errorf("%s: err = %v, want ErrInput", name, err)
		}
	}
	// Invalid CSR.
	bad := &graph.CSR{NumRows: 2, NumCols: 2, Indptr: []int64{0, 1, 2}, Indices: []int32{1, 5}}
	if _, err := Partition(bg, bad, Options{K: 2}); !errors.Is(err, graph.ErrIndex) {
		t.Errorf("bad CSR: err = %v, want graph.ErrIndex", err)
	}
	// NodeWeights errors.
	if _, err := NodeWeights(s, nil, ConstraintTrain); !errors.Is(err, ErrInput) {
		t.Errorf("train without training nodes: %v", err)
	}
	if _, err := NodeWeights(s, []int32{3, 99}, ConstraintTrain); !errors.Is(err, ErrInput) {
		t.Errorf("training node out of range: %v", err)
	}
	if _, err := ParseConstraints("nodes,bogus"); !errors.Is(err, ErrInput) {
		t.Errorf("ParseConstraints: %v", err)
	}
	if c, err := ParseConstraints("nodes, train"); err != nil || !slices.Equal(c, []Constraint{ConstraintNodes, ConstraintTrain}) {
		t.Errorf("ParseConstraints: %v %v", c, err)
	}
	// A cancelled context stops the run.
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := PartitionSymmetric(ctx, plantedGraph(5000, 4, 8, 0.8, 1), Options{K: 2}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}
}

func TestScaleWeights(t *testing.T) {
	w := []int32{1 << 29, 0, 1 << 29, 1, 1 << 29, 2}
	got := scaleWeights(w, 2)
	// Constraint 0 totals 3*2^29 > 2^30: divided by 2, rounding up.
	if !slices.Equal(got, []int32{1 << 28, 0, 1 << 28, 1, 1 << 28, 2}) {
		t.Fatalf("scaleWeights = %v", got)
	}
}

func TestMETIS(t *testing.T) {
	if err := metis.Load(); err != nil {
		t.Skipf("libmetis not available: %v", err)
	}
	s := twoCliques(12)
	r, err := PartitionSymmetric(bg, s, Options{K: 2, Method: METIS, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, s, Options{K: 2}, r)
	if r.EdgeCut != 1 {
		t.Fatalf("METIS cut %d, want 1", r.EdgeCut)
	}
	// Multi-constraint through METIS.
	g := grid(30, 30)
	wts, err := NodeWeights(g, []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, ConstraintNodes, ConstraintTrain)
	if err != nil {
		t.Fatal(err)
	}
	r, err = PartitionSymmetric(bg, g, Options{K: 2, Method: METIS, Seed: 1, Weights: wts, Imbalance: 1.2})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, g, Options{K: 2}, r)
}
