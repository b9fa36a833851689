package sample

import (
	"math"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// Walks holds one random walk per start node, flattened: walk i is
// Nodes[i*(Length+1) : (i+1)*(Length+1)], starting with its start node.
// A walk that reaches a node with no neighbors stops there and the rest of
// its slots are -1 (as DGL pads).
type Walks struct {
	Length int // steps per walk
	Nodes  []graph.NodeID
}

// Walk returns walk i (shared, not copied).
func (w *Walks) Walk(i int) []graph.NodeID {
	return w.Nodes[i*(w.Length+1) : (i+1)*(w.Length+1)]
}

// Walker draws random walks; RandomWalker is the uniform one. Like
// Sampler, its output depends only on its inputs and the key.
type Walker interface {
	Walk(starts []graph.NodeID, key Key) (*Walks, error)
}

// RandomWalker is a Walker taking uniform steps along the rows of G.
type RandomWalker struct {
	G       *graph.CSR
	Length  int
	Workers int // 0 = GOMAXPROCS
}

// Walk implements Walker.
func (w RandomWalker) Walk(starts []graph.NodeID, key Key) (*Walks, error) {
	return randomWalk(w.G, starts, w.Length, key, w.Workers)
}

// RandomWalk walks length uniform steps from each start: from v the next
// node is a uniformly chosen entry of row v of g (so pass the out-adjacency
// to walk along edges, the in-adjacency to walk against them). Walk i uses
// the stream of (key, i), so repeated starts give independent walks and the
// result does not depend on the number of goroutines. g must be valid and
// square.
func RandomWalk(g *graph.CSR, starts []graph.NodeID, length int, key Key) (*Walks, error) {
	return randomWalk(g, starts, length, key, 0)
}

func randomWalk(g *graph.CSR, starts []graph.NodeID, length int, key Key, workers int) (*Walks, error) {
	const op = "RandomWalk"
	if err := g.Validate(); err != nil {
		return nil, graphError(op, err)
	}
	if g.NumRows != g.NumCols {
		return nil, errorf(op, "graph", -1, ErrGraph, "%d x %d is not square", g.NumRows, g.NumCols)
	}
	if length < 0 {
		return nil, errorf(op, "length", -1, ErrConfig, "%d < 0", length)
	}
	if int64(len(starts))*int64(length+1) > math.MaxInt32 {
		return nil, errorf(op, "starts", -1, ErrTooLarge, "%d walks of %d nodes", len(starts), length+1)
	}
	if workers < 0 {
		return nil, errorf(op, "Workers", -1, ErrConfig, "%d < 0", workers)
	}
	if err := checkNodes(op, "starts", starts, g.NumRows); err != nil {
		return nil, err
	}
	stride := length + 1
	w := &Walks{Length: length, Nodes: make([]graph.NodeID, len(starts)*stride)}
	bk := batchKey(key, tagWalk)
	parallelFor(len(starts), 256, resolveWorkers(workers), func() func(lo, hi int) {
		return func(lo, hi int) {
			for i := lo; i < hi; i++ {
				out := w.Nodes[i*stride : (i+1)*stride]
				st := rng.NewStream(rng.Derive(bk, uint64(i)))
				v := starts[i]
				out[0] = v
				for t := 1; t < stride; t++ {
					a, b := g.Indptr[v], g.Indptr[v+1]
					if a == b {
						for j := t; j < stride; j++ {
							out[j] = -1
						}
						break
					}
					v = g.Indices[a+int64(st.Below(uint64(b-a)))]
					out[t] = v
				}
			}
		}
	})
	return w, nil
}
