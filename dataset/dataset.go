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

	// release unmaps the arrays of a dataset returned by Open (nil when
	// the arrays live on the Go heap).
	release func() error
	// opened holds the manifest fingerprint of a dataset returned by Open
	// (see Fingerprint).
	opened openedFP
}

// Close releases the memory mappings of a dataset returned by Open. After
// Close the dataset's slices must not be used. It is safe to call Close more
// than once and on datasets that were not memory-mapped.
func (d *Dataset) Close() error {
	if d == nil || d.release == nil {
		return nil
	}
	r := d.release
	d.release = nil
	return r()
}

// Mapped reports whether the dataset's arrays are read-only memory
// mappings: writing into them would crash the process, so transformations
// (e.g. RowNormalize) must copy.
func (d *Dataset) Mapped() bool { return d != nil && d.release != nil }

// NumNodes returns the number of nodes.
func (d *Dataset) NumNodes() int64 { return d.Graph.NumRows }
