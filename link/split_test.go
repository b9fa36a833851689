package link

import (
	"errors"
	"runtime"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

func cora(t testing.TB) *dataset.Dataset {
	t.Helper()
	ds, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

type pair struct{ u, v int32 }

func pairs(e Edges) []pair {
	out := make([]pair, e.Len())
	for i := range out {
		out[i] = pair{e.Src[i], e.Dst[i]}
	}
	return out
}

// TestSplitCora: on Cora (undirected, both directions stored) the links
// are the 5,278 pairs u < v; the three parts have PyG's sizes, are
// disjoint and cover every link; the message-passing graph holds both
// directions of every training link and neither direction of any held-out
// link; the fixed negatives are non-edges; the split is a function of the
// seed.
func TestSplitCora(t *testing.T) {
	g := cora(t).Graph
	s, err := NewSplit(g, DefaultFractions, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Undirected {
		t.Fatal("Cora not recognized as undirected")
	}
	const links = 10556 / 2
	if s.Val.Len() != 263 || s.Test.Len() != 527 || s.Train.Len() != links-263-527 {
		t.Fatalf("split %d/%d/%d, want 4488/263/527 (floor(0.05 L), floor(0.1 L), rest)", s.Train.Len(), s.Val.Len(), s.Test.Len())
	}
	seen := map[pair]string{}
	for name, e := range map[string]Edges{"train": s.Train, "val": s.Val, "test": s.Test} {
		for _, p := range pairs(e) {
			if p.u >= p.v {
				t.Fatalf("%s link %v is not u < v", name, p)
			}
			if !hasEdge(g, p.u, p.v) {
				t.Fatalf("%s link %v is no edge of the graph", name, p)
			}
			if other, dup := seen[p]; dup {
				t.Fatalf("link %v is in %s and %s", p, other, name)
			}
			seen[p] = name
		}
	}
	if len(seen) != links {
		t.Fatalf("%d links in the split, the graph has %d", len(seen), links)
	}
	if s.Out.NumEdges() != int64(2*s.Train.Len()) || s.In != s.Out {
		t.Fatalf("message passing has %d entries, want both directions of %d links (and In == Out)", s.Out.NumEdges(), s.Train.Len())
	}
	for _, p := range pairs(s.Train) {
		if !hasEdge(s.Out, p.u, p.v) || !hasEdge(s.Out, p.v, p.u) {
			t.Fatalf("training link %v lacks a direction in message passing", p)
		}
	}
	for _, held := range []Edges{s.Val, s.Test} {
		for _, p := range pairs(held) {
			if hasEdge(s.Out, p.u, p.v) || hasEdge(s.Out, p.v, p.u) {
				t.Fatalf("held-out link %v leaks into message passing", p)
			}
		}
	}
	for name, neg := range map[string]Edges{"val": s.ValNeg, "test": s.TestNeg} {
		want := s.Val.Len()
		if name == "test" {
			want = s.Test.Len()
		}
		if neg.Len() != want {
			t.Fatalf("%d %s negatives for %d positives", neg.Len(), name, want)
		}
		for _, p := range pairs(neg) {
			if p.u == p.v || hasEdge(g, p.u, p.v) {
				t.Fatalf("%s negative %v is a self-pair or an edge", name, p)
			}
		}
	}
	again, err := NewSplit(g, DefaultFractions, 7)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]Edges{{s.Train, again.Train}, {s.Val, again.Val}, {s.Test, again.Test}, {s.ValNeg, again.ValNeg}, {s.TestNeg, again.TestNeg}} {
		if !slices.Equal(pairs(c[0]), pairs(c[1])) {
			t.Fatal("the same seed gave another split")
		}
	}
	other, err := NewSplit(g, DefaultFractions, 8)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(pairs(s.Test), pairs(other.Test)) || slices.Equal(pairs(s.TestNeg), pairs(other.TestNeg)) {
		t.Fatal("seeds 7 and 8 gave the same test links or negatives")
	}
}

// TestSplitDirected: in a directed graph every edge is a link; holding
// out u->v keeps v->u when that is a training link; the in-adjacency is
// the transpose; self-loops stay in message passing and duplicates count
// once.
func TestSplitDirected(t *testing.T) {
	var src, dst []int32
	const n = 40
	for u := int32(0); u < n; u++ {
		for _, d := range []int32{1, 3, 7} {
			src, dst = append(src, u), append(dst, (u+d)%n)
		}
		if u%4 == 0 { // a few reverse edges, a self-loop and a duplicate
			src, dst = append(src, (u+1)%n, u, u), append(dst, u, u, (u+1)%n)
		}
	}
	g, err := graph.FromEdges(n, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSplit(g, Fractions{0.6, 0.2, 0.2}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if s.Undirected {
		t.Fatal("directed graph taken as undirected")
	}
	links := n*3 + n/4 // the duplicates and self-loops are no links
	if got := s.Train.Len() + s.Val.Len() + s.Test.Len(); got != links {
		t.Fatalf("%d links, want %d", got, links)
	}
	if s.SelfLoops != n/4 {
		t.Fatalf("%d self-loops, want %d", s.SelfLoops, n/4)
	}
	if s.Out.NumEdges() != int64(s.Train.Len()+s.SelfLoops) {
		t.Fatalf("message passing has %d edges, want %d training links + %d self-loops", s.Out.NumEdges(), s.Train.Len(), s.SelfLoops)
	}
	for u := int32(0); u < n; u += 4 {
		if !hasEdge(s.Out, u, u) {
			t.Fatalf("self-loop of %d left message passing", u)
		}
	}
	train := map[pair]bool{}
	for _, p := range pairs(s.Train) {
		train[p] = true
	}
	for _, held := range []Edges{s.Val, s.Test} {
		for _, p := range pairs(held) {
			if hasEdge(s.Out, p.u, p.v) {
				t.Fatalf("held-out %v in message passing", p)
			}
			if hasEdge(s.Out, p.v, p.u) != train[pair{p.v, p.u}] {
				t.Fatalf("reverse of held-out %v: in message passing %v, a training link %v", p, hasEdge(s.Out, p.v, p.u), train[pair{p.v, p.u}])
			}
		}
	}
	want, err := graph.Transpose(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(want.Indptr, s.In.Indptr) || !slices.Equal(want.Indices, s.In.Indices) {
		t.Fatal("In is not the transpose of Out")
	}
}

func TestSplitErrors(t *testing.T) {
	tiny, _ := graph.FromEdges(3, []int32{0, 1}, []int32{1, 2})
	var se *SplitError
	if _, err := NewSplit(tiny, DefaultFractions, 1); !errors.As(err, &se) {
		t.Errorf("2 links split 85/5/10: %v, want a *SplitError", err)
	}
	if _, err := NewSplit(nil, DefaultFractions, 1); !errors.As(err, &se) {
		t.Errorf("nil graph: %v", err)
	}
	rect := &graph.CSR{NumRows: 2, NumCols: 3, Indptr: []int64{0, 1, 1}, Indices: []int32{2}}
	if _, err := NewSplit(rect, DefaultFractions, 1); !errors.As(err, &se) {
		t.Errorf("2 x 3 graph: %v", err)
	}
	bad := &graph.CSR{NumRows: 2, NumCols: 2, Indptr: []int64{0, 1, 1}, Indices: []int32{5}}
	if _, err := NewSplit(bad, DefaultFractions, 1); !errors.As(err, &se) {
		t.Errorf("index out of range: %v", err)
	}
	// A complete graph has no negatives to draw.
	var src, dst []int32
	for u := range int32(30) {
		for v := range int32(30) {
			if u != v {
				src, dst = append(src, u), append(dst, v)
			}
		}
	}
	full, _ := graph.FromEdges(30, src, dst)
	if _, err := NewSplit(full, DefaultFractions, 1); !errors.As(err, &se) {
		t.Errorf("complete graph: %v, want a *SplitError (no negatives)", err)
	}
}

func TestParseFractions(t *testing.T) {
	good := map[string]Fractions{
		"0.85,0.05,0.10":  {0.85, 0.05, 0.10},
		"0.8, 0.1, 0.1":   {0.8, 0.1, 0.1},
		"0.5,0.25,0.25":   {0.5, 0.25, 0.25},
		"0.98,0.01,0.010": {0.98, 0.01, 0.01},
	}
	for s, want := range good {
		got, err := ParseFractions(s)
		if err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0.85,0.05", "0.85,0.05,0.1,0", "a,b,c", "0.9,0.05,0.1", "1,0,0", "0.9,0.1,0",
		"0,0.5,0.5", "-0.1,0.6,0.5", "NaN,0.5,0.5", "Inf,0,0", "0.85,0.05,0.1e400"} {
		if _, err := ParseFractions(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// FuzzParseFractions: any string is refused with an error or yields
// fractions that validate (never a panic).
func FuzzParseFractions(f *testing.F) {
	for _, s := range []string{"0.85,0.05,0.10", "0.8,0.1,0.1", ",,", "1e309,0,0", "NaN,NaN,NaN", "0.5,0.25,0.25"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fr, err := ParseFractions(s)
		if err != nil {
			return
		}
		if err := fr.Validate(); err != nil {
			t.Fatalf("%q parsed to %v, which does not validate: %v", s, fr, err)
		}
	})
}

// TestFromEdgeSplit: a stored edge split (package split's, as 'strata
// split' writes it) gives exactly its parts; the message-passing graph
// holds both directions of every training link, the self-loops, and no
// held-out link; the evaluation negatives are those of the seed.
func TestFromEdgeSplit(t *testing.T) {
	ds := cora(t)
	es, err := split.Edges(ds, split.Fractions{0.85, 0.05, 0.1}, 3)
	if err != nil {
		t.Fatal(err)
	}
	s, err := FromEdgeSplit(ds.Graph, es, 11)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Undirected || s.Source != "" {
		t.Fatalf("undirected %v source %q", s.Undirected, s.Source)
	}
	for i, e := range []Edges{s.Train, s.Val, s.Test} {
		if !slices.Equal(e.Src, es.Src[i]) || !slices.Equal(e.Dst, es.Dst[i]) {
			t.Fatalf("part %d differs from the stored split", i)
		}
	}
	if got, want := s.Out.NumEdges(), int64(2*s.Train.Len()+s.SelfLoops); got != want {
		t.Fatalf("message-passing graph has %d edges, want %d", got, want)
	}
	for _, e := range []Edges{s.Val, s.Test} {
		for _, p := range pairs(e) {
			if hasEdge(s.Out, p.u, p.v) || hasEdge(s.Out, p.v, p.u) {
				t.Fatalf("held-out link %v in the message-passing graph", p)
			}
		}
	}
	for _, p := range pairs(s.Train) {
		if !hasEdge(s.Out, p.u, p.v) || !hasEdge(s.Out, p.v, p.u) {
			t.Fatalf("training link %v missing from the message-passing graph", p)
		}
	}
	again, err := FromEdgeSplit(ds.Graph, es, 11)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.ValNeg.Src, s.ValNeg.Src) || !slices.Equal(again.TestNeg.Dst, s.TestNeg.Dst) || s.ValNeg.Len() != s.Val.Len() {
		t.Fatal("evaluation negatives are not a function of the seed")
	}
	// MakeSplit prefers the stored split and says so.
	cfg := Defaults("gcn")
	m, err := MakeSplit(ds, &cfg, es)
	if err != nil || m.Source != SourceStored || m.Stats().Source != SourceStored || m.Train.Len() != len(es.Src[0]) {
		t.Fatalf("MakeSplit with a stored split: %v, %+v", err, m.Stats())
	}
	// Links in no part stay in message passing (and are not trained).
	part, err := split.Edges(ds, split.Fractions{0.5, 0.05, 0.1}, 3)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := FromEdgeSplit(ds.Graph, part, 11)
	if err != nil {
		t.Fatal(err)
	}
	const links = 10556 / 2
	rest := links - ps.Train.Len() - ps.Val.Len() - ps.Test.Len()
	if rest < 1000 || ps.Train.Len() != len(part.Src[0]) || ps.Out.NumEdges() != int64(2*(ps.Train.Len()+rest)+ps.SelfLoops) {
		t.Fatalf("%d training links, %d in no part: %d message-passing edges", ps.Train.Len(), rest, ps.Out.NumEdges())
	}
	for _, e := range []Edges{ps.Val, ps.Test} {
		for _, p := range pairs(e) {
			if hasEdge(ps.Out, p.u, p.v) || hasEdge(ps.Out, p.v, p.u) {
				t.Fatalf("held-out link %v in the message-passing graph", p)
			}
		}
	}
	// Bad input is an error, not a panic.
	bad := *es
	bad.Src[1] = []int32{}
	bad.Dst[1] = []int32{}
	var se *SplitError
	if _, err := FromEdgeSplit(ds.Graph, &bad, 1); !errors.As(err, &se) {
		t.Fatalf("empty validation part: %v", err)
	}
	bad = *es
	bad.Src[0] = slices.Clone(es.Src[0])
	bad.Src[0][0] = int32(ds.NumNodes())
	if _, err := FromEdgeSplit(ds.Graph, &bad, 1); !errors.As(err, &se) {
		t.Fatalf("out-of-range node: %v", err)
	}
}

// sequentialSplit is NewSplit as it was written before its passes ran
// in parallel (one loop over the rows, Fisher-Yates on two arrays from
// an rng.Stream, one evaluation negative after the other): the oracle of
// TestSplitParallelEqualsSequential.
func sequentialSplit(t *testing.T, g *graph.CSR, f Fractions, seed uint64) *Split {
	t.Helper()
	if sorted, _ := graph.RowsSorted(g); !sorted {
		g = graph.Clone(g)
		if err := graph.SortRows(g); err != nil {
			t.Fatal(err)
		}
	}
	sym := true
	for u := int32(0); int64(u) < g.NumRows; u++ {
		for _, v := range g.Neighbors(u) {
			sym = sym && hasEdge(g, v, u)
		}
	}
	s := &Split{NumNodes: g.NumRows, Undirected: sym}
	var links Edges
	var loops []int32
	for u := int32(0); int64(u) < g.NumRows; u++ {
		row := g.Neighbors(u)
		for i, v := range row {
			switch {
			case i > 0 && v == row[i-1]:
			case v == u:
				loops = append(loops, u)
			case s.Undirected && v < u:
			default:
				links.add(u, v)
			}
		}
	}
	s.SelfLoops = len(loops)
	l := links.Len()
	nVal, nTest := int(f.Val*float64(l)), int(f.Test*float64(l))
	st := rng.NewStream(rng.Derive(seed, tagSplit))
	for i := l - 1; i > 0; i-- {
		j := int(st.Below(uint64(i + 1)))
		links.Src[i], links.Src[j] = links.Src[j], links.Src[i]
		links.Dst[i], links.Dst[j] = links.Dst[j], links.Dst[i]
	}
	cut := func(lo, hi int) Edges { return Edges{Src: links.Src[lo:hi:hi], Dst: links.Dst[lo:hi:hi]} }
	s.Val, s.Test, s.Train = cut(0, nVal), cut(nVal, nVal+nTest), cut(nVal+nTest, l)
	neg := func(count int, key uint64) Edges {
		st := rng.NewStream(key)
		n := uint64(g.NumRows)
		var out Edges
		for out.Len() < count {
			u, v := int32(st.Below(n)), int32(st.Below(n))
			if u != v && !hasEdge(g, u, v) {
				out.add(u, v)
			}
		}
		return out
	}
	s.ValNeg, s.TestNeg = neg(nVal, rng.Derive(seed, tagEvalNeg, 0)), neg(nTest, rng.Derive(seed, tagEvalNeg, 1))
	return s
}

// TestSplitParallelEqualsSequential: NewSplit, its passes cut into many
// chunks on 1 and 8 goroutines, makes the split of the sequential
// oracle (the code before they ran in parallel) edge for edge: the
// parts in their order, the evaluation negatives, the self-loops, on
// Cora (undirected) and on a random directed graph with duplicate
// entries and self-loops; and a graph missing one mirror
// entry is directed.
func TestSplitParallelEqualsSequential(t *testing.T) {
	defer func(c, r, m, w int) { splitChunk, negRound, shuffleMin, shuffleWindow = c, r, m, w }(splitChunk, negRound, shuffleMin, shuffleWindow)
	splitChunk, negRound, shuffleMin, shuffleWindow = 64, 16, 64, 16
	st := rng.NewStream(5)
	const n = 300
	var src, dst []int32
	for range 4000 {
		u, v := int32(st.Below(n)), int32(st.Below(n))
		src, dst = append(src, u), append(dst, v)
		if st.Below(10) == 0 {
			src, dst = append(src, u), append(dst, v) // a duplicate
		}
	}
	directed, err := graph.FromEdges(n, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	// Cora less one direction of one edge: no longer symmetric.
	g := cora(t).Graph
	u := int32(0)
	for g.Degree(u) == 0 {
		u++
	}
	var os, od []int32
	for w := int32(0); int64(w) < g.NumRows; w++ {
		for _, v := range g.Neighbors(w) {
			if w == u && v == g.Neighbors(u)[0] {
				continue
			}
			os, od = append(os, w), append(od, v)
		}
	}
	oneWay, err := graph.FromEdges(g.NumRows, os, od)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		g          *graph.CSR
		undirected bool
	}{{"cora", g, true}, {"random directed", directed, false}, {"cora less one mirror", oneWay, false}} {
		want := sequentialSplit(t, c.g, DefaultFractions, 11)
		if want.Undirected != c.undirected {
			t.Fatalf("%s: the oracle says undirected %v", c.name, want.Undirected)
		}
		for _, procs := range []int{1, 8} {
			prev := runtime.GOMAXPROCS(procs)
			got, err := NewSplit(c.g, DefaultFractions, 11)
			runtime.GOMAXPROCS(prev)
			if err != nil {
				t.Fatal(err)
			}
			if got.Undirected != want.Undirected || got.SelfLoops != want.SelfLoops {
				t.Fatalf("%s on %d goroutines: undirected %v, %d loops; sequential %v, %d", c.name, procs, got.Undirected, got.SelfLoops, want.Undirected, want.SelfLoops)
			}
			for _, p := range []struct {
				part      string
				got, want Edges
			}{{"train", got.Train, want.Train}, {"val", got.Val, want.Val}, {"test", got.Test, want.Test},
				{"val negatives", got.ValNeg, want.ValNeg}, {"test negatives", got.TestNeg, want.TestNeg}} {
				if p.want.Len() == 0 || !slices.Equal(p.got.Src, p.want.Src) || !slices.Equal(p.got.Dst, p.want.Dst) {
					t.Fatalf("%s on %d goroutines: %s differ from the sequential split's (%d vs %d pairs)", c.name, procs, p.part, p.got.Len(), p.want.Len())
				}
			}
		}
	}
}

// TestShuffleRoundsEqualsFisherYates: the shuffle in parallel rounds
// (deterministic reservations) is the sequential Fisher-Yates
// permutation of the same stream, for several lengths and windows, on 1
// to 8 goroutines.
func TestShuffleRoundsEqualsFisherYates(t *testing.T) {
	for _, c := range []struct{ l, window int }{{2, 1}, {3, 1}, {1000, 7}, {100000, 1000}, {100000, 64}} {
		want := make([]uint64, c.l)
		for i := range want {
			want[i] = uint64(i)*3 + 1
		}
		got := slices.Clone(want)
		st := rng.NewStream(rng.Derive(9, uint64(c.l)))
		for i := c.l - 1; i > 0; i-- {
			j := int(st.Below(uint64(i + 1)))
			want[i], want[j] = want[j], want[i]
		}
		for _, procs := range []int{1, 3, 8} {
			in := slices.Clone(got)
			prev := runtime.GOMAXPROCS(procs)
			old := shuffleWindow
			shuffleWindow = c.window
			shuffleRounds(in, rng.Derive(9, uint64(c.l)))
			shuffleWindow = old
			runtime.GOMAXPROCS(prev)
			if !slices.Equal(in, want) {
				t.Fatalf("%d items, window %d, %d goroutines: the rounds' permutation differs from Fisher-Yates'", c.l, c.window, procs)
			}
		}
	}
}
