package layout

import (
	"errors"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
)

// in-adjacency of 6 nodes: row lengths 2, 0, 3, 1, 4, 1.
func testGraph() *graph.CSR {
	return &graph.CSR{NumRows: 6, NumCols: 6,
		Indptr:  []int64{0, 2, 2, 5, 6, 10, 11},
		Indices: []graph.NodeID{1, 2, 0, 3, 4, 5, 0, 1, 2, 3, 4}}
}

func TestBuildRowsAndEdges(t *testing.T) {
	g := testGraph()
	b, _ := book.New([]int64{0, 2, 5, 6})
	p, err := Build(g, b, 1, Options{DeviceBytes: NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	if p.Lo != 2 || p.Hi != 5 || p.NumRows() != 3 || p.NumEdges() != 8 || p.EdgeBase != 2 {
		t.Fatalf("patch [%d, %d), %d rows, %d edges, base %d", p.Lo, p.Hi, p.NumRows(), p.NumEdges(), p.EdgeBase)
	}
	if err := p.Graph.Validate(); err != nil {
		t.Fatal(err)
	}
	for v := graph.NodeID(0); v < 6; v++ {
		got := p.Graph.Neighbors(v)
		if p.Owns(v) {
			want := g.Neighbors(v)
			if len(got) != len(want) {
				t.Fatalf("row %d: %v, want %v", v, got, want)
			}
			for i := range got {
				if got[i] != want[i] || p.Graph.Indices[p.Graph.Indptr[v]+int64(i)] != g.Indices[p.EdgeBase+p.Graph.Indptr[v]+int64(i)] {
					t.Fatalf("row %d entry %d differs or edge IDs are not offset by EdgeBase", v, i)
				}
			}
		} else if len(got) != 0 {
			t.Fatalf("row %d not owned but has %v", v, got)
		}
	}
	if p.DeviceRows() != 3 || p.HostBytes() != 0 || p.DeviceBytes() != 3*8+8*4 {
		t.Fatalf("unlimited budget: %d rows, %d device bytes, %d host bytes", p.DeviceRows(), p.DeviceBytes(), p.HostBytes())
	}
}

func TestPlacementByBudget(t *testing.T) {
	g := testGraph()
	b, _ := book.New([]int64{0, 6})
	// Rows by length: 4 (4), 2 (3), 0 (2), 3 (1), 5 (1), 1 (0). Costs 8+4d:
	// 24, 20, 16, 12, 12, 8. A budget of 50 fits rows 4 and 2 (44).
	p, err := Build(g, b, 0, Options{DeviceBytes: 50})
	if err != nil {
		t.Fatal(err)
	}
	for v, want := range []Place{Host, Host, Device, Host, Device, Host} {
		if got := p.Place(graph.NodeID(v)); got != want {
			t.Fatalf("row %d in %v, want %v", v, got, want)
		}
	}
	if p.DeviceBytes() != 44 || p.DeviceBytes()+p.HostBytes() != 6*8+11*4 {
		t.Fatalf("device %d, host %d bytes", p.DeviceBytes(), p.HostBytes())
	}
	if ids := p.DeviceRowIDs(); !slices.Equal(ids, []graph.NodeID{2, 4}) {
		t.Fatalf("device rows %v, want [2 4]", ids)
	}
	p0, _ := Build(g, b, 0, Options{DeviceBytes: 0})
	if p0.DeviceRows() != 0 || len(p0.DeviceRowIDs()) != 0 {
		t.Fatalf("budget 0 placed %d rows on the device", p0.DeviceRows())
	}
}

// TestBuildWhole: the whole graph as one patch, the longest rows on the
// device within the budget, as Build with a one-part book.
func TestBuildWhole(t *testing.T) {
	g := testGraph()
	p, b, err := BuildWhole(g, Options{DeviceBytes: 50})
	if err != nil {
		t.Fatal(err)
	}
	if b.K() != 1 || p.Lo != 0 || int64(p.Hi) != g.NumRows || p.NumEdges() != g.NumEdges() {
		t.Fatalf("patch [%d, %d) of %d edges, %d parts", p.Lo, p.Hi, p.NumEdges(), b.K())
	}
	if ids := p.DeviceRowIDs(); !slices.Equal(ids, []graph.NodeID{2, 4}) {
		t.Fatalf("device rows %v, want [2 4]", ids)
	}
	if _, _, err := BuildWhole(nil, Options{}); !errors.Is(err, ErrInput) {
		t.Fatalf("nil graph: %v", err)
	}
}

func TestBuildErrors(t *testing.T) {
	g := testGraph()
	b, _ := book.New([]int64{0, 3, 6})
	short, _ := book.New([]int64{0, 5})
	bad := &graph.CSR{NumRows: 2, NumCols: 2, Indptr: []int64{0, 1, 1}, Indices: []graph.NodeID{7}}
	for name, f := range map[string]func() error{
		"rank":     func() error { _, err := Build(g, b, 2, Options{}); return err },
		"book":     func() error { _, err := Build(g, short, 0, Options{}); return err },
		"invalid":  func() error { _, err := Build(bad, b, 0, Options{}); return err },
		"nil book": func() error { _, err := Build(g, nil, 0, Options{}); return err },
		"all book": func() error { _, err := BuildAll(g, short, Options{}); return err },
		"all bad":  func() error { _, err := BuildAll(bad, b, Options{}); return err },
	} {
		if err := f(); !errors.Is(err, ErrInput) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// BuildAll's patches, built concurrently, are Build's, rank by rank.
func TestBuildAll(t *testing.T) {
	g := testGraph()
	b, _ := book.New([]int64{0, 2, 2, 5, 6}) // an empty range too
	for _, opt := range []Options{{DeviceBytes: NoLimit}, {DeviceBytes: 30}} {
		all, err := BuildAll(g, b, opt)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != b.K() {
			t.Fatalf("%d patches for %d ranks", len(all), b.K())
		}
		for r, p := range all {
			want, err := Build(g, b, r, opt)
			if err != nil {
				t.Fatal(err)
			}
			if p.Rank != r || p.Lo != want.Lo || p.Hi != want.Hi || p.EdgeBase != want.EdgeBase ||
				!slices.Equal(p.Graph.Indptr, want.Graph.Indptr) || !slices.Equal(p.Graph.Indices, want.Graph.Indices) ||
				!slices.Equal(p.place, want.place) || p.DeviceBytes() != want.DeviceBytes() || p.HostBytes() != want.HostBytes() {
				t.Fatalf("budget %d rank %d: BuildAll's patch differs from Build's", opt.DeviceBytes, r)
			}
		}
	}
}

// BuildRanks builds the given ranks' patches (BuildAll's) and no others,
// and refuses a rank outside the book.
func TestBuildRanks(t *testing.T) {
	g := testGraph()
	b, _ := book.New([]int64{0, 2, 2, 5, 6})
	opt := Options{DeviceBytes: NoLimit}
	all, err := BuildAll(g, b, opt)
	if err != nil {
		t.Fatal(err)
	}
	some, err := BuildRanks(g, b, []int{1, 2}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(some) != b.K() {
		t.Fatalf("%d patches for %d ranks", len(some), b.K())
	}
	for r, p := range some {
		if r != 1 && r != 2 {
			if p != nil {
				t.Fatalf("rank %d built", r)
			}
			continue
		}
		if p == nil || p.Rank != r || p.Lo != all[r].Lo || p.Hi != all[r].Hi || !slices.Equal(p.Graph.Indptr, all[r].Graph.Indptr) {
			t.Fatalf("rank %d: BuildRanks's patch differs from BuildAll's", r)
		}
	}
	if _, err := BuildRanks(g, b, []int{4}, opt); !errors.Is(err, ErrInput) {
		t.Fatalf("rank 4 of 4: %v", err)
	}
}
