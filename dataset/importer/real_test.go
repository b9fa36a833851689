package importer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/internal/testkit"
)

// TestBuildCSRMatchesNaive compares buildCSR with a map-based reference on
// a random multigraph, at 1 and 2 workers.
func TestBuildCSRMatchesNaive(t *testing.T) {
	const n, e = 500, 20000
	src, dst := make([]int32, e), make([]int32, e)
	x := uint64(7)
	for i := range src {
		x = x*6364136223846793005 + 1442695040888963407
		src[i] = int32(x>>33) % n
		x = x*6364136223846793005 + 1442695040888963407
		dst[i] = int32(x>>33) % n
	}
	for _, sym := range []bool{false, true} {
		want := make([][]int32, n)
		seen := map[[2]int32]bool{}
		add := func(u, v int32) {
			if !seen[[2]int32{u, v}] {
				seen[[2]int32{u, v}] = true
				want[u] = append(want[u], v)
			}
		}
		for i := range src {
			add(src[i], dst[i])
			if sym {
				add(dst[i], src[i])
			}
		}
		for _, procs := range []int{1, 2} {
			old := runtime.GOMAXPROCS(procs)
			g := buildCSR(n, src, dst, sym)
			runtime.GOMAXPROCS(old)
			for v := range want {
				row := slices.Clone(want[v])
				slices.Sort(row)
				if got := g.Indices[g.Indptr[v]:g.Indptr[v+1]]; !slices.Equal(got, row) {
					t.Fatalf("sym=%v procs=%d row %d: got %v want %v", sym, procs, v, got, row)
				}
			}
			if g.Indptr[n] != int64(len(seen)) {
				t.Fatalf("edge count %d want %d", g.Indptr[n], len(seen))
			}
		}
	}
}

// TestRealShared imports the shared datasets and checks them against
// their meta.json.
func TestRealShared(t *testing.T) {
	root := testkit.DatasetsDir(t)
	names := []string{"cora", "pubmed-structure", "texas"}
	if !testing.Short() {
		names = append(names, "citeseer", "actor", "cnr-2000")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			if _, err := os.Stat(dir); err != nil {
				t.Skip(err)
			}
			var meta struct {
				NumNodes, NumEdges, FeatDim, NumClasses int64
				Directed                                bool
				Validation                              map[string]struct{ Got int64 }
				FeatureNNZ                              int64 `json:"feature_nnz"`
			}
			b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &meta); err != nil {
				t.Fatal(err)
			}
			// encoding/json matches num_nodes to NumNodes case-insensitively
			// only without underscores, so read those fields explicitly.
			var counts struct {
				N int64 `json:"num_nodes"`
				E int64 `json:"num_edges"`
				F int64 `json:"feat_dim"`
				C int64 `json:"num_classes"`
			}
			json.Unmarshal(b, &counts)
			d, err := LoadShared(dir, Options{Quiet: true})
			if err != nil {
				t.Fatal(err)
			}
			if d.NumNodes() != counts.N || d.Graph.NumEdges() != counts.E || int64(d.FeatDim) != counts.F ||
				int64(d.NumClasses) != counts.C || d.Directed != meta.Directed {
				t.Fatalf("got n=%d e=%d f=%d c=%d directed=%v; meta %+v directed=%v",
					d.NumNodes(), d.Graph.NumEdges(), d.FeatDim, d.NumClasses, d.Directed, counts, meta.Directed)
			}
			for split, got := range map[string]int{"train": len(d.Train), "val": len(d.Val), "test": len(d.Test)} {
				if v, ok := meta.Validation[split]; ok && int64(got) != v.Got {
					t.Errorf("%s: %d ids, meta.json says %d", split, got, v.Got)
				}
			}
			if meta.FeatureNNZ > 0 {
				nnz := int64(0)
				for _, v := range d.Features {
					if v != 0 {
						nnz++
					}
				}
				if nnz != meta.FeatureNNZ {
					t.Errorf("feature nnz %d, meta.json says %d", nnz, meta.FeatureNNZ)
				}
			}
		})
	}
}

func TestRealGeomSplits(t *testing.T) {
	dir := testkit.Dataset(t, "texas")
	d0, err := LoadShared(dir, Options{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	s0, err := LoadShared(dir, Options{Quiet: true, Split: 0})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d0.Train, s0.Train) {
		t.Fatal("split 0 differs from the default")
	}
	d7, err := LoadShared(dir, Options{Quiet: true, Split: 7})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(d0.Train, d7.Train) {
		t.Fatal("split 7 equals split 0")
	}
	// Splits are disjoint.
	in := map[int32]string{}
	for name, ids := range map[string][]int32{"train": d7.Train, "val": d7.Val, "test": d7.Test} {
		for _, v := range ids {
			if prev, ok := in[v]; ok {
				t.Fatalf("node %d in %s and %s", v, prev, name)
			}
			in[v] = name
		}
	}
	sym, err := LoadShared(dir, Options{Quiet: true, Symmetrize: true})
	if err != nil {
		t.Fatal(err)
	}
	if sym.Directed || sym.Graph.NumEdges() <= d0.Graph.NumEdges() {
		t.Fatalf("symmetrized: directed=%v edges %d vs %d", sym.Directed, sym.Graph.NumEdges(), d0.Graph.NumEdges())
	}
}
