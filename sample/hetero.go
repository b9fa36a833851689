package sample

import (
	"fmt"
	"slices"
	"sync"

	"github.com/strata-gnn/strata/graph"
)

// Relation is one edge type of a typed graph as HeteroSampler reads it:
// In holds its edges grouped by destination, so row v (a node of type
// Dst, In.NumRows of them) lists the nodes of type Src (In.NumCols of
// them) with an edge to v. Node IDs are local to their type. This is
// dataset.EdgeType's layout.
type Relation struct {
	Src, Dst int
	In       *graph.CSR
}

// HeteroConfig configures a HeteroSampler.
type HeteroConfig struct {
	// Fanouts lists, for every relation (in the order of the relations
	// given to NewHeteroSampler), how many in-neighbors of that relation
	// to sample per destination at each hop, seeds' hop first (as PyG's
	// num_neighbors dictionary per edge type). -1 takes every neighbor; 0
	// takes none (the relation is left out at that hop). Every list has
	// one entry per hop.
	Fanouts [][]int
	// Replace and Weighted are NeighborSampler's, for every relation
	// (Weighted needs every relation's weights).
	Replace, Weighted bool
	// Workers is the number of goroutines of one draw; 0 means
	// GOMAXPROCS. It never changes the result.
	Workers int
}

// HeteroSampler is node-wise neighbor sampling on a typed graph with a
// fanout per relation and hop: PyG's NeighborSampler on HeteroData, DGL's
// sample_neighbors with a fanout dictionary.
//
// Each hop starts from the frontier of every node type (hop 0: the seeds,
// of one type). For every relation whose destination type has frontier
// nodes, each of them draws its in-neighbors of that relation by
// NeighborSampler's rules, from the stream rng.Derive(relation's hop key,
// v) where the relation's hop key is rng.Derive(HopKey(key, hop), r): a
// node's draw depends on (seed, epoch, batch, hop, relation, node) only.
// The sources of every type are then the type's frontier followed by the
// nodes first reached through any relation, relations in order, edges in
// order; they are the next hop's frontier.
//
// Why per-relation CSRs: a destination's neighbors through one relation
// are one contiguous row, found in O(1) and drawn with the homogeneous
// sampler's code (Floyd's algorithm, alias tables), so a typed hop costs
// what the same number of homogeneous draws costs; one CSR with an edge
// type per entry would need a search per row and relation to find the
// relation's part. Each relation is handed to a NeighborSampler over a
// square view of it (rows beyond the destination count are empty), so the
// draws are the same code as homogeneous sampling's.
//
// The algorithm is SampleTyped, written once against TypedMachine; a
// HeteroSampler runs it on the CPU machine, and gpusample's typed sampler
// runs it on a GPU with the same draws.
//
// A HeteroSampler is safe for concurrent use; each concurrent Sample
// holds a relabeling map of 4 bytes per node (all types), kept for reuse.
type HeteroSampler struct {
	numNodes []int64
	rels     []Relation
	per      []*NeighborSampler // per relation; nil where every fanout is 0
	fanouts  [][]int
	hops     int

	mu   sync.Mutex
	free []*heteroRelabeler
}

// tagRelation separates the relations' streams within a hop.
const tagRelation = 0x52454c0000 // "REL"

