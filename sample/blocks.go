package sample

import (
	"math"
	"slices"
	"sync"

	"github.com/strata-gnn/strata/graph"
)

// Neighbors is one hop's draw before relabeling: the sampled in-neighbors
// of destination i are Nodes[Indptr[i]:Indptr[i+1]] (global IDs), reached
// by the graph edges EdgeIDs (same positions).
type Neighbors struct {
	Indptr  []int64
	Nodes   []graph.NodeID
	EdgeIDs []int64
}

// HopSampler draws one hop of a node-wise sample. NeighborSampler is one;
// a distributed sampler can be another (route dst to owners, sample there,
// gather the answers) and get MiniBatch assembly from NewBlockSampler.
type HopSampler interface {
	// NumNodes bounds node IDs: they lie in [0, NumNodes).
	NumNodes() int64
	// NumHops is the number of hops (blocks) per batch.
	NumHops() int
	// SampleHop draws the in-neighbors of dst at hop (0 = the seeds' hop).
	// The caller owns the result (the block builder reuses its arrays).
	SampleHop(dst []graph.NodeID, hop int, key Key) (*Neighbors, error)
}

// NewBlockSampler turns a HopSampler into a Sampler: hop 0 samples the
// seeds, each later hop samples all source nodes of the previous one, and
// every hop is relabeled into a Block (destinations first, then new
// sources in first-seen order). Safe for concurrent use if h is.
func NewBlockSampler(h HopSampler) Sampler { return newBlockBuilder(h, false) }

type blockBuilder struct {
	h HopSampler
	// trusted: h is our own NeighborSampler, whose neighbor IDs come from a
	// validated graph, so the per-edge range check can be skipped.
	trusted bool
	// free holds idle relabelers (dense maps of NumNodes entries). A plain
	// free list, not a sync.Pool: a pool is emptied by every GC, and
	// rebuilding a map costs O(NumNodes), more than a batch.
	mu   sync.Mutex
	free []*relabeler
}

func newBlockBuilder(h HopSampler, trusted bool) *blockBuilder {
	return &blockBuilder{h: h, trusted: trusted}
}

func (b *blockBuilder) get() *relabeler {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k := len(b.free); k > 0 {
		r := b.free[k-1]
		b.free = b.free[:k-1]
		return r
	}
	r := &relabeler{local: make([]int32, b.h.NumNodes())}
	for i := range r.local {
		r.local[i] = -1
	}
	return r
}

func (b *blockBuilder) put(r *relabeler) {
	b.mu.Lock()
	b.free = append(b.free, r)
	b.mu.Unlock()
}

func (b *blockBuilder) Sample(seeds []graph.NodeID, key Key) (*MiniBatch, error) {
	return b.sample("BlockSampler.Sample", seeds, key)
}

func (b *blockBuilder) sample(op string, seeds []graph.NodeID, key Key) (*MiniBatch, error) {
	if err := checkNodes(op, "seeds", seeds, b.h.NumNodes()); err != nil {
		return nil, err
	}
	hops := b.h.NumHops()
	mb := &MiniBatch{Seeds: slices.Clone(seeds), Blocks: make([]Block, hops)}
	r := b.get()
	defer b.put(r)
	dst := mb.Seeds
	for hop := 0; hop < hops; hop++ {
		nb, err := b.h.SampleHop(dst, hop, key)
		if err != nil {
			return nil, err
		}
		blk, err := r.toBlock(op, dst, nb, b.trusted)
		if err != nil {
			if e, ok := err.(*Error); ok && hop == 0 && e.Field == "dst" {
				e.Field = "seeds"
			}
			return nil, err
		}
		mb.Blocks[hops-1-hop] = blk
		dst = blk.SrcNodes
	}
	return mb, nil
}

// relabeler maps global IDs to local ones with a dense array (-1 = not
// seen); only touched entries are reset after each block. src is scratch
// for the source list, copied out at its final size.
type relabeler struct {
	local []int32
	src   []graph.NodeID
}

