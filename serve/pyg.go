package serve

import (
	"fmt"
	"math"
	"slices"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
)

// PyGBatch is a sampled batch in PyG's NeighborLoader layout (non-disjoint,
// directional): NodeIDs (n_id) holds the seeds, then the nodes each hop
// adds, each once, in first-seen order; edge e goes from local node
// Src[e] (the sampled neighbor) to Dst[e], hop after hop, and within a
// hop destination after destination in n_id order.
type PyGBatch struct {
	NodeIDs         []graph.NodeID
	Src, Dst        []int32 // edge_index rows 0 and 1
	NumSampledNodes []int64 // [batch size, new at hop 0, new at hop 1, ...]
	NumSampledEdges []int64 // edges per hop
	BatchSize       int
	// LabelSrc and LabelDst: link batches, the endpoints of the batch's
	// positives then negatives as local indices (edge_label_index).
	LabelSrc, LabelDst []int32
}

// Relabeler maps global node IDs to their position in a batch's n_id; it
// holds 4 bytes per graph node and is reused across batches (one per
// goroutine).
type Relabeler struct {
	pos     []int32 // -1 = not in the batch
	touched []graph.NodeID
}

// NewRelabeler returns a Relabeler for a graph of n nodes.
func NewRelabeler(n int64) *Relabeler {
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = -1
	}
	return &Relabeler{pos: pos}
}

func (r *Relabeler) reset() {
	for _, v := range r.touched {
		r.pos[v] = -1
	}
	r.touched = r.touched[:0]
}

// add returns v's local index, appending v to b's nodes if new.
func (r *Relabeler) add(b *PyGBatch, v graph.NodeID) int32 {
	if p := r.pos[v]; p >= 0 {
		return p
	}
	p := int32(len(b.NodeIDs))
	r.pos[v] = p
	r.touched = append(r.touched, v)
	b.NodeIDs = append(b.NodeIDs, v)
	return p
}

func (r *Relabeler) start(seeds []graph.NodeID, numNodes int64, hops int) (*PyGBatch, error) {
	if int64(len(r.pos)) != numNodes {
		return nil, fmt.Errorf("serve: relabeler for %d nodes used on a graph of %d", len(r.pos), numNodes)
	}
	r.reset()
	b := &PyGBatch{BatchSize: len(seeds), NodeIDs: make([]graph.NodeID, 0, 4*len(seeds)),
		NumSampledNodes: make([]int64, 1, hops+1), NumSampledEdges: make([]int64, 0, hops)}
	for i, v := range seeds {
		if v < 0 || int64(v) >= numNodes {
			return nil, reqErr(ErrInvalid, "seeds", i, "node %d not in [0, %d)", v, numNodes)
		}
		if r.pos[v] >= 0 {
			return nil, reqErr(ErrInvalid, "seeds", i, "node %d repeats seed %d", v, r.pos[v])
		}
		r.add(b, v)
	}
	b.NumSampledNodes[0] = int64(len(seeds))
	return b, nil
}

// finishHop records a hop's counts and checks the int32 index space.
func (b *PyGBatch) finishHop(before, edgesBefore int) error {
	if len(b.NodeIDs) > math.MaxInt32 || len(b.Src) > math.MaxInt32 {
		return reqErr(ErrTooLarge, "fanouts", -1, "a batch of more than 2^31-1 nodes or edges")
	}
	b.NumSampledNodes = append(b.NumSampledNodes, int64(len(b.NodeIDs)-before))
	b.NumSampledEdges = append(b.NumSampledEdges, int64(len(b.Src)-edgesBefore))
	return nil
}

// relabelHop appends a hop's edges to b: the neighbors nb of b's nodes
// [lo, hi) (row i-lo of nb for node i), each neighbor relabeled (added to
// n_id if new, in first-seen order). This is the one serial pass over a
// batch's edges, so it is written as one tight loop: the edge rows grown
// once, the relabeler's array and n_id in locals.
func (r *Relabeler) relabelHop(b *PyGBatch, nb *sample.Neighbors, lo, hi int, numNodes int64) error {
	ne := len(nb.Nodes)
	base := len(b.Src)
	b.Src = slices.Grow(b.Src, ne)[:base+ne]
	b.Dst = slices.Grow(b.Dst, ne)[:base+ne]
	src, dst := b.Src[base:], b.Dst[base:]
	pos, nodes, touched := r.pos, b.NodeIDs, r.touched
	// Also on errors: every node whose pos was set must be in touched, or
	// the relabeler's next reset would miss it.
	defer func() { b.NodeIDs, r.touched = nodes, touched }()
	k := 0
	for i := lo; i < hi; i++ {
		a, e := nb.Indptr[i-lo], nb.Indptr[i-lo+1]
		if a != int64(k) || a > e || e > int64(ne) {
			b.Src, b.Dst = b.Src[:base+k], b.Dst[:base+k]
			return fmt.Errorf("sampler row %d spans [%d, %d) of %d neighbors (rows must follow each other)", i-lo, a, e, ne)
		}
		for _, u := range nb.Nodes[a:e] {
			if u < 0 || int64(u) >= numNodes {
				b.Src, b.Dst = b.Src[:base+k], b.Dst[:base+k]
				return fmt.Errorf("sampler returned node %d, not in [0, %d)", u, numNodes)
			}
			p := pos[u]
			if p < 0 {
				p = int32(len(nodes))
				pos[u] = p
				nodes = append(nodes, u)
				touched = append(touched, u)
			}
			src[k], dst[k] = p, int32(i)
			k++
		}
	}
	if k != ne {
		return fmt.Errorf("sampler rows cover %d of %d neighbors", k, ne)
	}
	return nil
}

