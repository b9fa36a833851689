package split

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/graph"
)

func cora(t testing.TB) *dataset.Dataset {
	t.Helper()
	d, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestFractionsCheck(t *testing.T) {
	for _, f := range []Fractions{{0.6, 0.2, 0.2}, {0.85, 0.05, 0.1}, {1, 0, 0}, {0.1, 0.1, 0.1}} {
		if err := f.Check(); err != nil {
			t.Errorf("%v: %v", f, err)
		}
	}
	for _, f := range []Fractions{{0.6, 0.3, 0.2}, {-0.1, 0.5, 0.5}, {math.NaN(), 0, 0}, {0, 0, 0}, {2, 0, 0}} {
		if err := f.Check(); err == nil {
			t.Errorf("%v accepted", f)
		}
	}
}

// TestNodeSplit: fractions of the labeled nodes, disjoint and sorted,
// stratified proportions per class, and the same result for the same seed.
func TestNodeSplit(t *testing.T) {
	d := cora(t)
	labels := slices.Clone(d.Labels)
	for v := 0; v < len(labels); v += 10 {
		labels[v] = -1 // some unlabeled nodes are in no split
	}
	labeled := 0
	for _, l := range labels {
		if l >= 0 {
			labeled++
		}
	}
	f := Fractions{0.6, 0.2, 0.2}
	for _, strat := range []bool{false, true} {
		tr, va, te, err := Nodes(labels, f, 7, strat)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int32]bool{}
		for i, part := range [][]int32{tr, va, te} {
			if !slices.IsSorted(part) {
				t.Fatalf("part %d not sorted", i)
			}
			if got, want := float64(len(part)), f[i]*float64(labeled); math.Abs(got-want) > 8 {
				t.Errorf("stratify=%v part %d: %d nodes, want about %.0f", strat, i, len(part), want)
			}
			for _, v := range part {
				if seen[v] || labels[v] < 0 {
					t.Fatalf("node %d twice or unlabeled", v)
				}
				seen[v] = true
			}
		}
		if len(seen) != labeled {
			t.Fatalf("%d nodes split, want all %d labeled", len(seen), labeled)
		}
		tr2, va2, te2, _ := Nodes(labels, f, 7, strat)
		if !slices.Equal(tr, tr2) || !slices.Equal(va, va2) || !slices.Equal(te, te2) {
			t.Fatalf("same seed, different split")
		}
		tr3, _, _, _ := Nodes(labels, f, 8, strat)
		if slices.Equal(tr, tr3) {
			t.Fatalf("another seed gave the same train set")
		}
		if strat { // every class is split 60/20/20 to within one node
			per := map[int32][3]int{}
			total := map[int32]int{}
			for i, part := range [][]int32{tr, va, te} {
				for _, v := range part {
					c := per[labels[v]]
					c[i]++
					per[labels[v]] = c
				}
			}
			for _, l := range labels {
				if l >= 0 {
					total[l]++
				}
			}
			for c, n := range total {
				for i := range 3 {
					if got, want := float64(per[c][i]), f[i]*float64(n); math.Abs(got-want) > 1 {
						t.Errorf("class %d part %d: %v nodes, want %.1f", c, i, got, want)
					}
				}
			}
		}
	}
}

