package link

import (
	"slices"
	"sort"

	"github.com/strata-gnn/strata/sample"
)

// Batch is one training step's edges as an edge-seeded sampler sees
// them (PyG's LinkNeighborLoader): the positive edges, then their
// negatives, each with its label, and the seeds, the distinct endpoints
// of all of them, whose neighborhoods the encoder embeds. The seeds are
// all a sampler needs: a multi-device sampler routes them as it routes
// node seeds, and the step is the same.
type Batch struct {
	Src, Dst []int32 // positives first, then negatives (global node IDs)
	Labels   []int32 // 1 for a positive, 0 for a negative
	Seeds    []int32 // the distinct endpoints, ascending
	// SrcRow and DstRow are the positions of Src and Dst in Seeds: the
	// rows of the embeddings of the seeds.
	SrcRow, DstRow []int32
}

// NewBatch makes the batch of positives pos and negatives neg.
func NewBatch(pos, neg Edges) *Batch {
	b := &Batch{
		Src: slices.Concat(pos.Src, neg.Src), Dst: slices.Concat(pos.Dst, neg.Dst),
		Labels: make([]int32, pos.Len()+neg.Len()),
	}
	for i := range pos.Len() {
		b.Labels[i] = 1
	}
	b.Seeds = slices.Concat(b.Src, b.Dst)
	slices.Sort(b.Seeds)
	b.Seeds = slices.Compact(b.Seeds)
	row := func(v int32) int32 {
		return int32(sort.Search(len(b.Seeds), func(i int) bool { return b.Seeds[i] >= v }))
	}
	b.SrcRow, b.DstRow = make([]int32, len(b.Src)), make([]int32, len(b.Dst))
	for i := range b.Src {
		b.SrcRow[i], b.DstRow[i] = row(b.Src[i]), row(b.Dst[i])
	}
	return b
}

// ExcludeTargets removes from every block of mb the sampled edges that
// join the two endpoints of a positive of pos, in either direction (DGL's
// exclude="reverse_id"): the encoder then embeds a training pair without
// seeing the link it is asked to predict, as it embeds the held-out pairs
// at evaluation, whose links are not in the message-passing graph.
// Without it, the decoder can learn to recognize a node among the other's
// sampled neighbors, which no held-out pair shows. It returns the number
// of block edges removed.
func ExcludeTargets(mb *sample.MiniBatch, pos Edges) int {
	if pos.Len() == 0 {
		return 0
	}
	key := func(u, v int32) uint64 {
		if u > v {
			u, v = v, u
		}
		return uint64(uint32(u))<<32 | uint64(uint32(v))
	}
	targets := make(map[uint64]struct{}, pos.Len())
	for i := range pos.Src {
		targets[key(pos.Src[i], pos.Dst[i])] = struct{}{}
	}
	removed := 0
	for b := range mb.Blocks {
		blk := &mb.Blocks[b]
		w := int64(0)
		for i := range blk.NumDst {
			lo, hi := blk.Indptr[i], blk.Indptr[i+1]
			blk.Indptr[i] = w
			for e := lo; e < hi; e++ {
				if _, hit := targets[key(blk.SrcNodes[i], blk.SrcNodes[blk.Indices[e]])]; hit {
					removed++
					continue
				}
				blk.Indices[w] = blk.Indices[e]
				if blk.EdgeIDs != nil {
					blk.EdgeIDs[w] = blk.EdgeIDs[e]
				}
				w++
			}
		}
		blk.Indptr[blk.NumDst] = w
		blk.Indices = blk.Indices[:w]
		if blk.EdgeIDs != nil {
			blk.EdgeIDs = blk.EdgeIDs[:w]
		}
	}
	return removed
}
