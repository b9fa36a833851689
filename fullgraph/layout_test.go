package fullgraph

import (
	"errors"
	"math"
	"testing"

	"github.com/strata-gnn/strata/graph"
)

// smallGraph is the in-adjacency of a 7-node graph with a self-loop on
// node 3 and an isolated node 6.
func smallGraph() *graph.CSR {
	rows := [][]int32{{1, 4}, {0, 2, 5}, {1}, {3, 4}, {0, 3, 5}, {1, 4}, {}}
	g := &graph.CSR{NumRows: 7, NumCols: 7, Indptr: []int64{0}}
	for _, r := range rows {
		g.Indices = append(g.Indices, r...)
		g.Indptr = append(g.Indptr, int64(len(g.Indices)))
	}
	return g
}

// dense returns the normalized matrix the layout describes, assembled
// from its sub-blocks.
func (l *Layout) dense() [][]float64 {
	m := make([][]float64, l.N)
	for i := range m {
		m[i] = make([]float64, l.N)
	}
	for d := range l.Blocks {
		for s := range l.Blocks[d] {
			b := &l.Blocks[d][s]
			for r := 0; r < b.Rows; r++ {
				for e := b.Indptr[r]; e < b.Indptr[r+1]; e++ {
					m[int(l.Offsets[d])+r][int(l.Offsets[s])+int(b.Indices[e])] += float64(b.Weights[e])
				}
			}
		}
	}
	return m
}

func TestLayoutMatchesNormalizedMatrix(t *testing.T) {
	g := smallGraph()
	n := 7
	// Reference GCN: A + I (self-loops only where missing), degrees of it.
	a := make([][]float64, n)
	for i := range a {
		a[i] = make([]float64, n)
		for _, j := range g.Indices[g.Indptr[i]:g.Indptr[i+1]] {
			a[i][j] = 1
		}
		a[i][i] = 1
	}
	in, out := make([]float64, n), make([]float64, n)
	for i := range a {
		for j := range a[i] {
			in[i] += a[i][j]
			out[j] += a[i][j]
		}
	}
	gcn := make([][]float64, n)
	mean := make([][]float64, n)
	for i := range a {
		gcn[i] = make([]float64, n)
		mean[i] = make([]float64, n)
		deg := float64(g.Indptr[i+1] - g.Indptr[i])
		for j := range a[i] {
			if a[i][j] != 0 {
				gcn[i][j] = 1 / math.Sqrt(in[i]*out[j])
			}
		}
		for _, j := range g.Indices[g.Indptr[i]:g.Indptr[i+1]] {
			mean[i][j] = 1 / deg
		}
	}
	for _, off := range [][]int64{{0, 7}, {0, 3, 7}, {0, 2, 4, 5, 7}} {
		for _, tc := range []struct {
			agg  Aggregation
			want [][]float64
		}{{AggGCN, gcn}, {AggMean, mean}} {
			l, err := NewLayout(g, off, tc.agg)
			if err != nil {
				t.Fatal(err)
			}
			got := l.dense()
			for i := range got {
				for j := range got[i] {
					if math.Abs(got[i][j]-tc.want[i][j]) > 1e-6 {
						t.Fatalf("%v offsets %v: entry (%d,%d) = %v, want %v", tc.agg, off, i, j, got[i][j], tc.want[i][j])
					}
				}
			}
			// Used lists the distinct columns of every remote block.
			for d := range l.Blocks {
				for s := range l.Blocks[d] {
					b := &l.Blocks[d][s]
					if b.Rows != l.Size(d) || b.Cols != l.Size(s) {
						t.Fatalf("block (%d,%d) is %dx%d", d, s, b.Rows, b.Cols)
					}
					if s == d {
						if l.Used[d][s] != nil {
							t.Fatalf("Used[%d][%d] set", d, s)
						}
						continue
					}
					seen := map[int32]bool{}
					for _, j := range b.Indices {
						seen[j] = true
					}
					u := l.Used[d][s]
					if len(u) != len(seen) {
						t.Fatalf("Used[%d][%d] = %v for columns %v", d, s, u, b.Indices)
					}
					for i, j := range u {
						if !seen[j] || (i > 0 && u[i-1] >= j) {
							t.Fatalf("Used[%d][%d] = %v for columns %v", d, s, u, b.Indices)
						}
					}
				}
			}
			total, remote := l.Edges()
			if tc.agg == AggMean && total != int64(len(g.Indices)) || remote > total {
				t.Fatalf("edges %d, remote %d", total, remote)
			}
		}
	}
}

func TestLayoutErrors(t *testing.T) {
	g := smallGraph()
	bad := []struct {
		name string
		g    *graph.CSR
		off  []int64
		agg  Aggregation
	}{
		{"nil graph", nil, []int64{0, 7}, AggGCN},
		{"not square", &graph.CSR{NumRows: 2, NumCols: 3, Indptr: []int64{0, 0, 0}}, []int64{0, 2}, AggGCN},
		{"empty block", g, []int64{0, 3, 3, 7}, AggGCN},
		{"offsets short", g, []int64{0, 6}, AggGCN},
		{"one offset", g, []int64{0}, AggGCN},
		{"unknown aggregation", g, []int64{0, 7}, 9},
		{"source out of range", &graph.CSR{NumRows: 2, NumCols: 2, Indptr: []int64{0, 1, 1}, Indices: []int32{5}}, []int64{0, 2}, AggMean},
		{"indptr mismatch", &graph.CSR{NumRows: 2, NumCols: 2, Indptr: []int64{0, 1, 3}, Indices: []int32{1}}, []int64{0, 2}, AggMean},
	}
	for _, tc := range bad {
		_, err := NewLayout(tc.g, tc.off, tc.agg)
		var le *LayoutError
		if !errors.As(err, &le) {
			t.Errorf("%s: got %v, want a *LayoutError", tc.name, err)
		}
	}
	if _, err := RangeOffsets(3, 4); err == nil {
		t.Error("RangeOffsets(3, 4) succeeded")
	}
	off, err := RangeOffsets(10, 3)
	if err != nil || len(off) != 4 || off[0] != 0 || off[3] != 10 {
		t.Errorf("RangeOffsets(10, 3) = %v, %v", off, err)
	}
}
