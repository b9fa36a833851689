package split

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
)

// inAdj is the in-adjacency (row v: the sources of v's edges, sorted) of
// the pairs src[i] -> dst[i], nDst x nSrc.
func inAdj(nSrc, nDst int64, src, dst []int32) *graph.CSR {
	g := &graph.CSR{NumRows: nDst, NumCols: nSrc, Indptr: make([]int64, nDst+1)}
	rows := make([][]int32, nDst)
	for i := range src {
		rows[dst[i]] = append(rows[dst[i]], src[i])
	}
	for v, r := range rows {
		slices.Sort(r)
		g.Indices = append(g.Indices, r...)
		g.Indptr[v+1] = int64(len(g.Indices))
	}
	return g
}

// typedGraph has node types a (30 nodes) and b (20), a directed relation
// a___writes___b (every a node to three b nodes, one pair listed twice),
// a symmetric one-type relation b___knows___b with self-loops, and a
// directed one-type relation a___cites___a.
func typedGraph() *dataset.Hetero {
	var ws, wd []int32
	for u := int32(0); u < 30; u++ {
		for k := int32(0); k < 3; k++ {
			ws, wd = append(ws, u), append(wd, (u*7+k*5)%20)
		}
	}
	ws, wd = append(ws, 0), append(wd, 0) // 0 -> 0 is listed twice
	var ks, kd []int32
	for u := int32(0); u < 20; u++ {
		v := (u + 3) % 20
		ks, kd = append(ks, u, v, u), append(kd, v, u, u) // both directions, and a self-loop
	}
	var cs, cd []int32
	for u := int32(1); u < 30; u++ {
		cs, cd = append(cs, u), append(cd, u/2)
	}
	return &dataset.Hetero{Name: "typed", NodeTypes: []dataset.NodeType{{Name: "a", NumNodes: 30}, {Name: "b", NumNodes: 20}},
		EdgeTypes: []dataset.EdgeType{
			{Src: 0, Dst: 0, Rel: "cites", In: inAdj(30, 30, cs, cd)},
			{Src: 0, Dst: 1, Rel: "writes", In: inAdj(30, 20, ws, wd)},
			{Src: 1, Dst: 1, Rel: "knows", In: inAdj(20, 20, ks, kd)},
		}}
}

// TestRelationEdges: the parts of a relation's split are its distinct
// edges (each once, sorted, IDs local to the types), sized by the
// fractions; a one-type symmetric relation is undirected without its
// self-loops and splits as Edges splits the same graph; the same seed
// gives the same split, another seed another.
func TestRelationEdges(t *testing.T) {
	h := typedGraph()
	f := Fractions{0.7, 0.1, 0.2}
	for rel, want := range []struct {
		links    int
		directed bool
	}{{29, true}, {90, true}, {20, false}} { // writes: 91 entries, one repeated
		name := h.EdgeTypeName(rel)
		s, err := RelationEdges(h, rel, f, 5)
		if err != nil {
			t.Fatal(err)
		}
		if s.Relation != name || s.Directed != want.directed || s.NumEdges != h.EdgeTypes[rel].In.NumEdges() ||
			s.NumNodes != h.NodeTypes[h.EdgeTypes[rel].Src].NumNodes || s.NumDstNodes != h.NodeTypes[h.EdgeTypes[rel].Dst].NumNodes {
			t.Fatalf("%s: %+v", name, s)
		}
		c := f.counts(want.links)
		seen := map[[2]int32]bool{}
		for i := range 3 {
			if len(s.Src[i]) != c[i] {
				t.Fatalf("%s part %d: %d links, want %d", name, i, len(s.Src[i]), c[i])
			}
			for j := range s.Src[i] {
				u, v := s.Src[i][j], s.Dst[i][j]
				if j > 0 && !(s.Src[i][j-1] < u || s.Src[i][j-1] == u && s.Dst[i][j-1] < v) {
					t.Fatalf("%s part %d not sorted at %d", name, i, j)
				}
				if !slices.Contains(h.EdgeTypes[rel].In.Neighbors(v), u) || seen[[2]int32{u, v}] {
					t.Fatalf("%s: %d -> %d not an edge, or listed twice", name, u, v)
				}
				if !want.directed && u >= v {
					t.Fatalf("%s: undirected link %d -> %d not u < v", name, u, v)
				}
				seen[[2]int32{u, v}] = true
			}
		}
		if len(seen) != want.links {
			t.Fatalf("%s: %d links in the parts, want %d", name, len(seen), want.links)
		}
		again, _ := RelationEdges(h, rel, f, 5)
		other, _ := RelationEdges(h, rel, f, 6)
		if !slices.Equal(again.Src[2], s.Src[2]) || !slices.Equal(again.Dst[2], s.Dst[2]) {
			t.Fatalf("%s: seed 5 twice gave two splits", name)
		}
		if slices.Equal(other.Src[0], s.Src[0]) && slices.Equal(other.Dst[0], s.Dst[0]) {
			t.Fatalf("%s: seeds 5 and 6 gave one split", name)
		}
	}
	// knows, a symmetric one-type relation, is an undirected graph: the
	// homogeneous split of it is the same split.
	knows := h.EdgeTypes[2].In // symmetric: the in-adjacency is the out-adjacency
	hs, err := Edges(&dataset.Dataset{Graph: knows}, f, 5)
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := RelationEdges(h, 2, f, 5)
	for i := range 3 {
		if !slices.Equal(hs.Src[i], rs.Src[i]) || !slices.Equal(hs.Dst[i], rs.Dst[i]) {
			t.Fatalf("part %d: relation split %v/%v, homogeneous split %v/%v", i, rs.Src[i], rs.Dst[i], hs.Src[i], hs.Dst[i])
		}
	}
	if _, err := RelationEdges(h, 3, f, 5); err == nil {
		t.Fatal("relation 3 of 3 accepted")
	}
}