// NewHeteroSampler checks the graph and the configuration: numNodes
// gives every node type's node count, rels the relations (each a valid
// CSR of numNodes[Dst] rows and numNodes[Src] columns), cfg one fanout
// list per relation. The graphs are shared, not copied.
func NewHeteroSampler(numNodes []int64, rels []Relation, cfg HeteroConfig) (*HeteroSampler, error) {
	const op = "NewHeteroSampler"
	if len(numNodes) == 0 {
		return nil, errorf(op, "numNodes", -1, ErrConfig, "no node types")
	}
	var total int64
	for t, n := range numNodes {
		if n < 0 || n > graph.MaxNodes-total {
			return nil, errorf(op, "numNodes", t, ErrConfig, "%d nodes: the types' total must stay in [0, %d]", n, int64(graph.MaxNodes))
		}
		total += n
	}
	if len(cfg.Fanouts) != len(rels) {
		return nil, errorf(op, "Fanouts", -1, ErrConfig, "%d fanout lists for %d relations", len(cfg.Fanouts), len(rels))
	}
	if cfg.Workers < 0 {
		return nil, errorf(op, "Workers", -1, ErrConfig, "%d < 0", cfg.Workers)
	}
	hops := -1
	s := &HeteroSampler{numNodes: slices.Clone(numNodes), rels: slices.Clone(rels), per: make([]*NeighborSampler, len(rels))}
	for r, rel := range rels {
		f := cfg.Fanouts[r]
		if hops < 0 {
			hops = len(f)
		}
		if len(f) == 0 || len(f) != hops {
			return nil, errorf(op, "Fanouts", r, ErrConfig, "%d fanouts for relation %d, want one per hop (%d, at least 1)", len(f), r, max(hops, 1))
		}
		for h, k := range f {
			if k < -1 {
				return nil, errorf(op, "Fanouts", r, ErrConfig, "hop %d: %d: want -1 (all), 0 (none) or > 0", h, k)
			}
		}
		if rel.Src < 0 || rel.Src >= len(numNodes) || rel.Dst < 0 || rel.Dst >= len(numNodes) {
			return nil, errorf(op, "rels", r, ErrConfig, "node types %d -> %d out of range [0, %d)", rel.Src, rel.Dst, len(numNodes))
		}
		g := rel.In
		if g == nil {
			return nil, errorf(op, "rels", r, ErrGraph, "nil graph")
		}
		if err := g.Validate(); err != nil {
			return nil, graphError(op, err)
		}
		if g.NumRows != numNodes[rel.Dst] || g.NumCols != numNodes[rel.Src] {
			return nil, errorf(op, "rels", r, ErrGraph, "graph is %d x %d, want %d x %d (destinations x sources)", g.NumRows, g.NumCols, numNodes[rel.Dst], numNodes[rel.Src])
		}
		if !slices.ContainsFunc(f, func(k int) bool { return k != 0 }) {
			continue
		}
		// NeighborSampler rejects fanout 0; those hops never call it.
		nf := slices.Clone(f)
		for h := range nf {
			if nf[h] == 0 {
				nf[h] = 1
			}
		}
		ns, err := NewNeighborSampler(SquareView(g), Config{Fanouts: nf, Replace: cfg.Replace, Weighted: cfg.Weighted, Workers: cfg.Workers})
		if err != nil {
			if e, ok := err.(*Error); ok {
				e.Op, e.Detail = op, fmt.Sprintf("relation %d: %s", r, e.Detail)
			}
			return nil, err
		}
		s.per[r] = ns
	}
	if hops < 0 {
		return nil, errorf(op, "rels", -1, ErrConfig, "no relations")
	}
	s.hops = hops
	s.fanouts = make([][]int, len(rels))
	for r := range rels {
		s.fanouts[r] = slices.Clone(cfg.Fanouts[r])
	}
	return s, nil
}

// SquareView is g padded to max(rows, cols) rows and columns (extra rows
// empty): a relation between two node types as the node-wise samplers
// (NeighborSampler, gpusample's, dsp/csp's) take it. Indptr is copied
// only when rows must be added.
func SquareView(g *graph.CSR) *graph.CSR {
	n := max(g.NumRows, g.NumCols)
	ip := g.Indptr
	if n > g.NumRows {
		ip = make([]int64, n+1)
		copy(ip, g.Indptr)
		for i := g.NumRows + 1; i <= n; i++ {
			ip[i] = g.Indptr[g.NumRows]
		}
	}
	return &graph.CSR{NumRows: n, NumCols: n, Indptr: ip, Indices: g.Indices, Weights: g.Weights}
}

// NumHops is the number of hops (blocks) per batch.
func (s *HeteroSampler) NumHops() int { return s.hops }

// HeteroBlock is one layer's typed message-flow graph. For every node type
// t, SrcNodes[t] lists the nodes of type t the layer reads (IDs local to
// the type); the first NumDst[t] of them are its destinations of type t,
// in order, so a layer's output rows of type t line up with the next
// block's first sources of type t. Rels[r] holds relation r's sampled
// edges: row i (destination i of the relation's Dst type, i <
// NumDst[Dst]) lists positions in SrcNodes[Src].
type HeteroBlock struct {
	SrcNodes [][]graph.NodeID
	NumDst   []int
	Rels     []RelBlock
}

// RelBlock is one relation's edges in a HeteroBlock, in CSR form.
type RelBlock struct {
	Indptr  []int64 // len NumDst[Dst]+1
	Indices []int32 // positions in SrcNodes[Src]
	EdgeIDs []int64 // the edges' positions in the relation's In.Indices
}

// NumEdges is the number of sampled edges of the relation.
func (r *RelBlock) NumEdges() int { return len(r.Indices) }

// HeteroMiniBatch is a sampled typed batch: Blocks[0] reads the input
// features of Blocks[0].SrcNodes (per type); the last block's
// destinations of type t are Seeds[t].
type HeteroMiniBatch struct {
	Seeds  [][]graph.NodeID
	Blocks []HeteroBlock
}

// heteroRelabeler maps a type's local IDs to positions in the type's
// source list (-1 = not seen), one dense map per type.
type heteroRelabeler struct{ local [][]int32 }

func (s *HeteroSampler) get() *heteroRelabeler {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := len(s.free); k > 0 {
		r := s.free[k-1]
		s.free = s.free[:k-1]
		return r
	}
	r := &heteroRelabeler{local: make([][]int32, len(s.numNodes))}
	for t, n := range s.numNodes {
		r.local[t] = make([]int32, n)
		for i := range r.local[t] {
			r.local[t][i] = -1
		}
	}
	return r
}

