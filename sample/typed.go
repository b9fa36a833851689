package sample

import (
	"math"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// TypedMachine is what typed neighbor sampling (SampleTyped) needs of a
// device: the two operations worth a kernel, drawing one relation's
// neighbors of a frontier and deduplicating one node type's sources. N is
// the machine's list of node IDs of one type (a host slice, a device
// buffer), E one relation's sampled edges of one hop. The hop loop, the
// streams and the order of relations and types stay in SampleTyped, so
// every machine makes the same batches (the CPU machine behind
// HeteroSampler; gpusample's CUDA machine).
type TypedMachine[N, E any] interface {
	// Len is the number of nodes in a list.
	Len(nodes N) int
	// Draw samples, at hop, the in-neighbors through relation r of the
	// nodes dst (of r's destination type) by NeighborSampler's rules:
	// node v draws from rng.Derive(key, v), at the relation's fanout of
	// that hop. The edges' sources are global IDs until Relabel.
	Draw(r, hop int, dst N, key uint64) (E, error)
	// None is relation r's empty edge set for nd destinations (the
	// relation is left out at this hop, or has no destinations).
	None(r, nd int) (E, error)
	// Relabel returns the sources of node type t at hop: dst (distinct,
	// else ErrDuplicate) followed by the nodes first reached through
	// edges (the relations with source type t, in relation order; edges
	// in order), each once; each edge's source becomes its position in
	// that list.
	Relabel(t, hop int, dst N, edges []E) (N, error)
}

// EmptyDrawer is optional for a TypedMachine: a machine whose DrawsEmpty
// reports true gets Draw, not None, for every relation with a fanout
// other than 0 at the hop, even where its frontier of the relation's
// destination type is empty. A collective machine (dsp/csp's typed
// sampler) needs it: its Draw is an exchange every device takes part
// in, and a peer's frontier may not be empty.
type EmptyDrawer interface{ DrawsEmpty() bool }

// HopDrawer is optional for a TypedMachine: a machine that has it draws
// all of a hop's relations in one call (DrawHop) instead of one Draw per
// relation. A collective machine (dsp/csp's typed sampler) needs it to
// exchange every relation's headers, requests and answers together, so
// that a hop costs the same number of exchanges whatever the number of
// relations. rels lists the relations to draw, in relation order, and
// keys their streams; dst is the frontier, a list per node type. It
// returns one edge set per entry of rels. The relations left out at the
// hop get None before it.
type HopDrawer[N, E any] interface {
	DrawHop(hop int, rels []int, dst []N, keys []uint64) ([]E, error)
}

// TypedHop is one hop of SampleTyped: per node type its sources
// (destinations first; the next hop's frontier) and destination count,
// per relation its relabeled edges.
type TypedHop[N, E any] struct {
	Src    []N
	NumDst []int
	Rels   []E
}

// SampleTyped is typed node-wise sampling written once for every
// machine: per hop (seeds' hop first), every relation whose destination
// type has frontier nodes and whose fanout is not 0 draws from the
// stream rng.Derive(HopKey(key, hop), tagRelation, r); then every node
// type relabels its frontier and new sources. seeds holds a list per
// node type. The hops come back seeds' hop first (the reverse of
// HeteroMiniBatch.Blocks). On error the machine keeps what it made, to
// release as it does.
func SampleTyped[N, E any](m TypedMachine[N, E], rels []Relation, fanouts [][]int, seeds []N, key Key) ([]TypedHop[N, E], error) {
	hops := 0
	if len(fanouts) > 0 {
		hops = len(fanouts[0])
	}
	out := make([]TypedHop[N, E], hops)
	dst := seeds
	for hop := range hops {
		h, err := SampleTypedHop(m, rels, fanouts, dst, hop, key)
		if err != nil {
			return nil, err
		}
		out[hop] = h
		dst = h.Src
	}
	return out, nil
}

// SampleTypedHop is hop hop of SampleTyped from the frontier dst (a list
// per node type).
func SampleTypedHop[N, E any](m TypedMachine[N, E], rels []Relation, fanouts [][]int, dst []N, hop int, key Key) (TypedHop[N, E], error) {
	T := len(dst)
	hk := HopKey(key, hop)
	h := TypedHop[N, E]{NumDst: make([]int, T), Rels: make([]E, len(rels)), Src: make([]N, T)}
	bySrc := make([][]E, T)
	drawsEmpty := false
	if d, ok := m.(EmptyDrawer); ok {
		drawsEmpty = d.DrawsEmpty()
	}
	for t := range T {
		h.NumDst[t] = m.Len(dst[t])
	}
	hd, batched := m.(HopDrawer[N, E])
	var drawn []int // the relations drawn at this hop (HopDrawer)
	var keys []uint64
	for r, rel := range rels {
		nd, k := h.NumDst[rel.Dst], fanouts[r][hop]
		key := rng.Derive(hk, tagRelation, uint64(r))
		var e E
		var err error
		switch {
		case k == 0 || (nd == 0 && !drawsEmpty):
			e, err = m.None(r, nd)
		case batched:
			drawn, keys = append(drawn, r), append(keys, key)
			continue
		default:
			e, err = m.Draw(r, hop, dst[rel.Dst], key)
		}
		if err != nil {
			return TypedHop[N, E]{}, err
		}
		h.Rels[r] = e
	}
	if len(drawn) > 0 {
		es, err := hd.DrawHop(hop, drawn, dst, keys)
		if err != nil {
			return TypedHop[N, E]{}, err
		}
		if len(es) != len(drawn) {
			return TypedHop[N, E]{}, errorf("sample.SampleTyped", "rels", -1, ErrConfig, "hop %d: %d edge sets for %d relations", hop, len(es), len(drawn))
		}
		for i, r := range drawn {
			h.Rels[r] = es[i]
		}
	}
	for r, rel := range rels { // relation order, whichever way they were drawn
		bySrc[rel.Src] = append(bySrc[rel.Src], h.Rels[r])
	}
	for t := range T {
		src, err := m.Relabel(t, hop, dst[t], bySrc[t])
		if err != nil {
			return TypedHop[N, E]{}, err
		}
		h.Src[t] = src
	}
	return h, nil
}

// cpuTyped is the CPU machine: NeighborSampler's draws per relation and a
// dense map per type for relabeling (HeteroSampler's code path).
type cpuTyped struct {
	s  *HeteroSampler
	op string
	rl *heteroRelabeler
}

var _ TypedMachine[[]graph.NodeID, *RelBlock] = (*cpuTyped)(nil)

func (m *cpuTyped) Len(nodes []graph.NodeID) int { return len(nodes) }

func (m *cpuTyped) Draw(r, hop int, dst []graph.NodeID, key uint64) (*RelBlock, error) {
	nb, err := m.s.per[r].sampleHop(m.op, dst, hop, key)
	if err != nil {
		return nil, err
	}
	return &RelBlock{Indptr: nb.Indptr, Indices: nb.Nodes, EdgeIDs: nb.EdgeIDs}, nil
}

func (m *cpuTyped) None(r, nd int) (*RelBlock, error) {
	return &RelBlock{Indptr: make([]int64, nd+1), Indices: []int32{}, EdgeIDs: []int64{}}, nil
}

func (m *cpuTyped) Relabel(t, hop int, dst []graph.NodeID, edges []*RelBlock) ([]graph.NodeID, error) {
	loc := m.rl.local[t]
	src := append(make([]graph.NodeID, 0, len(dst)), dst...)
	defer func() { // leave the map all -1 for the next hop
		for _, v := range src {
			loc[v] = -1
		}
	}()
	for i, v := range dst {
		if j := loc[v]; j >= 0 {
			src = src[:i]
			field := "dst"
			if hop == 0 {
				field = "seeds"
			}
			return nil, errorf(m.op, field, i, ErrDuplicate, "node %d of type %d already at position %d", v, t, j)
		}
		loc[v] = int32(i)
	}
	for _, rb := range edges {
		if int64(len(src))+int64(len(rb.Indices)) > math.MaxInt32 {
			return nil, errorf(m.op, "seeds", -1, ErrTooLarge, "hop %d: node type %d would exceed int32 local IDs", hop, t)
		}
		idx := rb.Indices // relabeled in place
		for e, u := range idx {
			l := loc[u]
			if l < 0 {
				l = int32(len(src))
				loc[u] = l
				src = append(src, u)
			}
			idx[e] = l
		}
	}
	return src, nil
}

// TypedSampler draws typed batches: HeteroSampler on the CPU,
// gpusample.HeteroSampler on a GPU (the same batches for uniform draws).
type TypedSampler interface {
	Sample(seedType int, seeds []graph.NodeID, key Key) (*HeteroMiniBatch, error)
	SampleTypes(seeds [][]graph.NodeID, key Key) (*HeteroMiniBatch, error)
	NumHops() int
}

var _ TypedSampler = (*HeteroSampler)(nil)
