package graph

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
)

// g0 is the 4-node graph 0->1, 0->2, 1->2, 2->0, 2->3, 3->3 with weights.
func g0() *CSR {
	return &CSR{
		NumRows: 4, NumCols: 4,
		Indptr:  []int64{0, 2, 3, 5, 6},
		Indices: []NodeID{2, 1, 2, 3, 0, 3},
		Weights: []float32{0.2, 0.1, 1.2, 2.3, 2.0, 3.3},
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name  string
		mut   func(g *CSR) *CSR
		kind  error
		field string
		pos   int64
	}{
		{"ok", func(g *CSR) *CSR { return g }, nil, "", 0},
		{"nil", func(*CSR) *CSR { return nil }, ErrShape, "graph", -1},
		{"neg rows", func(g *CSR) *CSR { g.NumRows = -1; return g }, ErrShape, "NumRows", -1},
		{"huge cols", func(g *CSR) *CSR { g.NumCols = MaxNodes + 1; return g }, ErrShape, "NumCols", -1},
		{"indptr len", func(g *CSR) *CSR { g.Indptr = g.Indptr[:4]; return g }, ErrShape, "Indptr", -1},
		{"indptr start", func(g *CSR) *CSR { g.Indptr[0] = 1; return g }, ErrIndptr, "Indptr", 0},
		{"indptr end", func(g *CSR) *CSR { g.Indptr[4] = 5; return g }, ErrIndptr, "Indptr", 4},
		{"indptr decreasing", func(g *CSR) *CSR { g.Indptr[2] = 1; return g }, ErrIndptr, "Indptr", 2},
		{"indptr beyond", func(g *CSR) *CSR { g.Indptr[2] = 9; return g }, ErrIndptr, "Indptr", 3},
		{"index too big", func(g *CSR) *CSR { g.Indices[3] = 4; return g }, ErrIndex, "Indices", 3},
		{"index negative", func(g *CSR) *CSR { g.Indices[5] = -1; return g }, ErrIndex, "Indices", 5},
		{"first bad index wins", func(g *CSR) *CSR { g.Indices[5] = -1; g.Indices[1] = 7; return g }, ErrIndex, "Indices", 1},
		{"weights len", func(g *CSR) *CSR { g.Weights = g.Weights[:5]; return g }, ErrWeights, "Weights", -1},
		{"no weights ok", func(g *CSR) *CSR { g.Weights = nil; return g }, nil, "", 0},
		{"empty ok", func(*CSR) *CSR { return &CSR{Indptr: []int64{0}} }, nil, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.mut(g0()).Validate()
			if c.kind == nil {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			var ge *Error
			if !errors.Is(err, c.kind) || !errors.As(err, &ge) {
				t.Fatalf("error %v, want %v as *Error", err, c.kind)
			}
			if ge.Field != c.field || ge.Pos != c.pos || ge.Op != "Validate" {
				t.Fatalf("error at %s/%s[%d], want %s[%d]: %v", ge.Op, ge.Field, ge.Pos, c.field, c.pos, err)
			}
		})
	}
}

func TestValidateLargeFindsFirst(t *testing.T) {
	g := randomCSR(1, 50000, 1000, 20, false)
	g.Indices[len(g.Indices)-1] = 1000
	g.Indices[400000] = -3
	var ge *Error
	if err := g.Validate(); !errors.As(err, &ge) || ge.Pos != 400000 {
		t.Fatalf("got %v, want Indices[400000]", err)
	}
}

