package sample

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/graph/graphtest"
)

// smallGraph is the in-adjacency
//
//	0: [1 2]  1: [2]  2: [0 3]  3: []  4: [3 0]
//
// with edge IDs 0..6 in that order.
func smallGraph() *graph.CSR {
	return &graph.CSR{
		NumRows: 5, NumCols: 5,
		Indptr:  []int64{0, 2, 3, 5, 5, 7},
		Indices: []graph.NodeID{1, 2, 2, 0, 3, 3, 0},
		Weights: []float32{1, 2, 3, 4, 5, 6, 7},
	}
}

// randomGraph draws an n-node in-adjacency with skewed degrees (some rows
// empty, some up to 8*avg), repeats allowed, and weights that include
// zeros.
func randomGraph(t testing.TB, seed uint64, n int64, avg int) *graph.CSR {
	t.Helper()
	g := graphtest.Skewed(seed, n, avg, 8)
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	return g
}

// digest hashes a MiniBatch byte for byte.
func digest(mb *MiniBatch) [32]byte {
	h := sha256.New()
	w := func(v any) { _ = binary.Write(h, binary.LittleEndian, v) }
	w(int64(len(mb.Seeds)))
	w(mb.Seeds)
	for _, b := range mb.Blocks {
		w(int64(b.NumDst))
		w(int64(len(b.SrcNodes)))
		w(b.SrcNodes)
		w(int64(len(b.Indptr)))
		w(b.Indptr)
		w(int64(len(b.Indices)))
		w(b.Indices)
		w(int64(len(b.EdgeIDs)))
		w(b.EdgeIDs)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// chiSquare returns sum (obs-exp)^2/exp.
func chiSquare(obs []int, exp []float64) float64 {
	c := 0.0
	for i := range obs {
		d := float64(obs[i]) - exp[i]
		c += d * d / exp[i]
	}
	return c
}

// chiCritical is the 0.999 quantile of chi-square with df degrees of
// freedom (Wilson-Hilferty; within 1% for df >= 2). The tests use fixed
// seeds, so they are deterministic; the threshold only says the fixed
// outcome is not an unlikely one.
func chiCritical(df int) float64 {
	const z = 3.0902 // standard normal 0.999 quantile
	d := float64(df)
	a := 2 / (9 * d)
	return d * math.Pow(1-a+z*math.Sqrt(a), 3)
}
