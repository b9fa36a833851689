package dataset

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/graph"
)

// tinyHetero is a typed dataset with every optional array: papers (4,
// 2 features, labeled), authors (3, 3 features) and fields (2, no
// features); authors write papers, papers cite papers (weighted), papers
// have topics (fields).
func tinyHetero() *Hetero {
	writes := &graph.CSR{NumRows: 4, NumCols: 3, // by paper: its authors
		Indptr: []int64{0, 2, 3, 4, 5}, Indices: []int32{0, 1, 1, 2, 0}}
	cites := &graph.CSR{NumRows: 4, NumCols: 4, // by cited paper: citing papers
		Indptr: []int64{0, 1, 2, 2, 4}, Indices: []int32{1, 2, 0, 2}, Weights: []float32{1, 0.5, 2, 1}}
	topic := &graph.CSR{NumRows: 2, NumCols: 4, // by field: its papers
		Indptr: []int64{0, 3, 4}, Indices: []int32{0, 1, 3, 2}}
	return &Hetero{
		Name: "tiny-typed",
		NodeTypes: []NodeType{
			{Name: "paper", NumNodes: 4, FeatDim: 2, Features: []float32{1, 0, 0, 1, 1, 1, 0.5, -2}},
			{Name: "author", NumNodes: 3, FeatDim: 3, Features: []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}},
			{Name: "field", NumNodes: 2},
		},
		EdgeTypes: []EdgeType{
			{Src: 1, Dst: 0, Rel: "writes", In: writes},
			{Src: 0, Dst: 0, Rel: "cites", In: cites},
			{Src: 0, Dst: 2, Rel: "has_topic", In: topic},
		},
		Target: 0, NumClasses: 3, Labels: []int32{0, 2, -1, 1},
		Train: []int32{0, 1}, Val: []int32{3}, Test: []int32{2},
	}
}

func sameHetero(t *testing.T, got, want *Hetero) {
	t.Helper()
	if got.Name != want.Name || got.NumClasses != want.NumClasses || (want.Labels != nil && got.Target != want.Target) {
		t.Fatalf("header: got %q %d classes target %d, want %q %d target %d", got.Name, got.NumClasses, got.Target, want.Name, want.NumClasses, want.Target)
	}
	if len(got.NodeTypes) != len(want.NodeTypes) || len(got.EdgeTypes) != len(want.EdgeTypes) {
		t.Fatalf("%d node and %d edge types, want %d and %d", len(got.NodeTypes), len(got.EdgeTypes), len(want.NodeTypes), len(want.EdgeTypes))
	}
	for i, nt := range want.NodeTypes {
		g := got.NodeTypes[i]
		if g.Name != nt.Name || g.NumNodes != nt.NumNodes || g.FeatDim != nt.FeatDim || !reflect.DeepEqual(nonNil(g.Features), nonNil(nt.Features)) {
			t.Errorf("node type %d: got %+v, want %+v", i, g, nt)
		}
	}
	for r, et := range want.EdgeTypes {
		g := got.EdgeTypes[r]
		if g.Src != et.Src || g.Dst != et.Dst || g.Rel != et.Rel || g.In.NumRows != et.In.NumRows || g.In.NumCols != et.In.NumCols ||
			!reflect.DeepEqual(g.In.Indptr, et.In.Indptr) || !reflect.DeepEqual(nonNil(g.In.Indices), nonNil(et.In.Indices)) ||
			!reflect.DeepEqual(nonNil(g.In.Weights), nonNil(et.In.Weights)) {
			t.Errorf("edge type %d: got %+v %+v, want %+v %+v", r, g, *g.In, et, *et.In)
		}
	}
	for _, c := range []struct {
		name string
		a, b []int32
	}{{"labels", got.Labels, want.Labels}, {"train", got.Train, want.Train}, {"val", got.Val, want.Val}, {"test", got.Test, want.Test}} {
		if !reflect.DeepEqual(nonNil(c.a), nonNil(c.b)) {
			t.Errorf("%s: got %v, want %v", c.name, c.a, c.b)
		}
	}
}

// nonNil maps nil and empty slices to the same value for comparisons.
func nonNil[T any](s []T) []T {
	if len(s) == 0 {
		return []T{}
	}
	return s
}