// TestReadRelationEdges: a relation's split reads back as written; read
// as another relation's, as a homogeneous dataset's, or with an edge
// outside the relation, it is refused naming the file.
func TestReadRelationEdges(t *testing.T) {
	h := typedGraph()
	dir := t.TempDir()
	s, err := RelationEdges(h, 1, Fractions{0.8, 0.1, 0.1}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replace(dir); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRelationEdges(dir, h, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Relation != s.Relation || got.NumDstNodes != 20 || got.Seed != 3 || got.Fractions != s.Fractions {
		t.Fatalf("read %+v", got)
	}
	for i := range 3 {
		if !slices.Equal(got.Src[i], s.Src[i]) || !slices.Equal(got.Dst[i], s.Dst[i]) {
			t.Fatalf("part %d differs", i)
		}
	}
	meta := filepath.Join(dir, EdgeSplitDir, metaFile)
	check := func(what string, err error, want string) {
		t.Helper()
		var fe *dataset.FormatError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want a FormatError with %q", what, err, want)
		}
	}
	_, err = ReadRelationEdges(dir, h, 0)
	check("as a_cites_a", err, meta+`: made for relation "a___writes___b", not a___cites___a`)
	_, err = ReadEdges(dir, &dataset.Dataset{Graph: h.EdgeTypes[0].In})
	check("as homogeneous", err, `made for relation "a___writes___b" of a typed dataset; this dataset is homogeneous`)

	// A homogeneous split read as a relation's.
	hdir := t.TempDir()
	hs, err := Edges(&dataset.Dataset{Graph: h.EdgeTypes[2].In}, Fractions{0.8, 0.1, 0.1}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := hs.Replace(hdir); err != nil {
		t.Fatal(err)
	}
	_, err = ReadRelationEdges(hdir, h, 2)
	check("homogeneous as b_knows_b", err, "made for a homogeneous graph, not relation b___knows___b")

	// A destination ID of type a's range (29 < 30 nodes of a) but outside
	// b's 20 nodes.
	tp := filepath.Join(dir, EdgeSplitDir, "test.npy")
	s2 := *s
	s2.Src[2], s2.Dst[2] = []int32{0, 1}, []int32{0, 29}
	if err := s2.Replace(dir); err != nil {
		t.Fatal(err)
	}
	_, err = ReadRelationEdges(dir, h, 1)
	check("destination out of range", err, tp+": edge 1 (1 -> 29): IDs outside the relation's 30 source and 20 destination nodes")
	s2.Dst[2] = []int32{0, 1} // 1 -> 1 is no writes edge
	if err := s2.Replace(dir); err != nil {
		t.Fatal(err)
	}
	_, err = ReadRelationEdges(dir, h, 1)
	check("not an edge", err, tp+": edge 1 (1 -> 1) is not in the graph")
	// The relation changed since the split was made.
	h2 := typedGraph()
	h2.EdgeTypes[1].In = inAdj(30, 20, []int32{0, 1, 2}, []int32{0, 1, 2})
	if err := s.Replace(dir); err != nil {
		t.Fatal(err)
	}
	_, err = ReadRelationEdges(dir, h2, 1)
	check("another graph", err, meta+": made for another graph (30+20 nodes, 91 edges")
}
