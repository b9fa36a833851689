package dataset

import "github.com/strata-gnn/strata/graph"

// Dataset is a node-classification dataset held in memory (or memory-mapped).
//
// Graph is the out-adjacency: row u lists the destinations of u's edges
// (for undirected datasets both directions are stored). Message passing
// reads in-neighbors, i.e. Graph's transpose; for symmetric graphs they are
// the same.
type Dataset struct {
	Name       string
	Graph      *graph.CSR
	Directed   bool
	FeatDim    int
	Features   []float32 // NumNodes x FeatDim row-major; nil when absent
	NumClasses int
	Labels     []int32 // len NumNodes, -1 = unlabeled; nil when absent
	Train      []int32 // node IDs, ascending
	Val        []int32
	Test       []int32
}

// NumNodes returns the number of nodes.
func (d *Dataset) NumNodes() int64 { return d.Graph.NumRows }