func TestTransposeSmall(t *testing.T) {
	tr, err := Transpose(g0())
	if err != nil {
		t.Fatal(err)
	}
	// in-neighbors: 0<-2; 1<-0; 2<-0,1; 3<-2,3
	want := &CSR{
		NumRows: 4, NumCols: 4,
		Indptr:  []int64{0, 1, 2, 4, 6},
		Indices: []NodeID{2, 0, 0, 1, 2, 3},
		Weights: []float32{2.0, 0.1, 0.2, 1.2, 2.3, 3.3},
	}
	if !sameCSR(tr, want) {
		t.Fatalf("got %+v\nwant %+v", tr, want)
	}
	rev, _ := Reverse(g0())
	if !sameCSR(rev, want) {
		t.Fatalf("Reverse differs from Transpose")
	}
	_, perm, err := TransposePerm(g0())
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{4, 1, 0, 2, 3, 5}; !slices.Equal(perm, want) {
		t.Fatalf("perm %v, want %v", perm, want)
	}
}

func TestTransposeNonSquareAndEmpty(t *testing.T) {
	g := &CSR{NumRows: 2, NumCols: 5, Indptr: []int64{0, 2, 3}, Indices: []NodeID{4, 0, 4}}
	tr, err := Transpose(g)
	if err != nil {
		t.Fatal(err)
	}
	want := &CSR{NumRows: 5, NumCols: 2, Indptr: []int64{0, 1, 1, 1, 1, 3}, Indices: []NodeID{0, 0, 1}}
	if !sameCSR(tr, want) {
		t.Fatalf("got %+v want %+v", tr, want)
	}
	e := &CSR{NumRows: 3, NumCols: 0, Indptr: []int64{0, 0, 0, 0}, Indices: []NodeID{}}
	tr, err = Transpose(e)
	if err != nil || tr.NumRows != 0 || tr.NumCols != 3 || !slices.Equal(tr.Indptr, []int64{0}) {
		t.Fatalf("empty transpose: %+v %v", tr, err)
	}
	if _, err := Transpose(&CSR{NumRows: 1, Indptr: []int64{0, 1}, Indices: []NodeID{0}}); !errors.Is(err, ErrIndex) {
		t.Fatalf("invalid input: %v", err)
	}
}

func TestTransposeRandomMatchesReference(t *testing.T) {
	for _, weighted := range []bool{false, true} {
		shapes := [][2]int64{{1, 1}, {7, 3}, {100, 100}, {3000, 500}, {20000, 70000}}
		if testing.Short() {
			shapes[4] = [2]int64{8000, 20000}
		}
		for i, sh := range shapes {
			g := randomCSR(uint64(10+i), sh[0], sh[1], 12, weighted)
			tr, perm, err := TransposePerm(g)
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Validate(); err != nil {
				t.Fatal(err)
			}
			if want := refTranspose(g); !sameCSR(tr, want) {
				t.Fatalf("shape %v weighted %v: transpose differs from reference", sh, weighted)
			}
			// perm maps each output edge to an input edge with the same
			// endpoints and weight, and is a permutation.
			seen := make([]bool, len(perm))
			for r := int64(0); r < tr.NumRows; r++ {
				for e := tr.Indptr[r]; e < tr.Indptr[r+1]; e++ {
					o := perm[e]
					if seen[o] || g.Indices[o] != NodeID(r) || g.Indptr[tr.Indices[e]] > o || o >= g.Indptr[tr.Indices[e]+1] {
						t.Fatalf("perm[%d] = %d is wrong", e, o)
					}
					if weighted && g.Weights[o] != tr.Weights[e] {
						t.Fatalf("weight of edge %d not carried", e)
					}
					seen[o] = true
				}
			}
			back, _ := Transpose(tr)
			sorted := Clone(g)
			if err := SortRows(sorted); err != nil {
				t.Fatal(err)
			}
			if !sameCSR(back, sorted) {
				t.Fatalf("transpose twice != sorted original")
			}
		}
	}
}

// withProcs runs f under each GOMAXPROCS and checks the results are equal.
func withProcs[T any](t *testing.T, procs []int, f func() T, eq func(a, b T) bool) {
	t.Helper()
	old := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(old)
	var first T
	for i, p := range procs {
		runtime.GOMAXPROCS(p)
		got := f()
		if i == 0 {
			first = got
		} else if !eq(first, got) {
			t.Fatalf("result with GOMAXPROCS=%d differs from GOMAXPROCS=%d", p, procs[0])
		}
	}
}

