package graph

// NodeID identifies a node. int32 keeps index arrays half the size of int64 on
// host and device; offsets into edge arrays are int64.
type NodeID = int32

// CSR is a graph in compressed sparse row form: the neighbors of row v are
// Indices[Indptr[v]:Indptr[v+1]]. For a graph stored "by destination" (CSC of
// the edge list), row v lists the sources of v's incoming edges, which is
// what message passing and neighbor sampling read.
//
// Weights, when not nil, has one entry per edge, aligned with Indices.
type CSR struct {
	NumRows int64    // number of rows (nodes whose adjacency is listed)
	NumCols int64    // number of columns (valid range of Indices)
	Indptr  []int64  // len NumRows+1, Indptr[0] == 0, non-decreasing
	Indices []NodeID // len Indptr[NumRows]
	Weights []float32
}

// NumEdges returns the number of stored edges.
func (g *CSR) NumEdges() int64 { return int64(len(g.Indices)) }

// Degree returns the number of entries in row v.
func (g *CSR) Degree(v NodeID) int64 { return g.Indptr[v+1] - g.Indptr[v] }

// Neighbors returns row v's entries (shared, not copied).
func (g *CSR) Neighbors(v NodeID) []NodeID { return g.Indices[g.Indptr[v]:g.Indptr[v+1]] }