// toBlock relabels nb into a Block over dst, reusing nb's arrays.
func (r *relabeler) toBlock(op string, dst []graph.NodeID, nb *Neighbors, trusted bool) (Block, error) {
	if err := checkNeighbors(op, dst, nb, int64(len(r.local)), !trusted); err != nil {
		return Block{}, err
	}
	if need := len(dst) + len(nb.Nodes); cap(r.src) < need {
		r.src = make([]graph.NodeID, 0, need)
	}
	src := append(r.src[:0], dst...)
	for i, v := range dst {
		if j := r.local[v]; j >= 0 {
			for _, u := range dst[:i] {
				r.local[u] = -1
			}
			return Block{}, errorf(op, "dst", i, ErrDuplicate, "node %d already at position %d", v, j)
		}
		r.local[v] = int32(i)
	}
	idx := nb.Nodes // relabeled in place
	for e, u := range idx {
		l := r.local[u]
		if l < 0 {
			l = int32(len(src))
			r.local[u] = l
			src = append(src, u)
		}
		idx[e] = l
	}
	for _, u := range src {
		r.local[u] = -1
	}
	r.src = src[:0]
	return Block{SrcNodes: slices.Clone(src), NumDst: len(dst), Indptr: nb.Indptr, Indices: idx, EdgeIDs: nb.EdgeIDs}, nil
}

// ToBlock relabels one hop's draw into a Block: SrcNodes = dst (distinct)
// followed by the other sampled nodes in first-seen order, Indices = local
// positions in SrcNodes. It uses a hash map, so it needs no node count;
// samplers use a faster dense map with identical output. nb's arrays are
// reused (Nodes becomes Indices).
func ToBlock(dst []graph.NodeID, nb *Neighbors) (Block, error) {
	const op = "ToBlock"
	if err := checkNeighbors(op, dst, nb, math.MaxInt32, true); err != nil {
		return Block{}, err
	}
	local := make(map[graph.NodeID]int32, len(dst)+len(nb.Nodes)/4)
	src := slices.Clone(dst)
	for i, v := range dst {
		if j, dup := local[v]; dup {
			return Block{}, errorf(op, "dst", i, ErrDuplicate, "node %d already at position %d", v, j)
		}
		local[v] = int32(i)
	}
	idx := nb.Nodes
	for e, u := range idx {
		l, ok := local[u]
		if !ok {
			l = int32(len(src))
			local[u] = l
			src = append(src, u)
		}
		idx[e] = l
	}
	return Block{SrcNodes: src, NumDst: len(dst), Indptr: nb.Indptr, Indices: idx, EdgeIDs: nb.EdgeIDs}, nil
}

// checkNeighbors validates nb's shape against dst and, when checkIDs is
// set, every neighbor ID against n (dst IDs are always checked).
func checkNeighbors(op string, dst []graph.NodeID, nb *Neighbors, n int64, checkIDs bool) error {
	if nb == nil {
		return errorf(op, "neighbors", -1, ErrConfig, "nil")
	}
	if len(nb.Indptr) != len(dst)+1 || nb.Indptr[0] != 0 || nb.Indptr[len(dst)] != int64(len(nb.Nodes)) {
		return errorf(op, "neighbors.Indptr", -1, ErrConfig, "length %d for %d destinations and %d nodes", len(nb.Indptr), len(dst), len(nb.Nodes))
	}
	for i := range dst {
		if nb.Indptr[i+1] < nb.Indptr[i] {
			return errorf(op, "neighbors.Indptr", i+1, ErrConfig, "decreasing")
		}
	}
	if nb.EdgeIDs != nil && len(nb.EdgeIDs) != len(nb.Nodes) {
		return errorf(op, "neighbors.EdgeIDs", -1, ErrConfig, "length %d, want %d", len(nb.EdgeIDs), len(nb.Nodes))
	}
	if int64(len(dst))+int64(len(nb.Nodes)) > math.MaxInt32 {
		return errorf(op, "neighbors", -1, ErrTooLarge, "%d destinations + %d edges exceed int32 local IDs", len(dst), len(nb.Nodes))
	}
	if err := checkNodes(op, "dst", dst, n); err != nil {
		return err
	}
	if !checkIDs {
		return nil
	}
	return checkNodes(op, "neighbors.Nodes", nb.Nodes, n)
}
