package sample

import (
	"math"
	"slices"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// NegativeSampler draws negative examples for link prediction: for each
// positive edge (src[i], dst[i]) it returns K corrupted destinations,
// out[i*K:(i+1)*K], each paired with src[i]. Like Sampler, the output
// depends only on the inputs and the key.
type NegativeSampler interface {
	Negatives(src, dst []graph.NodeID, key Key) ([]graph.NodeID, error)
}

// NegativeConfig configures a UniformNegativeSampler.
type NegativeConfig struct {
	K int // negatives per positive edge, > 0
	// ExcludeEdges redraws a destination d while (src, d) is an edge of the
	// graph (so also d == dst for a positive edge of the graph), at most
	// Trials draws per negative; if all are edges the last draw is kept
	// (GLT's RandomNegativeSampler keeps padding the same way). Needs
	// sorted rows (graph.SortRows).
	ExcludeEdges bool
	Trials       int // draws per negative with ExcludeEdges; 0 means 5
	Workers      int // 0 = GOMAXPROCS
}

// UniformNegativeSampler corrupts destinations uniformly over all nodes.
// Its graph is the out-adjacency: row u lists the destinations of u's edges.
type UniformNegativeSampler struct {
	g   *graph.CSR
	cfg NegativeConfig
}

// NewUniformNegativeSampler checks g (valid, square; rows sorted when
// ExcludeEdges) and cfg.
func NewUniformNegativeSampler(g *graph.CSR, cfg NegativeConfig) (*UniformNegativeSampler, error) {
	const op = "NewUniformNegativeSampler"
	if err := g.Validate(); err != nil {
		return nil, graphError(op, err)
	}
	if g.NumRows != g.NumCols || g.NumRows == 0 {
		return nil, errorf(op, "graph", -1, ErrGraph, "%d x %d: want square and non-empty", g.NumRows, g.NumCols)
	}
	if cfg.K <= 0 {
		return nil, errorf(op, "K", -1, ErrConfig, "%d: want > 0", cfg.K)
	}
	if cfg.Trials < 0 || cfg.Workers < 0 {
		return nil, errorf(op, "Trials", -1, ErrConfig, "Trials %d, Workers %d: want >= 0", cfg.Trials, cfg.Workers)
	}
	if cfg.Trials == 0 {
		cfg.Trials = 5
	}
	if cfg.ExcludeEdges {
		if sorted, _ := graph.RowsSorted(g); !sorted {
			return nil, errorf(op, "graph", -1, ErrGraph, "ExcludeEdges needs sorted rows (graph.SortRows)")
		}
	}
	return &UniformNegativeSampler{g: g, cfg: cfg}, nil
}

// Negatives implements NegativeSampler. The draws for positive i use the
// stream of (key, i).
func (s *UniformNegativeSampler) Negatives(src, dst []graph.NodeID, key Key) ([]graph.NodeID, error) {
	n := uint64(s.g.NumRows)
	return drawNegatives("UniformNegativeSampler.Negatives", s.g, s.cfg, src, dst, batchKey(key, tagNegative),
		func(st *rng.Stream) graph.NodeID { return graph.NodeID(st.Below(n)) })
}

// drawNegatives is the negative samplers' Negatives: cfg.K draws per
// positive i from the stream of (bk, i), each redrawn up to cfg.Trials
// times while it is an out-neighbor of src[i] (cfg.ExcludeEdges). The
// samplers differ only in draw.
func drawNegatives(op string, g *graph.CSR, cfg NegativeConfig, src, dst []graph.NodeID, bk uint64, draw func(*rng.Stream) graph.NodeID) ([]graph.NodeID, error) {
	if len(src) != len(dst) {
		return nil, errorf(op, "dst", -1, ErrConfig, "length %d, but len(src) = %d", len(dst), len(src))
	}
	if int64(len(src))*int64(cfg.K) > math.MaxInt32 {
		return nil, errorf(op, "src", -1, ErrTooLarge, "%d edges x %d negatives", len(src), cfg.K)
	}
	n := g.NumRows
	if err := checkNodes(op, "src", src, n); err != nil {
		return nil, err
	}
	if err := checkNodes(op, "dst", dst, n); err != nil {
		return nil, err
	}
	k := cfg.K
	out := make([]graph.NodeID, len(src)*k)
	parallelFor(len(src), 256, resolveWorkers(cfg.Workers), func() func(lo, hi int) {
		return func(lo, hi int) {
			for i := lo; i < hi; i++ {
				st := rng.NewStream(rng.Derive(bk, uint64(i)))
				row := g.Indices[g.Indptr[src[i]]:g.Indptr[src[i]+1]]
				for j := range k {
					d := draw(&st)
					if cfg.ExcludeEdges {
						for t := 1; t < cfg.Trials; t++ {
							if _, isEdge := slices.BinarySearch(row, d); !isEdge {
								break
							}
							d = draw(&st)
						}
					}
					out[i*k+j] = d
				}
			}
		}
	})
	return out, nil
}