func TestDeterministicAcrossGOMAXPROCS(t *testing.T) {
	// Big enough that every operation splits into several chunks
	// (minChunk is 32768 edges).
	n := int64(40000)
	if testing.Short() {
		n = 12000
	}
	g := randomCSR(99, n, n, 16, true)
	procs := []int{1, 2, 8}
	must := func(c *CSR, err error) *CSR {
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	src, dst := make([]NodeID, 0, g.NumEdges()), make([]NodeID, 0, g.NumEdges())
	for _, e := range edgesOf(g) {
		src, dst = append(src, e.r), append(dst, e.c)
	}
	ops := map[string]func() *CSR{
		"Transpose":       func() *CSR { return must(Transpose(g)) },
		"Symmetrize":      func() *CSR { return must(Symmetrize(g, ReduceSum)) },
		"AddSelfLoops":    func() *CSR { return must(AddSelfLoops(g, 1)) },
		"RemoveSelfLoops": func() *CSR { return must(RemoveSelfLoops(g)) },
		"FromEdges":       func() *CSR { return must(FromEdges(g.NumRows, src, dst, WithWeights(g.Weights), WithDedup(ReduceSum))) },
		"SortRows": func() *CSR {
			c := Clone(g)
			if err := SortRows(c); err != nil {
				t.Fatal(err)
			}
			return c
		},
		"InDegrees": func() *CSR { d, _ := InDegrees(g); return &CSR{Indptr: d} },
	}
	for name, f := range ops {
		t.Run(name, func(t *testing.T) { withProcs(t, procs, f, sameCSR) })
	}
}

// refFromEdges is FromEdges(..., WithWeights(w), [WithDedup(r)]) done the
// slow way.
func refFromEdges(n int64, src, dst []NodeID, w []float32, dedup bool, r Reduce) *CSR {
	es := make([]edge, len(src))
	for i := range src {
		es[i] = edge{r: src[i], c: dst[i], pos: int64(i)}
		if w != nil {
			es[i].w = w[i]
		}
	}
	slices.SortFunc(es, func(a, b edge) int {
		return cmp.Or(cmp.Compare(a.r, b.r), cmp.Compare(a.c, b.c), cmp.Compare(a.pos, b.pos))
	})
	if dedup {
		var out []edge
		for _, e := range es {
			if k := len(out) - 1; k >= 0 && out[k].r == e.r && out[k].c == e.c {
				switch r {
				case ReduceSum:
					out[k].w += e.w
				case ReduceMax:
					out[k].w = max(out[k].w, e.w)
				case ReduceMin:
					out[k].w = min(out[k].w, e.w)
				}
				continue
			}
			out = append(out, e)
		}
		es = out
	}
	return fromSortedEdges(n, n, es, true)
}

func TestFromEdgesSmall(t *testing.T) {
	src := []NodeID{2, 0, 2, 0, 1, 0}
	dst := []NodeID{1, 2, 0, 2, 1, 0}
	w := []float32{1, 2, 3, 4, 5, 6}
	g, err := FromEdges(3, src, dst, WithWeights(w))
	if err != nil {
		t.Fatal(err)
	}
	want := &CSR{NumRows: 3, NumCols: 3, Indptr: []int64{0, 3, 4, 6},
		Indices: []NodeID{0, 2, 2, 1, 0, 1}, Weights: []float32{6, 2, 4, 5, 3, 1}}
	if !sameCSR(g, want) {
		t.Fatalf("got %+v\nwant %+v", g, want)
	}
	for _, c := range []struct {
		r Reduce
		w float32
	}{{ReduceFirst, 2}, {ReduceSum, 6}, {ReduceMax, 4}, {ReduceMin, 2}} {
		g, err := FromEdges(3, src, dst, WithWeights(w), WithDedup(c.r))
		if err != nil {
			t.Fatal(err)
		}
		want := &CSR{NumRows: 3, NumCols: 3, Indptr: []int64{0, 2, 3, 5},
			Indices: []NodeID{0, 2, 1, 0, 1}, Weights: []float32{6, c.w, 5, 3, 1}}
		if !sameCSR(g, want) {
			t.Fatalf("reduce %v: got %+v", c.r, g)
		}
	}
	g, err = FromEdges(5, nil, nil)
	if err != nil || g.NumEdges() != 0 || len(g.Indptr) != 6 || g.Weights != nil {
		t.Fatalf("empty: %+v %v", g, err)
	}
	g, err = FromEdges(5, nil, nil, WithWeights(nil))
	if err != nil || g.Weights == nil || len(g.Weights) != 0 {
		t.Fatalf("empty weighted: %+v %v", g, err)
	}
}

func TestFromEdgesRandomMatchesReference(t *testing.T) {
	sizes := []int64{1, 10, 1000, 30000}
	if testing.Short() {
		sizes = sizes[:3]
	}
	for i, n := range sizes {
		g := randomCSR(uint64(100+i), n, n, 10, true)
		var src, dst []NodeID
		var w []float32
		// Shuffle the edge order so the sort has work to do.
		es := edgesOf(g)
		for j := range es {
			k := int(uint64(j*7919+13) % uint64(len(es)))
			es[j], es[k] = es[k], es[j]
		}
		for _, e := range es {
			src, dst, w = append(src, e.r), append(dst, e.c), append(w, e.w)
		}
		for _, dedup := range []bool{false, true} {
			for _, r := range []Reduce{ReduceFirst, ReduceSum, ReduceMax, ReduceMin} {
				opts := []Option{WithWeights(w)}
				if dedup {
					opts = append(opts, WithDedup(r))
				}
				got, err := FromEdges(n, src, dst, opts...)
				if err != nil {
					t.Fatal(err)
				}
				if want := refFromEdges(n, src, dst, w, dedup, r); !sameCSR(got, want) {
					t.Fatalf("n=%d dedup=%v reduce=%v differs from reference", n, dedup, r)
				}
				if !dedup {
					break
				}
			}
		}
	}
}

func TestFromEdgesErrors(t *testing.T) {
	cases := []struct {
		name     string
		n        int64
		src, dst []NodeID
		opts     []Option
		kind     error
		field    string
		pos      int64
	}{
		{"len mismatch", 3, []NodeID{0, 1}, []NodeID{0}, nil, ErrShape, "dst", -1},
		{"neg nodes", -1, nil, nil, nil, ErrShape, "numNodes", -1},
		{"too many nodes", MaxNodes + 1, nil, nil, nil, ErrShape, "numNodes", -1},
		{"src range", 3, []NodeID{0, 3}, []NodeID{0, 1}, nil, ErrIndex, "src", 1},
		{"dst negative", 3, []NodeID{0, 1}, []NodeID{-1, 1}, nil, ErrIndex, "dst", 0},
		{"weights", 3, []NodeID{0}, []NodeID{1}, []Option{WithWeights([]float32{1, 2})}, ErrWeights, "weights", -1},
		{"reduce", 3, nil, nil, []Option{WithDedup(Reduce(9))}, ErrShape, "reduce", -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromEdges(c.n, c.src, c.dst, c.opts...)
			var ge *Error
			if !errors.Is(err, c.kind) || !errors.As(err, &ge) || ge.Field != c.field || ge.Pos != c.pos {
				t.Fatalf("got %v, want %v at %s[%d]", err, c.kind, c.field, c.pos)
			}
		})
	}
}

