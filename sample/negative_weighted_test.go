package sample

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
)

// TestWeightedNegativeSamplerFrequencies: without exclusion, destinations
// follow the weights (chi-square at the 0.999 level), a zero weight is
// never drawn, and the draws do not depend on Workers.
func TestWeightedNegativeSamplerFrequencies(t *testing.T) {
	g := star(9, nil) // 10 nodes
	w := []float32{0, 1, 2, 3, 4, 0, 6, 0.5, 8, 9}
	ns, err := NewWeightedNegativeSampler(g, w, NegativeConfig{K: 5})
	if err != nil {
		t.Fatal(err)
	}
	src := make([]graph.NodeID, 4000)
	out, err := ns.Negatives(src, src, Key{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, 10)
	for _, d := range out {
		counts[d]++
	}
	var total float64
	for _, x := range w {
		total += float64(x)
	}
	var obs []int
	var exp []float64
	for i, x := range w {
		if x == 0 {
			if counts[i] != 0 {
				t.Fatalf("node %d has weight 0 but was drawn %d times", i, counts[i])
			}
			continue
		}
		obs = append(obs, counts[i])
		exp = append(exp, float64(len(out))*float64(x)/total)
	}
	chi, crit := chiSquare(obs, exp), chiCritical(len(obs)-1)
	t.Logf("weighted negatives chi-square %.2f (0.999 critical %.2f): %v", chi, crit, counts)
	if chi > crit {
		t.Fatalf("negatives do not follow the weights: %v for weights %v", counts, w)
	}
	one, _ := NewWeightedNegativeSampler(g, w, NegativeConfig{K: 5, Workers: 1})
	if again, _ := one.Negatives(src, src, Key{Seed: 3}); !slices.Equal(out, again) {
		t.Fatal("negatives depend on Workers")
	}
	if other, _ := ns.Negatives(src, src, Key{Seed: 3, Batch: 1}); slices.Equal(out, other) {
		t.Fatal("another batch drew the same negatives")
	}
}

// TestWeightedNegativeSamplerExcludes: with ExcludeEdges no negative is
// an edge of its source (the rows leave enough non-edges of positive
// weight that 30 trials always find one).
func TestWeightedNegativeSamplerExcludes(t *testing.T) {
	g := randomGraph(t, 5, 300, 20)
	if err := graph.SortRows(g); err != nil {
		t.Fatal(err)
	}
	deg, err := graph.InDegrees(g)
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float32, len(deg))
	for i, d := range deg {
		w[i] = float32(math.Pow(float64(d), 0.75))
	}
	var src, dst []graph.NodeID
	for u := range graph.NodeID(300) {
		for _, v := range g.Neighbors(u) {
			src, dst = append(src, u), append(dst, v)
		}
	}
	ns, err := NewWeightedNegativeSampler(g, w, NegativeConfig{K: 3, ExcludeEdges: true, Trials: 30})
	if err != nil {
		t.Fatal(err)
	}
	neg, err := ns.Negatives(src, dst, Key{Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	if len(neg) != 3*len(src) {
		t.Fatalf("%d negatives for %d edges", len(neg), len(src))
	}
	for i, d := range neg {
		u := src[i/3]
		if w[d] == 0 {
			t.Fatalf("negative %d has weight 0", d)
		}
		if _, isEdge := slices.BinarySearch(g.Neighbors(u), d); isEdge {
			t.Fatalf("negative (%d,%d) is an edge", u, d)
		}
	}
}

func TestWeightedNegativeSamplerErrors(t *testing.T) {
	g := star(3, nil)
	ok := []float32{1, 1, 1, 1}
	for _, c := range []struct {
		name string
		w    []float32
		cfg  NegativeConfig
		kind error
	}{
		{"short weights", []float32{1, 1}, NegativeConfig{K: 1}, ErrConfig},
		{"negative weight", []float32{1, -1, 1, 1}, NegativeConfig{K: 1}, ErrConfig},
		{"NaN weight", []float32{1, float32(math.NaN()), 1, 1}, NegativeConfig{K: 1}, ErrConfig},
		{"Inf weight", []float32{1, float32(math.Inf(1)), 1, 1}, NegativeConfig{K: 1}, ErrConfig},
		{"all zero", []float32{0, 0, 0, 0}, NegativeConfig{K: 1}, ErrConfig},
		{"K 0", ok, NegativeConfig{}, ErrConfig},
	} {
		if _, err := NewWeightedNegativeSampler(g, c.w, c.cfg); !errors.Is(err, c.kind) {
			t.Errorf("%s: %v, want %v", c.name, err, c.kind)
		}
	}
	ns, err := NewWeightedNegativeSampler(g, ok, NegativeConfig{K: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Negatives([]graph.NodeID{4}, []graph.NodeID{0}, Key{}); !errors.Is(err, ErrNode) {
		t.Errorf("src out of range: %v", err)
	}
	if _, err := ns.Negatives([]graph.NodeID{1}, nil, Key{}); !errors.Is(err, ErrConfig) {
		t.Errorf("length mismatch: %v", err)
	}
	var _ NegativeSampler = ns
}
