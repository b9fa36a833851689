package cuda

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

// TestMeanEdgeWeights: the one-pass mean weights (thread per row for
// short rows, warp per row for long ones) equal RowDegreeInv expanded by
// ExpandRowsToEdges bit for bit, with empty rows, a row of 100,000
// entries, and no entries at all.
func TestMeanEdgeWeights(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		name   string
		rows   int
		maxDeg int
		long   int // one row this long, when > 0
	}{
		{"short rows", 50000, 15, 0},
		{"long rows", 3000, 200, 100000},
		{"no entries", 100, 0, 0},
	} {
		ptr := make([]int64, c.rows+1)
		for i := range c.rows {
			deg := 0
			if c.maxDeg > 0 {
				deg = r.IntN(c.maxDeg + 1)
			}
			if i == c.rows/2 && c.long > 0 {
				deg = c.long
			}
			ptr[i+1] = ptr[i] + int64(deg)
		}
		idx := make([]int32, ptr[c.rows])
		for e := range idx {
			idx[e] = int32(r.IntN(c.rows))
		}
		a, err := d.NewSparse(c.rows, c.rows, ptr, idx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.MeanEdgeWeights(a)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		inv, err := d.Alloc(backend.Float32, c.rows)
		if err != nil {
			t.Fatal(err)
		}
		want, err := d.Alloc(backend.Float32, len(idx))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.RowDegreeInv(inv, a, false); err != nil {
			t.Fatal(err)
		}
		if err := d.ExpandRowsToEdges(want, a, inv); err != nil {
			t.Fatal(err)
		}
		g, w := make([]float32, len(idx)), make([]float32, len(idx))
		if err := d.Download(g, got); err != nil {
			t.Fatal(err)
		}
		if err := d.Download(w, want); err != nil {
			t.Fatal(err)
		}
		if got.Len() != len(idx) || !slices.Equal(g, w) {
			t.Errorf("%s: %d weights differ from RowDegreeInv + ExpandRowsToEdges", c.name, len(idx))
		}
		if n := len(idx); n > 0 {
			last := float32(1 / float64(max(ptr[c.rows]-ptr[c.rows-1], 1)))
			if ptr[c.rows] > ptr[c.rows-1] && g[n-1] != last {
				t.Errorf("%s: last weight %v, want %v", c.name, g[n-1], last)
			}
		}
		for _, b := range []backend.Buffer{got, inv, want} {
			d.Free(b)
		}
		d.FreeSparse(a)
	}
}