// TestEdgeSplit: Cora 85/5/10 holds each undirected edge once (u < v),
// in exactly one part, with the fractions asked; the same seed gives the
// same split; a directed graph splits its directed edges; self-loops are
// never held out.
func TestEdgeSplit(t *testing.T) {
	d := cora(t)
	f := Fractions{0.85, 0.05, 0.10}
	s, err := Edges(d, f, 3)
	if err != nil {
		t.Fatal(err)
	}
	undirected := int(d.Graph.NumEdges() / 2) // Cora has no self-loops
	seen := map[[2]int32]bool{}
	for i := range 3 {
		if got, want := float64(len(s.Src[i])), f[i]*float64(undirected); math.Abs(got-want) > 1 {
			t.Errorf("part %d: %v edges, want %.1f", i, got, want)
		}
		for j := range s.Src[i] {
			u, v := s.Src[i][j], s.Dst[i][j]
			if u >= v || seen[[2]int32{u, v}] || !hasEdge(d.Graph, u, v) {
				t.Fatalf("part %d edge %d->%d: not canonical, repeated or not in the graph", i, u, v)
			}
			seen[[2]int32{u, v}] = true
			if j > 0 && (s.Src[i][j-1] > u || s.Src[i][j-1] == u && s.Dst[i][j-1] >= v) {
				t.Fatalf("part %d not sorted at %d", i, j)
			}
		}
	}
	if len(seen) != undirected {
		t.Fatalf("%d edges in the split, want %d", len(seen), undirected)
	}
	s2, _ := Edges(d, f, 3)
	for i := range 3 {
		if !slices.Equal(s.Src[i], s2.Src[i]) || !slices.Equal(s.Dst[i], s2.Dst[i]) {
			t.Fatalf("same seed, different part %d", i)
		}
	}
	// The test part does not depend on the train fraction.
	s3, _ := Edges(d, Fractions{0.5, 0.05, 0.10}, 3)
	if !slices.Equal(s.Src[2], s3.Src[2]) || !slices.Equal(s.Dst[2], s3.Dst[2]) {
		t.Fatalf("the test edges changed with the train fraction")
	}

	g := &graph.CSR{NumRows: 3, NumCols: 3, Indptr: []int64{0, 2, 3, 4}, Indices: []int32{0, 1, 0, 1}}
	dd := &dataset.Dataset{Graph: g, Directed: true}
	s, err = Edges(dd, Fractions{0, 0, 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Src[2], []int32{0, 1, 2}) || !slices.Equal(s.Dst[2], []int32{1, 0, 1}) {
		t.Fatalf("directed: %v -> %v, want every edge but the self-loop", s.Src[2], s.Dst[2])
	}
}

// TestEdgeSplitFiles: WriteDir/Replace then ReadEdges gives the split back;
// ReadEdges refuses a split of another graph, edges not in the graph,
// repeated edges, wrong counts and other versions, naming the file.
func TestEdgeSplitFiles(t *testing.T) {
	d := cora(t)
	s, err := Edges(d, Fractions{0.85, 0.05, 0.10}, 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := s.Replace(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Replace(dir); err != nil { // replacing an existing one
		t.Fatal(err)
	}
	got, err := ReadEdges(dir, d)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if !slices.Equal(got.Src[i], s.Src[i]) || !slices.Equal(got.Dst[i], s.Dst[i]) {
			t.Fatalf("part %d differs after reading", i)
		}
	}
	if got.Fractions != s.Fractions || got.Seed != 0 || got.GraphCRC != GraphCRC(d.Graph) {
		t.Fatalf("metadata %+v", got)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}

	// Another graph: drop one edge pair.
	other := cora(t)
	g := other.Graph
	g.Indices = slices.Clone(g.Indices)
	g.Indices[0] = g.Indices[1]
	if _, err := ReadEdges(dir, other); err == nil || !strings.Contains(err.Error(), "made for another graph") {
		t.Fatalf("another graph: %v", err)
	}

	corrupt := func(name string, edit func(b []byte) []byte) error {
		t.Helper()
		d2 := t.TempDir()
		if err := s.Replace(d2); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d2, EdgeSplitDir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, edit(b), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = ReadEdges(d2, d)
		return err
	}
	setLast := func(b []byte, v byte) []byte { b[len(b)-8] = v; return b } // last dst
	for _, tc := range []struct {
		name, file string
		edit       func([]byte) []byte
		want       string
	}{
		{"version", metaFile, func(b []byte) []byte { return []byte(strings.Replace(string(b), `"version": 1`, `"version": 2`, 1)) }, "unsupported edge split version 2"},
		{"count", metaFile, func(b []byte) []byte {
			return []byte(strings.Replace(string(b), "\"counts\": [\n    ", "\"counts\": [\n    1", 1))
		}, "meta.json says"},
		{"unknown field", metaFile, func(b []byte) []byte { return []byte(strings.Replace(string(b), `{`, `{"x": 1,`, 1)) }, "unknown field"},
		{"not an edge", "test.npy", func(b []byte) []byte { return setLast(b, 0) }, "test.npy"},
		{"out of range", "val.npy", func(b []byte) []byte { b[len(b)-4] = 0x7f; return b }, "val.npy"},
	} {
		err := corrupt(tc.file, tc.edit)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if !errors.Is(err, dataset.ErrCorruption) {
			t.Errorf("%s: %v does not wrap ErrCorruption", tc.name, err)
		}
	}
}