func TestSymmetrize(t *testing.T) {
	g := g0()
	s, err := Symmetrize(g, ReduceSum)
	if err != nil {
		t.Fatal(err)
	}
	// pairs {0,1} {0,2} {1,2} {2,3} both ways, loop 3; 0-2 appears both
	// ways in g (0->2 w 0.2, 2->0 w 2.0) so its weight is 2.2 either side.
	want := &CSR{NumRows: 4, NumCols: 4,
		Indptr:  []int64{0, 2, 4, 7, 9},
		Indices: []NodeID{1, 2, 0, 2, 0, 1, 3, 2, 3},
		Weights: []float32{0.1, 0.2 + 2.0, 0.1, 1.2, 2.0 + 0.2, 1.2, 2.3, 2.3, 3.3 + 3.3}}
	if !sameCSR(s, want) {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	s, _ = Symmetrize(g, ReduceFirst)
	if w := s.Weights; w[1] != 0.2 || w[4] != 2.0 || w[8] != 3.3 {
		t.Fatalf("ReduceFirst weights %v", w)
	}
	if _, err := Symmetrize(&CSR{NumRows: 1, NumCols: 2, Indptr: []int64{0, 0}, Indices: []NodeID{}}, ReduceSum); !errors.Is(err, ErrShape) {
		t.Fatalf("non-square: %v", err)
	}
}

func TestSymmetrizeRandom(t *testing.T) {
	g := randomCSR(5, 3000, 3000, 8, false)
	s, err := Symmetrize(g, ReduceFirst)
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]NodeID]bool{}
	for _, e := range edgesOf(g) {
		want[[2]NodeID{e.r, e.c}] = true
		want[[2]NodeID{e.c, e.r}] = true
	}
	got := edgesOf(s)
	if len(got) != len(want) {
		t.Fatalf("%d edges, want %d", len(got), len(want))
	}
	for i, e := range got {
		if !want[[2]NodeID{e.r, e.c}] {
			t.Fatalf("edge %v not in the union", e)
		}
		if i > 0 && got[i-1].r == e.r && got[i-1].c >= e.c {
			t.Fatalf("row %d not strictly sorted", e.r)
		}
	}
	again, _ := Symmetrize(s, ReduceFirst)
	if !sameCSR(again, s) {
		t.Fatalf("Symmetrize is not idempotent")
	}
}

