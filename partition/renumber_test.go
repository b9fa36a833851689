package partition

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
)

// smallDataset returns a grid dataset with weights, features, labels and
// splits.
func smallDataset(t *testing.T) *dataset.Dataset {
	t.Helper()
	g := grid(12, 10)
	g.Weights = make([]float32, len(g.Indices))
	for i := range g.Weights {
		g.Weights[i] = float32(i%7) + 0.5
	}
	n := int(g.NumRows)
	d := &dataset.Dataset{Name: "grid", Graph: g, FeatDim: 3, NumClasses: 4, Features: make([]float32, n*3), Labels: make([]int32, n)}
	for v := 0; v < n; v++ {
		d.Features[v*3], d.Features[v*3+1], d.Features[v*3+2] = float32(v), float32(-v), float32(v%3)
		d.Labels[v] = int32(v % 4)
	}
	for v := int32(0); int(v) < n; v++ {
		switch v % 5 {
		case 0, 1:
			d.Train = append(d.Train, v)
		case 2:
			d.Val = append(d.Val, v)
		case 3:
			d.Test = append(d.Test, v)
		}
	}
	if err := dataset.Validate(d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRenumber(t *testing.T) {
	parts := []int32{2, 0, 2, 1, 0, 2, 2, 0}
	r, err := Renumber(parts, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Book.Offsets(); !slices.Equal(got, []int64{0, 3, 4, 8, 8}) {
		t.Fatalf("offsets %v", got)
	}
	// Old IDs keep their order inside a part.
	if !slices.Equal(r.NewToOld, []int32{1, 4, 7, 3, 0, 2, 5, 6}) {
		t.Fatalf("newToOld %v", r.NewToOld)
	}
	for v, u := range r.OldToNew {
		if r.NewToOld[u] != int32(v) {
			t.Fatalf("maps are not inverse at %d", v)
		}
		if r.Book.Owner(int64(u)) != int(parts[v]) {
			t.Fatalf("old node %d: owner %d, part %d", v, r.Book.Owner(int64(u)), parts[v])
		}
	}
	if !slices.Equal(r.Parts(), parts) {
		t.Fatalf("Parts() = %v", r.Parts())
	}
	if _, err := Renumber([]int32{0, 4}, 4); !errors.Is(err, ErrInput) {
		t.Errorf("part out of range: %v", err)
	}
	if _, err := Renumber([]int32{0}, 0); !errors.Is(err, ErrInput) {
		t.Errorf("k=0: %v", err)
	}
}

func TestPermuteDatasetRoundTrip(t *testing.T) {
	d := smallDataset(t)
	res, err := PartitionSymmetric(bg, d.Graph, Options{K: 3, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Renumber(res.Parts, 3)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Apply(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := dataset.Validate(p); err != nil {
		t.Fatalf("permuted dataset invalid: %v", err)
	}
	if sorted, _ := graph.RowsSorted(p.Graph); !sorted {
		t.Fatal("permuted rows not sorted")
	}
	// Every edge, weight, feature row and label moved with its node.
	g := d.Graph
	for v := int32(0); int(v) < int(g.NumRows); v++ {
		u := r.OldToNew[v]
		if p.Labels[u] != d.Labels[v] || !slices.Equal(p.Features[u*3:u*3+3], d.Features[v*3:v*3+3]) {
			t.Fatalf("node %d -> %d: label or features differ", v, u)
		}
		for e := g.Indptr[v]; e < g.Indptr[v+1]; e++ {
			x := r.OldToNew[g.Indices[e]]
			row := p.Graph.Indices[p.Graph.Indptr[u]:p.Graph.Indptr[u+1]]
			i, ok := slices.BinarySearch(row, x)
			if !ok || p.Graph.Weights[p.Graph.Indptr[u]+int64(i)] != g.Weights[e] {
				t.Fatalf("edge %d->%d lost or reweighted", v, g.Indices[e])
			}
		}
	}
	// The cut of the renumbered graph under the book equals the cut.
	newParts := make([]int32, len(res.Parts))
	for u := range newParts {
		newParts[u] = int32(r.Book.Owner(int64(u)))
	}
	if c := EdgeCut(p.Graph, newParts); c != res.EdgeCut {
		t.Fatalf("cut after renumbering %d, before %d", c, res.EdgeCut)
	}
	// Permuting back restores the dataset exactly.
	back, err := PermuteDataset(p, r.NewToOld)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, d) {
		t.Fatal("round trip does not restore the dataset")
	}
	// A non-permutation is refused.
	bad := slices.Clone(r.OldToNew)
	bad[0] = bad[1]
	if _, err := PermuteDataset(d, bad); !errors.Is(err, ErrInput) {
		t.Errorf("non-permutation: %v", err)
	}
	if _, err := PermuteDataset(d, bad[:3]); !errors.Is(err, ErrInput) {
		t.Errorf("short permutation: %v", err)
	}
}