func writeTinyHetero(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "typed")
	if err := WriteHetero(dir, tinyHetero(), WriteOptions{Quiet: true}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestHeteroRoundTrip(t *testing.T) {
	dir := writeTinyHetero(t)
	for _, opts := range []OpenOptions{{Quiet: true}, {Quiet: true, NoMmap: true}} {
		h, err := OpenHetero(dir, opts)
		if err != nil {
			t.Fatalf("OpenHetero(%+v): %v", opts, err)
		}
		sameHetero(t, h, tinyHetero())
		if h.Mapped() == opts.NoMmap {
			t.Errorf("Mapped() = %v with NoMmap %v", h.Mapped(), opts.NoMmap)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := ManifestVersion(dir); err != nil || v != FormatVersionHetero {
		t.Fatalf("ManifestVersion = %d, %v", v, err)
	}
	s, err := HeteroInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := s.String()
	for _, want := range []string{"9 in 3 types", "paper                4 nodes, 2 features  (target)", "paper___cites___paper                    4, weighted", "train 2 / val 1 / test 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	// Without labels: no target, no label arrays.
	h := tinyHetero()
	h.NumClasses, h.Labels, h.Train, h.Val, h.Test = 0, nil, nil, nil, nil
	dir2 := filepath.Join(t.TempDir(), "unlabeled")
	if err := WriteHetero(dir2, h, WriteOptions{Quiet: true, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	got, err := OpenHetero(dir2, OpenOptions{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	sameHetero(t, got, h)
}

// TestVersionsRefuseEachOther: a reader of one version names the other
// one's reader instead of calling the data corrupt.
func TestVersionsRefuseEachOther(t *testing.T) {
	dir := writeTinyHetero(t)
	if _, err := Open(dir, OpenOptions{Quiet: true}); !errors.Is(err, ErrHeterogeneous) || errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "OpenHetero") {
		t.Errorf("Open of a typed dataset: %v", err)
	}
	if _, err := Info(dir); !errors.Is(err, ErrHeterogeneous) {
		t.Errorf("Info of a typed dataset: %v", err)
	}
	if _, err := OpenHetero(v1Golden, OpenOptions{Quiet: true}); !errors.Is(err, ErrHomogeneous) {
		t.Errorf("OpenHetero of a version 1 dataset: %v", err)
	}
	// A version this build does not know is still refused by number.
	b, _ := os.ReadFile(filepath.Join(dir, ManifestFile))
	if _, err := ParseHeteroManifest("m", []byte(strings.Replace(string(b), `"version": 2`, `"version": 3`, 1))); !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), "version 3") {
		t.Errorf("version 3: %v", err)
	}
}

func TestHeteroCorruption(t *testing.T) {
	dir := writeTinyHetero(t)
	path := filepath.Join(dir, "edge1.indices.bin")
	b, _ := os.ReadFile(path)
	b[5] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenHetero(dir, OpenOptions{Quiet: true})
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Path != path || fe.Off != 0 || !strings.Contains(err.Error(), "checksum mismatch in block 0") {
		t.Fatalf("flipped byte: %v", err)
	}
	// Past the checksums, the structure is still checked and located.
	b[5] ^= 1
	b[4] = 9 // edge 1: citing paper 9 of 4
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = OpenHetero(dir, OpenOptions{Quiet: true, SkipChecksums: true})
	if !errors.As(err, &fe) || fe.Path != path || fe.Off != 4 || !strings.Contains(err.Error(), "node ID 9 at entry 1 out of range [0, 4)") {
		t.Fatalf("bad ID: %v", err)
	}
	if err := os.WriteFile(path, b[:6], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenHetero(dir, OpenOptions{Quiet: true}); !errors.As(err, &fe) || fe.Off != 6 || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated: %v", err)
	}
}

// rewriteHeteroManifest edits a typed manifest and re-signs it.
func rewriteHeteroManifest(t *testing.T, dir string, edit func(*HeteroManifest)) {
	t.Helper()
	path := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m HeteroManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	if m.ManifestCRC32C, err = heteroManifestCRC(&m); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(&m)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestHeteroManifestChecks(t *testing.T) {
	cases := []struct {
		name string
		edit func(*HeteroManifest)
		want string
	}{
		{"unknown src type", func(m *HeteroManifest) { m.EdgeTypes[0].Src = "venue" }, `source and destination must be node types`},
		{"bad type name", func(m *HeteroManifest) { m.NodeTypes[2].Name = "../x" }, `byte 2 is not a letter`},
		{"dot-dot type name", func(m *HeteroManifest) { m.NodeTypes[2].Name = ".." }, `must start with a letter or digit`},
		{"duplicate relation", func(m *HeteroManifest) { m.EdgeTypes[1] = m.EdgeTypes[0] }, `listed twice`},
		{"target unknown", func(m *HeteroManifest) { m.Target = "venue" }, `target "venue" is not a node type`},
		{"huge node count", func(m *HeteroManifest) { m.NodeTypes[0].NumNodes = 1 << 40 }, `num_nodes 1099511627776 out of range`},
		{"total over int32", func(m *HeteroManifest) { m.NodeTypes[0].NumNodes, m.NodeTypes[1].NumNodes = 1<<30, 1<<30 }, `types' total`},
		{"shape lies", func(m *HeteroManifest) { m.EdgeTypes[0].NumEdges = 7 }, `"edge0.indices" has shape [5], want [7]`},
		{"missing indptr", func(m *HeteroManifest) {
			i := slices.IndexFunc(m.Arrays, func(a ArrayMeta) bool { return a.Name == "edge0.indptr" })
			m.Arrays = slices.Delete(m.Arrays, i, i+1)
		}, `required array "edge0.indptr" missing`},
		{"out of order", func(m *HeteroManifest) { m.Arrays[0], m.Arrays[1] = m.Arrays[1], m.Arrays[0] }, `listed out of order`},
		{"foreign array", func(m *HeteroManifest) { m.Arrays[0].Name = "../../etc/passwd" }, `unknown array`},
		{"split too long", func(m *HeteroManifest) {
			a := m.Array(ArrTrain)
			a.Shape[0], a.Bytes = 9, 36
		}, `want [k] with 0 <= k <= 4`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeTinyHetero(t)
			rewriteHeteroManifest(t, dir, c.edit)
			_, err := OpenHetero(dir, OpenOptions{Quiet: true})
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestValidateHeteroRejects(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Hetero)
		want string
	}{
		{"no node types", func(h *Hetero) { h.NodeTypes = nil }, "0 node types"},
		{"dst out of range", func(h *Hetero) { h.EdgeTypes[0].Dst = 7 }, "out of range [0, 3)"},
		{"graph shape", func(h *Hetero) { h.EdgeTypes[0].In.NumCols = 4 }, "graph is 4 x 4, want 4 x 3"},
		{"source ID", func(h *Hetero) { h.EdgeTypes[0].In.Indices[4] = 3 }, "edge0.indices: at byte 16: node ID 3 at entry 4 out of range [0, 3)"},
		{"indptr end", func(h *Hetero) { h.EdgeTypes[2].In.Indptr[2] = 3 }, "edge2.indptr: at byte 16: indptr ends at 3"},
		{"nan weight", func(h *Hetero) { h.EdgeTypes[1].In.Weights[2] = float32(nan()) }, "edge1.weights: at byte 8: non-finite"},
		{"features length", func(h *Hetero) { h.NodeTypes[1].Features = h.NodeTypes[1].Features[:8] }, "8 feature values, want 3 x 3"},
		{"inf feature", func(h *Hetero) { h.NodeTypes[0].Features[3] = float32(inf()) }, "node0.features: at byte 12"},
		{"label range", func(h *Hetero) { h.Labels[1] = 3 }, "labels: at byte 4: label 3 of node 1 out of range [-1, 3)"},
		{"labels length", func(h *Hetero) { h.Target = 1 }, "4 labels for the 3 nodes of target type \"author\""},
		{"split order", func(h *Hetero) { h.Train = []int32{1, 0} }, "train: at byte 4: split not strictly ascending"},
		{"split range", func(h *Hetero) { h.Test = []int32{4} }, "test: at byte 0: node ID 4 at entry 0 out of range [0, 4)"},
		{"split without labels", func(h *Hetero) { h.NumClasses, h.Labels = 0, nil }, "split present without labels"},
		{"duplicate node type", func(h *Hetero) { h.NodeTypes[2].Name = "paper" }, `node type "paper" listed twice`},
		{"relation name", func(h *Hetero) { h.EdgeTypes[0].Rel = "a___b" }, `must not end with '_' or contain "___"`},
		{"duplicate relation", func(h *Hetero) { h.EdgeTypes[2] = h.EdgeTypes[0] }, "author___writes___paper listed twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := tinyHetero()
			c.edit(h)
			err := ValidateHetero(h)
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			if err := WriteHetero(filepath.Join(t.TempDir(), "x"), h, WriteOptions{Quiet: true, NoSync: true}); err == nil {
				t.Fatal("WriteHetero wrote an invalid dataset")
			}
		})
	}
	if err := ValidateHetero(tinyHetero()); err != nil {
		t.Fatal(err)
	}
}

func TestRelationFromEdges(t *testing.T) {
	// 3 sources, 2 destinations; (2,1) twice, (0,1) once, (1,0) once.
	g, err := RelationFromEdges(3, 2, []int32{2, 0, 2, 1}, []int32{1, 1, 1, 0}, []float32{1, 4, 0.5, 2})
	if err != nil {
		t.Fatal(err)
	}
	want := &graph.CSR{NumRows: 2, NumCols: 3, Indptr: []int64{0, 1, 3}, Indices: []int32{1, 0, 2}, Weights: []float32{2, 4, 1.5}}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("got %+v, want %+v", g, want)
	}
	if _, err := RelationFromEdges(3, 2, []int32{3}, []int32{0}, nil); err == nil || !strings.Contains(err.Error(), "edge 0: 3 -> 0 out of range") {
		t.Fatalf("bad source: %v", err)
	}
	g, err = RelationFromEdges(1, 1, nil, nil, nil)
	if err != nil || g.NumEdges() != 0 || g.Weights != nil {
		t.Fatalf("empty: %+v %v", g, err)
	}
}

func TestErased(t *testing.T) {
	h := tinyHetero()
	e, err := h.Erased()
	if err != nil {
		t.Fatal(err)
	}
	if len(e.NodeTypes) != 1 || len(e.EdgeTypes) != 1 || e.NodeTypes[0].NumNodes != 9 || e.NodeTypes[0].FeatDim != 3 {
		t.Fatalf("erased shape: %+v", e.NodeTypes)
	}
	// Offsets: paper 0..3, author 4..6, field 7..8.
	if !reflect.DeepEqual(h.Offsets(), []int64{0, 4, 7, 9}) {
		t.Fatalf("offsets %v", h.Offsets())
	}
	f := e.NodeTypes[0].Features
	if !reflect.DeepEqual(f[3*3:4*3], []float32{0.5, -2, 0}) || !reflect.DeepEqual(f[4*3:5*3], []float32{1, 2, 3}) || !reflect.DeepEqual(f[8*3:], []float32{0, 0, 0}) {
		t.Fatalf("padded features %v", f)
	}
	in := e.EdgeTypes[0].In
	if in.NumEdges() != h.NumEdges() || in.Weights != nil {
		t.Fatalf("%d edges (weights %v), want %d unweighted", in.NumEdges(), in.Weights != nil, h.NumEdges())
	}
	// Paper 0's in-neighbors: authors 0, 1 (global 4, 5) and paper 1 (cites).
	if got := in.Neighbors(0); !reflect.DeepEqual(got, []int32{1, 4, 5}) {
		t.Fatalf("erased in-neighbors of paper 0: %v", got)
	}
	// Field 0 (global 7) receives papers 0, 1, 3.
	if got := in.Neighbors(7); !reflect.DeepEqual(got, []int32{0, 1, 3}) {
		t.Fatalf("erased in-neighbors of field 0: %v", got)
	}
	if !reflect.DeepEqual(e.Labels[:4], h.Labels) || e.Labels[4] != -1 || !reflect.DeepEqual(e.Train, h.Train) {
		t.Fatalf("labels %v train %v", e.Labels, e.Train)
	}
	d, err := h.ToHomogeneous()
	if err != nil {
		t.Fatal(err)
	}
	if !d.Directed || d.NumNodes() != 9 || d.Graph.NumEdges() != h.NumEdges() || d.FeatDim != 3 {
		t.Fatalf("homogeneous: %+v", d)
	}
	// The out-adjacency: author 0 (global 4) writes papers 0 and 3.
	if got := d.Graph.Neighbors(4); !reflect.DeepEqual(got, []int32{0, 3}) {
		t.Fatalf("out-neighbors of author 0: %v", got)
	}
	inAdj, _ := d.InAdjacency()
	if !reflect.DeepEqual(inAdj.Indices, in.Indices) {
		t.Fatalf("homogeneous in-adjacency differs from the erased relation")
	}
}

func TestAddReverse(t *testing.T) {
	h := tinyHetero()
	r, err := h.AddReverse()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.EdgeTypes) != 5 {
		t.Fatalf("%d relations, want 5", len(r.EdgeTypes))
	}
	rev := r.EdgeType("rev_writes")
	if rev < 0 || r.EdgeTypeName(rev) != "paper___rev_writes___author" {
		t.Fatalf("rev_writes = %d", rev)
	}
	// Author 0 wrote papers 0 and 3.
	if got := r.EdgeTypes[rev].In.Neighbors(0); !reflect.DeepEqual(got, []int32{0, 3}) {
		t.Fatalf("papers of author 0: %v", got)
	}
	// cites is symmetrized: paper 2 cites 1 and is cited by 3, so it is
	// linked to 1 and 3; weights of both directions add up (3->0 has 2).
	c := r.EdgeTypes[1].In
	if got := c.Neighbors(2); !reflect.DeepEqual(got, []int32{1, 3}) {
		t.Fatalf("symmetric cites of paper 2: %v", got)
	}
	if h.EdgeTypes[1].In.NumEdges() != 4 {
		t.Fatal("AddReverse changed its input")
	}
	// Applying it twice adds nothing more.
	r2, err := r.AddReverse()
	if err != nil || len(r2.EdgeTypes) != 5 {
		t.Fatalf("second AddReverse: %d relations, %v", len(r2.EdgeTypes), err)
	}
	if r.EdgeType("writes") != 0 || r.EdgeType("venue") != -1 {
		t.Fatal("EdgeType lookup")
	}
}

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }
