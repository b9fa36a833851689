package partition

import (
	"reflect"
	"runtime"
	"slices"
	"testing"
)

// TestContract checks matching and contraction against a direct
// computation, and that contraction does not depend on GOMAXPROCS.
func TestContract(t *testing.T) {
	s := plantedGraph(150000, 8, 6, 0.8, 9)
	g, _, err := buildWGraph(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	maxvw := []int64{1 << 20}
	match, cmap, cn := matchGraph(g, maxvw, true, 42)
	// match is an involution and cmap numbers pairs in order of their
	// smaller vertex.
	next := int32(0)
	for v, m := range match {
		if match[m] != int32(v) || cmap[v] != cmap[m] {
			t.Fatalf("bad matching at %d", v)
		}
		if int32(v) <= m {
			if cmap[v] != next {
				t.Fatalf("cmap[%d] = %d, want %d", v, cmap[v], next)
			}
			next++
		}
	}
	var ht [][]int32
	c := contract(g, match, cmap, cn, &ht)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	one := contract(g, match, cmap, cn, &[][]int32{})
	if !reflect.DeepEqual(c, one) {
		t.Fatal("contraction depends on GOMAXPROCS")
	}
	// Direct: coarse edge weights are the number of fine edges between
	// the two groups.
	want := map[[2]int32]int32{}
	for v := 0; v < g.n; v++ {
		for _, u := range g.adj[g.xadj[v]:g.xadj[v+1]] {
			if a, b := cmap[v], cmap[u]; a != b {
				want[[2]int32{a, b}]++
			}
		}
	}
	got := map[[2]int32]int32{}
	for i := 0; i < cn; i++ {
		row := c.adj[c.xadj[i]:c.xadj[i+1]]
		sorted := slices.Clone(row)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) != len(row) {
			t.Fatalf("coarse row %d has repeated entries", i)
		}
		for j, d := range row {
			got[[2]int32{int32(i), d}] = c.ew[c.xadj[i]+int64(j)]
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("coarse edges differ: %d vs %d entries", len(got), len(want))
	}
	var tw int64
	for _, w := range c.vw {
		tw += int64(w)
	}
	if tw != int64(g.n) || c.tvw[0] != int64(g.n) {
		t.Fatalf("coarse vertex weights sum to %d", tw)
	}
}