func TestSelfLoops(t *testing.T) {
	g := g0() // loop only at 3
	a, err := AddSelfLoops(g, 9)
	if err != nil {
		t.Fatal(err)
	}
	want := &CSR{NumRows: 4, NumCols: 4,
		Indptr:  []int64{0, 3, 5, 8, 9},
		Indices: []NodeID{0, 2, 1, 1, 2, 2, 3, 0, 3},
		Weights: []float32{9, 0.2, 0.1, 9, 1.2, 9, 2.3, 2.0, 3.3}}
	if !sameCSR(a, want) {
		t.Fatalf("AddSelfLoops got %+v\nwant %+v", a, want)
	}
	if a2, _ := AddSelfLoops(a, 5); !sameCSR(a2, a) {
		t.Fatalf("AddSelfLoops not idempotent")
	}
	r, err := RemoveSelfLoops(a)
	if err != nil {
		t.Fatal(err)
	}
	want = &CSR{NumRows: 4, NumCols: 4, Indptr: []int64{0, 2, 3, 5, 5},
		Indices: []NodeID{2, 1, 2, 3, 0}, Weights: []float32{0.2, 0.1, 1.2, 2.3, 2.0}}
	if !sameCSR(r, want) {
		t.Fatalf("RemoveSelfLoops got %+v", r)
	}
	// Random: every row has exactly one loop after Add, none after Remove,
	// and the other entries are untouched and in order.
	rg := randomCSR(8, 5000, 5000, 6, true)
	if err := SortRows(rg); err != nil {
		t.Fatal(err)
	}
	ad, _ := AddSelfLoops(rg, 1)
	rm, _ := RemoveSelfLoops(ad)
	rm0, _ := RemoveSelfLoops(rg)
	if !sameCSR(rm, rm0) {
		t.Fatalf("Remove(Add(g)) != Remove(g)")
	}
	if ok, _ := RowsSorted(ad); !ok {
		t.Fatalf("AddSelfLoops broke sorted rows")
	}
	for v := int64(0); v < ad.NumRows; v++ {
		row := ad.Indices[ad.Indptr[v]:ad.Indptr[v+1]]
		if !slices.Contains(row, NodeID(v)) || slices.Contains(rm.Indices[rm.Indptr[v]:rm.Indptr[v+1]], NodeID(v)) {
			t.Fatalf("row %d loops wrong", v)
		}
	}
	if _, err := AddSelfLoops(&CSR{NumRows: 2, NumCols: 1, Indptr: []int64{0, 0, 0}, Indices: []NodeID{}}, 1); !errors.Is(err, ErrShape) {
		t.Fatalf("non-square: %v", err)
	}
}