func (s *HeteroSampler) put(r *heteroRelabeler) {
	s.mu.Lock()
	s.free = append(s.free, r)
	s.mu.Unlock()
}

// Sample draws the typed neighborhoods of seeds, distinct nodes of type
// seedType, for key. The result depends only on (graph, config,
// seedType, seeds, key), never on Workers.
func (s *HeteroSampler) Sample(seedType int, seeds []graph.NodeID, key Key) (*HeteroMiniBatch, error) {
	const op = "HeteroSampler.Sample"
	if seedType < 0 || seedType >= len(s.numNodes) {
		return nil, errorf(op, "seedType", -1, ErrConfig, "%d not in [0, %d)", seedType, len(s.numNodes))
	}
	typed := make([][]graph.NodeID, len(s.numNodes))
	typed[seedType] = seeds
	return s.sample(op, typed, key)
}

// SampleTypes is Sample with seeds of several types: seeds[t] lists
// distinct nodes of type t (nil for none), e.g. both endpoints of a batch
// of edges of one relation for link prediction, as PyG's
// LinkNeighborLoader seeds them. The last block's destinations of type t
// are seeds[t], in order.
func (s *HeteroSampler) SampleTypes(seeds [][]graph.NodeID, key Key) (*HeteroMiniBatch, error) {
	const op = "HeteroSampler.SampleTypes"
	if len(seeds) != len(s.numNodes) {
		return nil, errorf(op, "seeds", -1, ErrConfig, "%d seed lists for %d node types", len(seeds), len(s.numNodes))
	}
	return s.sample(op, seeds, key)
}

func (s *HeteroSampler) sample(op string, seeds [][]graph.NodeID, key Key) (*HeteroMiniBatch, error) {
	mb := &HeteroMiniBatch{Seeds: make([][]graph.NodeID, len(s.numNodes)), Blocks: make([]HeteroBlock, s.hops)}
	for t, ids := range seeds {
		if err := checkNodes(op, "seeds", ids, s.numNodes[t]); err != nil {
			return nil, err
		}
		mb.Seeds[t] = slices.Clone(ids)
	}
	rl := s.get()
	defer s.put(rl)
	hops, err := SampleTyped(&cpuTyped{s: s, op: op, rl: rl}, s.rels, s.fanouts, mb.Seeds, key)
	if err != nil {
		return nil, err
	}
	for hop, h := range hops {
		mb.Blocks[s.hops-1-hop] = heteroBlock(h)
	}
	return mb, nil
}

// heteroBlock is the CPU machine's hop as a HeteroBlock.
func heteroBlock(h TypedHop[[]graph.NodeID, *RelBlock]) HeteroBlock {
	blk := HeteroBlock{SrcNodes: h.Src, NumDst: h.NumDst, Rels: make([]RelBlock, len(h.Rels))}
	for r, rb := range h.Rels {
		blk.Rels[r] = *rb
	}
	return blk
}

// SampleHop draws one hop of Sample for the typed frontier dst (dst[t]:
// distinct nodes of type t, nil for none) and key: the block that hop of
// Sample would make from that frontier. A node's draws depend only on
// (key, hop, relation, node), so sampling hop k from only the nodes new
// at hop k-1 (PyG's layout, as `strata serve` builds typed batches)
// gives every node the draws Sample gives it.
func (s *HeteroSampler) SampleHop(dst [][]graph.NodeID, hop int, key Key) (HeteroBlock, error) {
	const op = "HeteroSampler.SampleHop"
	if len(dst) != len(s.numNodes) {
		return HeteroBlock{}, errorf(op, "dst", -1, ErrConfig, "%d frontier lists for %d node types", len(dst), len(s.numNodes))
	}
	if hop < 0 || hop >= s.hops {
		return HeteroBlock{}, errorf(op, "hop", -1, ErrConfig, "%d not in [0, %d)", hop, s.hops)
	}
	for t, ids := range dst {
		if err := checkNodes(op, "dst", ids, s.numNodes[t]); err != nil {
			return HeteroBlock{}, err
		}
	}
	rl := s.get()
	defer s.put(rl)
	h, err := SampleTypedHop(&cpuTyped{s: s, op: op, rl: rl}, s.rels, s.fanouts, dst, hop, key)
	if err != nil {
		return HeteroBlock{}, err
	}
	return heteroBlock(h), nil
}

// NumTypes is the number of node types.
func (s *HeteroSampler) NumTypes() int { return len(s.numNodes) }

// Relations returns the sampler's relations (shared, not copied).
func (s *HeteroSampler) Relations() []Relation { return s.rels }

// Fanouts returns relation r's fanouts, one per hop (shared, not copied).
func (s *HeteroSampler) Fanouts(r int) []int { return s.fanouts[r] }
