package split

import (
	"fmt"
	"math"
	"slices"

	"github.com/strata-gnn/strata/dataset"
)

// relation is one relation of a typed dataset as an edge split sees it:
// its edges u -> v (u of the source type, v of the destination type, IDs
// local to each), distinct and in (src, dst) order.
type relation struct {
	name       string
	nSrc, nDst int64
	sameType   bool
	// directed is false only for a relation within one type whose every
	// edge u -> v has v -> u: then a link is the pair u < v, as on an
	// undirected homogeneous graph (what link.NewSplit calls symmetric).
	directed bool
	keys     []uint64 // u<<32 | v, sorted, distinct
	h        *dataset.Hetero
	rel      int
}

func newRelation(h *dataset.Hetero, rel int) (*relation, error) {
	if h == nil || rel < 0 || rel >= len(h.EdgeTypes) {
		return nil, fmt.Errorf("split: no relation %d", rel)
	}
	et := h.EdgeTypes[rel]
	if et.In == nil {
		return nil, fmt.Errorf("split: relation %s has no edges", h.EdgeTypeName(rel))
	}
	r := &relation{name: h.EdgeTypeName(rel), nSrc: h.NodeTypes[et.Src].NumNodes, nDst: h.NodeTypes[et.Dst].NumNodes,
		sameType: et.Src == et.Dst, h: h, rel: rel}
	if r.nSrc > math.MaxInt32 || r.nDst > math.MaxInt32 || et.In.NumRows != r.nDst || et.In.NumCols != r.nSrc {
		return nil, fmt.Errorf("split: relation %s is %d x %d for %d and %d nodes", r.name, et.In.NumRows, et.In.NumCols, r.nDst, r.nSrc)
	}
	r.keys = make([]uint64, 0, et.In.NumEdges())
	for v := int32(0); int64(v) < et.In.NumRows; v++ {
		for _, u := range et.In.Neighbors(v) {
			r.keys = append(r.keys, uint64(uint32(u))<<32|uint64(uint32(v)))
		}
	}
	slices.Sort(r.keys)
	r.keys = slices.Compact(r.keys)
	r.directed = true
	if r.sameType {
		r.directed = false
		for _, k := range r.keys {
			if _, ok := slices.BinarySearch(r.keys, k<<32|k>>32); !ok {
				r.directed = true
				break
			}
		}
	}
	return r, nil
}

// has reports whether u -> v is an edge of the relation.
func (r *relation) has(u, v int32) bool {
	_, ok := slices.BinarySearch(r.keys, uint64(uint32(u))<<32|uint64(uint32(v)))
	return ok
}

// RelationEdges splits the links of relation rel of h for link prediction
// on that relation ('strata split --link-relation', and link.RunHetero's
// own split): the candidates are the relation's distinct edges u -> v in
// (src, dst) order, IDs local to the source and destination types; within
// one type, self-loops are in no part, and a relation whose every edge has
// its reverse is undirected (each pair once, u < v, Directed false). The
// draw is Edges' (one seeded permutation, test first, cumulative
// rounding), so on a one-type relation it is Edges' split of the
// relation's graph.
func RelationEdges(h *dataset.Hetero, rel int, f Fractions, seed uint64) (*EdgeSplit, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	r, err := newRelation(h, rel)
	if err != nil {
		return nil, err
	}
	var pool []uint64
	for _, k := range r.keys {
		u, v := k>>32, k&0xffffffff
		if r.sameType && (u == v || !r.directed && u > v) {
			continue
		}
		pool = append(pool, k)
	}
	if len(pool) == 0 {
		return nil, fmt.Errorf("split: relation %s has no edge to split (self-loops are never held out)", r.name)
	}
	in := h.EdgeTypes[rel].In
	s := &EdgeSplit{Directed: r.directed, Seed: seed, Fractions: f, NumNodes: r.nSrc, NumDstNodes: r.nDst,
		NumEdges: in.NumEdges(), GraphCRC: GraphCRC(in), Relation: r.name}
	for part, sel := range cutPool(len(pool), f, seed) {
		s.Src[part], s.Dst[part] = make([]int32, len(sel)), make([]int32, len(sel))
		for i, p := range sel {
			s.Src[part][i], s.Dst[part][i] = int32(pool[p]>>32), int32(pool[p]&0xffffffff)
		}
	}
	return s, nil
}