func TestDegrees(t *testing.T) {
	in, err := InDegrees(g0())
	if err != nil || !slices.Equal(in, []int64{1, 1, 2, 2}) {
		t.Fatalf("InDegrees %v %v", in, err)
	}
	out, err := OutDegrees(g0())
	if err != nil || !slices.Equal(out, []int64{2, 1, 2, 1}) {
		t.Fatalf("OutDegrees %v %v", out, err)
	}
	g := randomCSR(3, 60000, 20000, 9, false)
	in, _ = InDegrees(g)
	tr, _ := Transpose(g)
	want, _ := OutDegrees(tr)
	if !slices.Equal(in, want) {
		t.Fatalf("InDegrees != OutDegrees(Transpose)")
	}
	if _, err := InDegrees(&CSR{NumRows: 1}); !errors.Is(err, ErrShape) {
		t.Fatalf("bad graph: %v", err)
	}
}

func TestSortRows(t *testing.T) {
	g := g0()
	if err := SortRows(g); err != nil {
		t.Fatal(err)
	}
	want := &CSR{NumRows: 4, NumCols: 4, Indptr: []int64{0, 2, 3, 5, 6},
		Indices: []NodeID{1, 2, 2, 0, 3, 3}, Weights: []float32{0.1, 0.2, 1.2, 2.0, 2.3, 3.3}}
	if !sameCSR(g, want) {
		t.Fatalf("got %+v", g)
	}
	// Stability with repeats: weights of equal entries keep their order.
	r := randomCSR(4, 2000, 30, 40, true)
	ref := edgesOf(r)
	slices.SortStableFunc(ref, func(a, b edge) int { return cmp.Or(cmp.Compare(a.r, b.r), cmp.Compare(a.c, b.c)) })
	if ok, _ := RowsSorted(r); ok {
		t.Fatalf("random graph unexpectedly sorted")
	}
	if err := SortRows(r); err != nil {
		t.Fatal(err)
	}
	if !sameCSR(r, fromSortedEdges(r.NumRows, r.NumCols, ref, true)) {
		t.Fatalf("SortRows is not a stable sort")
	}
	if ok, err := RowsSorted(r); !ok || err != nil {
		t.Fatalf("RowsSorted after SortRows = %v, %v", ok, err)
	}
}

func TestErrorMessage(t *testing.T) {
	err := (&CSR{NumRows: 1, NumCols: 2, Indptr: []int64{0, 1}, Indices: []NodeID{5}}).Validate()
	want := "graph: Validate: Indices[0]: 5 not in [0, 2): node index out of range"
	if err == nil || err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
}

func ExampleFromEdges() {
	g, err := FromEdges(3, []NodeID{0, 2, 0}, []NodeID{2, 1, 1})
	if err != nil {
		panic(err)
	}
	in, _ := Transpose(g) // row v lists v's in-neighbors
	fmt.Println(g.Indptr, g.Indices)
	fmt.Println(in.Indptr, in.Indices)
	// Output:
	// [0 2 2 3] [1 2 1]
	// [0 0 2 3] [0 2 0]
}
