package link

import (
	"runtime"
	"slices"
	"sync"

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
//
// The seeds and the rows come from one sort of the endpoints keyed by
// (node, position): a run of equal nodes is one seed, and each position
// gets its seed's row on the way, without a search per endpoint.
func NewBatch(pos, neg Edges) *Batch {
	n := pos.Len() + neg.Len()
	b := &Batch{
		Src: slices.Concat(pos.Src, neg.Src), Dst: slices.Concat(pos.Dst, neg.Dst),
		Labels: make([]int32, n),
	}
	for i := range pos.Len() {
		b.Labels[i] = 1
	}
	// Key: the node with its sign bit flipped (int32 order as unsigned),
	// then the position: Src[i] is i, Dst[i] is n+i.
	keys := make([]uint64, 2*n)
	for i := range n {
		keys[i] = uint64(uint32(b.Src[i])^1<<31)<<32 | uint64(i)
		keys[n+i] = uint64(uint32(b.Dst[i])^1<<31)<<32 | uint64(n+i)
	}
	slices.Sort(keys)
	rows := make([]int32, 2*n)
	b.SrcRow, b.DstRow = rows[:n:n], rows[n:]
	b.Seeds = make([]int32, 0, 2*n)
	for j, k := range keys {
		if j == 0 || k>>32 != keys[j-1]>>32 {
			b.Seeds = append(b.Seeds, int32(uint32(k>>32)^1<<31))
		}
		rows[uint32(k)] = int32(len(b.Seeds) - 1)
	}
	b.Seeds = slices.Clip(b.Seeds)
	return b
}

// ExcludeTargets removes from every block of mb the sampled edges that
// join the two endpoints of a positive of pos, in either direction (DGL's
// exclude="reverse_id"): the encoder then embeds a training pair without
// seeing the link it is asked to predict, as it embeds the held-out pairs
// at evaluation, whose links are not in the message-passing graph.
// Without it, the decoder can learn to recognize a node among the other's
// sampled neighbors, which no held-out pair shows. It returns the number
// of block edges removed; the edges kept stay in their order.
//
// The cost is one probe of a small hash table per block row (is the
// row's node an endpoint of a positive?) and a look at the partners of
// that endpoint only for the edges of the rows that are: not a map
// lookup per sampled edge, which made it the bound of a link step
// (issue 18). The rows with nothing removed move as whole slices.
func ExcludeTargets(mb *sample.MiniBatch, pos Edges) int {
	if pos.Len() == 0 {
		return 0
	}
	ts := newTargetSet(pos)
	removed := 0
	for b := range mb.Blocks {
		removed += ts.exclude(&mb.Blocks[b])
	}
	return removed
}

// targetSet is the positives of a step as a lookup from a node to its
// partners: pairs holds (node, partner) for both directions of every
// positive, sorted, and an open-addressing table maps each distinct node
// to its run of pairs.
type targetSet struct {
	pairs []uint64 // node<<32 | partner, as uint32s; sorted, distinct
	// The table: slot s holds node[s] (empty when run[s] == 0) whose
	// partners are pairs[start[s] : start[s]+run[s]].
	node       []int32
	start, run []int32
	shift      uint32
}

// TargetKeys are the pairs ExcludeTargets removes for positives pos:
// node<<32 | partner (both as uint32) for both directions of every
// positive, sorted and distinct. A device that removes them where the
// batch was sampled (the DSP engine's GPU batches, engine.TaskTargets)
// looks the pairs up in them.
func TargetKeys(pos Edges) []uint64 {
	keys := make([]uint64, 0, 2*pos.Len())
	for i := range pos.Src {
		u, v := uint64(uint32(pos.Src[i])), uint64(uint32(pos.Dst[i]))
		keys = append(keys, u<<32|v, v<<32|u)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

func newTargetSet(pos Edges) *targetSet {
	ts := &targetSet{pairs: TargetKeys(pos)}
	nodes := 1
	for i := 1; i < len(ts.pairs); i++ {
		if ts.pairs[i]>>32 != ts.pairs[i-1]>>32 {
			nodes++
		}
	}
	size, bits := 4, uint32(2)
	for size < 2*nodes { // load at most 1/2
		size, bits = size*2, bits+1
	}
	ts.shift = 32 - bits
	ts.node, ts.start, ts.run = make([]int32, size), make([]int32, size), make([]int32, size)
	for lo := 0; lo < len(ts.pairs); {
		u := ts.pairs[lo] >> 32
		hi := lo + 1
		for hi < len(ts.pairs) && ts.pairs[hi]>>32 == u {
			hi++
		}
		s := ts.slot(int32(uint32(u)))
		ts.node[s], ts.start[s], ts.run[s] = int32(uint32(u)), int32(lo), int32(hi-lo)
		lo = hi
	}
	return ts
}

// slot is u's slot: its own if u is in the table, else the empty one
// where it would go.
func (ts *targetSet) slot(u int32) uint32 {
	mask := uint32(len(ts.node) - 1)
	s := (uint32(u) * 0x9e3779b1) >> ts.shift
	for ts.run[s] != 0 && ts.node[s] != u {
		s = (s + 1) & mask
	}
	return s
}

// partners are the nodes that u forms a positive with (pairs' low
// halves, ascending), nil if none.
func (ts *targetSet) partners(u int32) []uint64 {
	s := ts.slot(u)
	if ts.run[s] == 0 {
		return nil
	}
	return ts.pairs[ts.start[s] : ts.start[s]+ts.run[s]]
}

// has reports whether v is among ps, a node's partners.
func has(ps []uint64, v int32) bool {
	if len(ps) <= 8 {
		for _, p := range ps {
			if int32(uint32(p)) == v {
				return true
			}
		}
		return false
	}
	key := ps[0]&^0xffffffff | uint64(uint32(v))
	_, ok := slices.BinarySearch(ps, key)
	return ok
}

// excludeChunk is the number of block edges below which a block is
// compacted on one goroutine (a variable for the tests).
var excludeChunk int64 = 1 << 15

// exclude removes blk's edges that join a pair of ts and returns how
// many. A large block is cut into runs of rows of about excludeChunk
// edges each, compacted in place at once (each within its own edges),
// then moved down in order: the kept edges and their order are those
// of one pass, whatever the number of goroutines.
func (ts *targetSet) exclude(blk *sample.Block) int {
	n := blk.NumDst
	parts := min(runtime.GOMAXPROCS(0), int(blk.Indptr[n]/excludeChunk))
	if parts <= 1 {
		kept, removed := ts.compact(blk, 0, n, 0, blk.Indptr[n])
		blk.Indptr[n] = kept
		ts.trim(blk, kept)
		return removed
	}
	// Row bounds of the runs, by edges; the edge bounds are read before
	// any run overwrites its first row's Indptr.
	rows := make([]int, parts+1)
	edges := make([]int64, parts+1)
	rows[parts], edges[parts] = n, blk.Indptr[n]
	for p := 1; p < parts; p++ {
		target := blk.Indptr[n] * int64(p) / int64(parts)
		r, _ := slices.BinarySearch(blk.Indptr[:n+1], target)
		rows[p] = max(r, rows[p-1])
		edges[p] = blk.Indptr[rows[p]]
	}
	kept, removed := make([]int64, parts), make([]int, parts)
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() {
			end, rm := ts.compact(blk, rows[p], rows[p+1], edges[p], edges[p+1])
			kept[p], removed[p] = end-edges[p], rm
		})
	}
	wg.Wait()
	w, total := int64(0), 0
	for p := range parts {
		if shift := edges[p] - w; shift != 0 {
			copy(blk.Indices[w:], blk.Indices[edges[p]:edges[p]+kept[p]])
			if blk.EdgeIDs != nil {
				copy(blk.EdgeIDs[w:], blk.EdgeIDs[edges[p]:edges[p]+kept[p]])
			}
			for i := rows[p]; i < rows[p+1]; i++ {
				blk.Indptr[i] -= shift
			}
		}
		w += kept[p]
		total += removed[p]
	}
	blk.Indptr[n] = w
	ts.trim(blk, w)
	return total
}

// compact removes the edges of ts from blk's rows [r0, r1), whose edges
// are [start, end) (Indptr[r0] and Indptr[r1], read before the runs
// start: an empty run's Indptr[r0] is the next run's, which that run
// rewrites), keeping the others in order from start on. It sets
// Indptr[r0:r1] and returns the end of the kept edges and the number
// removed.
func (ts *targetSet) compact(blk *sample.Block, r0, r1 int, start, end int64) (int64, int) {
	removed := 0
	w := start
	for i := r0; i < r1; i++ {
		lo, hi := blk.Indptr[i], end
		if i+1 < r1 {
			hi = blk.Indptr[i+1]
		}
		blk.Indptr[i] = w
		ps := ts.partners(blk.SrcNodes[i])
		if ps == nil {
			if w != lo {
				copy(blk.Indices[w:], blk.Indices[lo:hi])
				if blk.EdgeIDs != nil {
					copy(blk.EdgeIDs[w:], blk.EdgeIDs[lo:hi])
				}
			}
			w += hi - lo
			continue
		}
		for e := lo; e < hi; e++ {
			if has(ps, blk.SrcNodes[blk.Indices[e]]) {
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
	return w, removed
}

// trim cuts blk's edge arrays to the first w edges.
func (ts *targetSet) trim(blk *sample.Block, w int64) {
	blk.Indices = blk.Indices[:w]
	if blk.EdgeIDs != nil {
		blk.EdgeIDs = blk.EdgeIDs[:w]
	}
}