// SampleFrontier draws the PyG batch of seeds for key with h: hop k
// samples the in-neighbors of the nodes hop k-1 added (the seeds for hop
// 0) through h.SampleHop(frontier, k, key), so every node's draws are
// those of the MiniBatch a block sampler over h makes for the same key.
// Seeds must be distinct and in range.
func SampleFrontier(h sample.HopSampler, r *Relabeler, seeds []graph.NodeID, key sample.Key) (*PyGBatch, error) {
	hops := h.NumHops()
	b, err := r.start(seeds, h.NumNodes(), hops)
	if err != nil {
		return nil, err
	}
	lo := 0
	for hop := range hops {
		hi := len(b.NodeIDs)
		nb, err := h.SampleHop(b.NodeIDs[lo:hi], hop, key)
		if err != nil {
			return nil, err
		}
		if len(nb.Indptr) != hi-lo+1 {
			return nil, fmt.Errorf("serve: hop %d: sampler returned %d rows for %d destinations", hop, len(nb.Indptr)-1, hi-lo)
		}
		edges := len(b.Src)
		if err := r.relabelHop(b, nb, lo, hi, h.NumNodes()); err != nil {
			return nil, fmt.Errorf("serve: hop %d: %w", hop, err)
		}
		if err := b.finishHop(hi, edges); err != nil {
			return nil, err
		}
		lo = hi
	}
	return b, nil
}

// FromMiniBatch derives the PyG batch from a message-flow-graph MiniBatch
// of the same seeds and key (package sample's layout, as any
// sample.Sampler returns, the GPU sampler's included): hop k keeps the
// rows of Blocks[L-1-k] whose destination hop k-1 added, which are the
// draws SampleFrontier would make. numNodes bounds node IDs.
func FromMiniBatch(mb *sample.MiniBatch, r *Relabeler, numNodes int64) (*PyGBatch, error) {
	if mb == nil || len(mb.Blocks) == 0 {
		return nil, fmt.Errorf("serve: empty MiniBatch")
	}
	L := len(mb.Blocks)
	b, err := r.start(mb.Seeds, numNodes, L)
	if err != nil {
		return nil, err
	}
	lo := 0
	var row []int // row of frontier node lo+k in the hop's block
	for hop := range L {
		blk := &mb.Blocks[L-1-hop]
		hi := len(b.NodeIDs)
		if blk.NumDst < 0 || blk.NumDst > len(blk.SrcNodes) || len(blk.Indptr) != blk.NumDst+1 {
			return nil, fmt.Errorf("serve: block %d: malformed (%d destinations, %d sources, %d offsets)", L-1-hop, blk.NumDst, len(blk.SrcNodes), len(blk.Indptr))
		}
		row = row[:0]
		for range hi - lo {
			row = append(row, -1)
		}
		for i, v := range blk.SrcNodes[:blk.NumDst] {
			if v < 0 || int64(v) >= numNodes {
				return nil, fmt.Errorf("serve: block %d: destination %d is node %d, not in [0, %d)", L-1-hop, i, v, numNodes)
			}
			if p := int(r.pos[v]); p >= lo && p < hi && row[p-lo] < 0 {
				row[p-lo] = i
			}
		}
		edges := len(b.Src)
		total := 0
		for k := lo; k < hi; k++ {
			i := row[k-lo]
			if i < 0 {
				return nil, fmt.Errorf("serve: block %d lacks node %d, which hop %d added", L-1-hop, b.NodeIDs[k], hop-1)
			}
			a, e := blk.Indptr[i], blk.Indptr[i+1]
			if a < 0 || a > e || e > int64(len(blk.Indices)) {
				return nil, fmt.Errorf("serve: block %d: row %d spans [%d, %d) of %d edges", L-1-hop, i, a, e, len(blk.Indices))
			}
			total += int(e - a)
		}
		// One tight loop over the hop's edges (see relabelHop).
		b.Src = slices.Grow(b.Src, total)
		b.Dst = slices.Grow(b.Dst, total)
		pos, nodes, touched := r.pos, b.NodeIDs, r.touched
		fail := func(err error) (*PyGBatch, error) {
			r.touched = touched // every node whose pos was set, for the next reset
			return nil, err
		}
		for k := lo; k < hi; k++ {
			i := row[k-lo]
			for _, s := range blk.Indices[blk.Indptr[i]:blk.Indptr[i+1]] {
				if s < 0 || int(s) >= len(blk.SrcNodes) {
					return fail(fmt.Errorf("serve: block %d: source index %d not in [0, %d)", L-1-hop, s, len(blk.SrcNodes)))
				}
				u := blk.SrcNodes[s]
				if u < 0 || int64(u) >= numNodes {
					return fail(fmt.Errorf("serve: block %d: source node %d not in [0, %d)", L-1-hop, u, numNodes))
				}
				p := pos[u]
				if p < 0 {
					p = int32(len(nodes))
					pos[u] = p
					nodes = append(nodes, u)
					touched = append(touched, u)
				}
				b.Src = append(b.Src, p)
				b.Dst = append(b.Dst, int32(k))
			}
		}
		b.NodeIDs, r.touched = nodes, touched
		if err := b.finishHop(hi, edges); err != nil {
			return nil, err
		}
		lo = hi
	}
	return b, nil
}
