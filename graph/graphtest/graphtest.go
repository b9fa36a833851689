// Package graphtest provides graphs for tests and benchmarks of the graph
// and sample packages: the real cnr-2000 web graph from the shared
// datasets, synthetic power-law graphs shaped like ogbn-products, and
// small skewed random graphs with the awkward cases samplers must handle.
package graphtest

import (
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/internal/testkit"
)

// maxEdgeBytes bounds a decompressed edge file (1.6e9 edges).
const maxEdgeBytes = 12 << 30

// ReadEdges reads a gzip-compressed file of little-endian int32 (src, dst)
// pairs, the shared datasets' edges.bin.gz format.
func ReadEdges(path string) (src, dst []graph.NodeID, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("graphtest: %s: %w", path, err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxEdgeBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("graphtest: %s: %w", path, err)
	}
	if len(raw) > maxEdgeBytes || len(raw)%8 != 0 {
		return nil, nil, fmt.Errorf("graphtest: %s: %d bytes is not a whole number of int32 pairs (or too large)", path, len(raw))
	}
	n := len(raw) / 8
	src, dst = make([]graph.NodeID, n), make([]graph.NodeID, n)
	for i := range n {
		src[i] = graph.NodeID(binary.LittleEndian.Uint32(raw[8*i:]))
		dst[i] = graph.NodeID(binary.LittleEndian.Uint32(raw[8*i+4:]))
	}
	return src, dst, nil
}

var (
	cnrOnce sync.Once
	cnrG    *graph.CSR
	cnrErr  error
)

// CNR2000 returns the cnr-2000 web graph (325,557 nodes, 3,216,152 directed
// edges) as an out-adjacency CSR with sorted rows, loaded once per process.
// It skips tb when the shared datasets are absent and fails it on a
// corrupt file. Callers must not modify the graph.
func CNR2000(tb testing.TB) *graph.CSR {
	tb.Helper()
	dir := filepath.Join(testkit.DatasetsDir(tb), "cnr-2000")
	cnrOnce.Do(func() { cnrG, cnrErr = loadDataset(dir) })
	if cnrErr != nil {
		tb.Fatal(cnrErr)
	}
	return cnrG
}

func loadDataset(dir string) (*graph.CSR, error) {
	meta, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return nil, err
	}
	var m struct {
		NumNodes int64 `json:"num_nodes"`
		NumEdges int64 `json:"num_edges"`
	}
	if err := json.Unmarshal(meta, &m); err != nil {
		return nil, fmt.Errorf("graphtest: %s/meta.json: %w", dir, err)
	}
	src, dst, err := ReadEdges(filepath.Join(dir, "edges.bin.gz"))
	if err != nil {
		return nil, err
	}
	if int64(len(src)) != m.NumEdges {
		return nil, fmt.Errorf("graphtest: %s: %d edges, meta.json says %d", dir, len(src), m.NumEdges)
	}
	return graph.FromEdges(m.NumNodes, src, dst)
}

// PowerLaw returns an n-node graph with about avgDeg entries per row:
// row lengths follow a Pareto law with tail exponent 2.5 (a few rows are
// very long, capped at n/4), and entries favor low node IDs (entry =
// floor(n*u^2) for uniform u), giving hub nodes as in co-purchase graphs.
// Rows are sorted; there are no weights. The graph depends only on (n,
// avgDeg, seed) and is built in parallel.
//
// PowerLaw(2_449_029, 50.5, seed) has the shape of ogbn-products (2.45M
// nodes, ~124M stored edges in both directions).
func PowerLaw(n int64, avgDeg float64, seed uint64) *graph.CSR {
	const alpha = 2.5 // density exponent: mean = xmin * (alpha-1)/(alpha-2)
	xmin := avgDeg * (alpha - 2) / (alpha - 1)
	maxDeg := max(1, float64(n)/4)
	deg := make([]int64, n+1)
	parallelRows(n, func(lo, hi int64) {
		for v := lo; v < hi; v++ {
			st := rng.NewStream(rng.Derive(seed, 0xd0, uint64(v)))
			u := st.OpenFloat64()
			d := math.Min(xmin*math.Pow(u, -1/(alpha-1)), maxDeg)
			deg[v] = int64(d)
		}
	})
	var e int64
	for v := int64(0); v < n; v++ {
		d := deg[v]
		deg[v] = e
		e += d
	}
	deg[n] = e
	g := &graph.CSR{NumRows: n, NumCols: n, Indptr: deg, Indices: make([]graph.NodeID, e)}
	parallelRows(n, func(lo, hi int64) {
		for v := lo; v < hi; v++ {
			st := rng.NewStream(rng.Derive(seed, 0xe0, uint64(v)))
			row := g.Indices[g.Indptr[v]:g.Indptr[v+1]]
			for j := range row {
				u := float64(st.Uint64()>>11) * (1.0 / (1 << 53))
				row[j] = graph.NodeID(float64(n) * u * u)
			}
		}
	})
	if err := graph.SortRows(g); err != nil {
		panic(err) // cannot happen: built valid above
	}
	return g
}

func parallelRows(n int64, fn func(lo, hi int64)) {
	p := int64(runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := int64(0); i < p; i++ {
		lo, hi := n*i/p, n*(i+1)/p
		wg.Go(func() { fn(lo, hi) })
	}
	wg.Wait()
}
