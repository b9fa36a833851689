package split

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
)

// FuzzReadEdges writes arbitrary bytes as meta.json or as one part of an
// otherwise valid edge split: ReadEdges fails with an error or returns a
// split whose edges are all in the graph, never panics.
func FuzzReadEdges(f *testing.F) {
	g := &graph.CSR{NumRows: 4, NumCols: 4, Indptr: []int64{0, 2, 4, 5, 6}, Indices: []int32{1, 2, 0, 3, 0, 1}}
	d := &dataset.Dataset{Graph: g, Directed: true}
	s, err := Edges(d, Fractions{0.5, 0.25, 0.25}, 1)
	if err != nil {
		f.Fatal(err)
	}
	seedDir := f.TempDir()
	if err := s.Replace(seedDir); err != nil {
		f.Fatal(err)
	}
	for i, name := range []string{metaFile, "train.npy", "val.npy", "test.npy"} {
		b, err := os.ReadFile(filepath.Join(seedDir, EdgeSplitDir, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(i))
	}
	dir := f.TempDir()
	if err := s.Replace(dir); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte, which uint8) {
		name := []string{metaFile, "train.npy", "val.npy", "test.npy"}[which%4]
		p := filepath.Join(dir, EdgeSplitDir, name)
		orig, _ := os.ReadFile(filepath.Join(seedDir, EdgeSplitDir, name))
		defer os.WriteFile(p, orig, 0o644)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadEdges(dir, d)
		if err != nil {
			return
		}
		for i := range 3 {
			for j := range got.Src[i] {
				if !hasEdge(g, got.Src[i][j], got.Dst[i][j]) {
					t.Fatalf("accepted edge %d->%d not in the graph", got.Src[i][j], got.Dst[i][j])
				}
			}
		}
	})
}

// FuzzReadRelationEdges writes arbitrary bytes as meta.json or as one
// part of an otherwise valid split of relation a___writes___b:
// ReadRelationEdges fails with an error or returns a split whose edges
// are all the relation's, never panics.
func FuzzReadRelationEdges(f *testing.F) {
	h := typedGraph()
	s, err := RelationEdges(h, 1, Fractions{0.6, 0.2, 0.2}, 1)
	if err != nil {
		f.Fatal(err)
	}
	seedDir := f.TempDir()
	if err := s.Replace(seedDir); err != nil {
		f.Fatal(err)
	}
	files := []string{metaFile, "train.npy", "val.npy", "test.npy"}
	for i, name := range files {
		b, err := os.ReadFile(filepath.Join(seedDir, EdgeSplitDir, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(i))
	}
	dir := f.TempDir()
	if err := s.Replace(dir); err != nil {
		f.Fatal(err)
	}
	in := h.EdgeTypes[1].In
	f.Fuzz(func(t *testing.T, b []byte, which uint8) {
		name := files[which%4]
		p := filepath.Join(dir, EdgeSplitDir, name)
		orig, _ := os.ReadFile(filepath.Join(seedDir, EdgeSplitDir, name))
		defer os.WriteFile(p, orig, 0o644)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadRelationEdges(dir, h, 1)
		if err != nil {
			return
		}
		for i := range 3 {
			for j := range got.Src[i] {
				u, v := got.Src[i][j], got.Dst[i][j]
				if u < 0 || u >= 30 || v < 0 || v >= 20 || !hasEdge(in, v, u) {
					t.Fatalf("accepted %d -> %d, no edge of the relation", u, v)
				}
			}
		}
	})
}
