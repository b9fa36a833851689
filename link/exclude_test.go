package link

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/sample"
)

// excludeTargetsMap is ExcludeTargets as it was written first (a map
// lookup per block edge): the reference the faster one must equal.
func excludeTargetsMap(mb *sample.MiniBatch, pos Edges) int {
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

func sameMiniBatch(t *testing.T, what string, got, want *sample.MiniBatch) {
	t.Helper()
	for l := range want.Blocks {
		g, w := got.Blocks[l], want.Blocks[l]
		if !slices.Equal(g.Indptr, w.Indptr) || !slices.Equal(g.Indices, w.Indices) || !slices.Equal(g.EdgeIDs, w.EdgeIDs) ||
			(g.EdgeIDs == nil) != (w.EdgeIDs == nil) {
			t.Fatalf("%s: block %d differs from the map exclusion: indptr %v / %v, %d / %d edges", what, l,
				g.Indptr[:min(8, len(g.Indptr))], w.Indptr[:min(8, len(w.Indptr))], len(g.Indices), len(w.Indices))
		}
	}
}

// randomPositives draws n pairs of g's nodes: mostly edges of g
// (either direction), some non-edges, repeats and self-pairs.
func randomPositives(st *rng.Stream, g *graph.CSR, n int) Edges {
	var pos Edges
	nodes := uint64(g.NumRows)
	for range n {
		u := int32(st.Below(nodes))
		switch r := st.Below(10); {
		case r == 0:
			pos.add(u, u)
		case r == 1:
			pos.add(u, int32(st.Below(nodes)))
		case r == 2 && pos.Len() > 0:
			j := int(st.Below(uint64(pos.Len())))
			pos.add(pos.Dst[j], pos.Src[j])
		default:
			if nb := g.Neighbors(u); len(nb) > 0 {
				v := nb[st.Below(uint64(len(nb)))]
				if st.Below(2) == 0 {
					u, v = v, u
				}
				pos.add(u, v)
			} else {
				pos.add(u, int32(st.Below(nodes)))
			}
		}
	}
	return pos
}

// TestExcludeTargetsEqualsMap: on random graphs (sparse to dense, with
// hubs and repeated edges), random positives (edges, reversed edges, non-edges, repeats,
// self-pairs; from 1 to more than the nodes) and sampled blocks with
// and without edge IDs, ExcludeTargets removes exactly the edges and
// keeps exactly the order of the map exclusion it replaced, and says
// how many it removed.
func TestExcludeTargetsEqualsMap(t *testing.T) {
	st := rng.NewStream(18)
	removedAny := 0
	for trial := range 40 {
		n := 2 + int(st.Below(300))
		deg := 1 + int(st.Below(uint64(min(n, 40))))
		var src, dst []int32
		for u := range n {
			d := deg
			if st.Below(20) == 0 {
				d = n // a hub
			}
			for range d {
				v := int32(st.Below(uint64(n)))
				src, dst = append(src, int32(u), v), append(dst, v, int32(u))
			}
		}
		g, err := graph.FromEdges(int64(n), src, dst)
		if err != nil {
			t.Fatal(err)
		}
		fan := []int{-1, 5, 3}[:1+st.Below(3)]
		smp, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: fan})
		if err != nil {
			t.Fatal(err)
		}
		pos := randomPositives(&st, g, 1+int(st.Below(uint64(2*n))))
		seeds := slices.Concat(pos.Src, pos.Dst)
		slices.Sort(seeds)
		seeds = slices.Compact(seeds)
		key := sample.Key{Seed: uint64(trial), Batch: trial}
		want, err := smp.Sample(seeds, key)
		if err != nil {
			t.Fatal(err)
		}
		if trial%2 == 1 {
			for l := range want.Blocks {
				want.Blocks[l].EdgeIDs = nil
			}
		}
		orig := cloneMiniBatch(want)
		wr := excludeTargetsMap(want, pos)
		// One goroutine per block, then blocks cut into runs of rows
		// compacted at once (4 goroutines, runs of about 16 edges and up).
		for _, chunk := range []int64{excludeChunk, 16, 100} {
			got := cloneMiniBatch(orig)
			old, oldChunk := runtime.GOMAXPROCS(4), excludeChunk
			excludeChunk = chunk
			r := ExcludeTargets(got, pos)
			excludeChunk = oldChunk
			runtime.GOMAXPROCS(old)
			if r != wr {
				t.Fatalf("trial %d, runs of %d edges: removed %d edges, the map exclusion %d", trial, chunk, r, wr)
			}
			sameMiniBatch(t, fmt.Sprintf("trial %d, runs of %d edges", trial, chunk), got, want)
		}
		removedAny += wr
	}
	if removedAny == 0 {
		t.Fatal("no trial removed an edge: the comparison is empty")
	}
}

// newBatchSearch is NewBatch as it was written first (sorted, compacted
// seeds, then a binary search per endpoint): the reference.
func newBatchSearch(pos, neg Edges) *Batch {
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
		i, _ := slices.BinarySearch(b.Seeds, v)
		return int32(i)
	}
	b.SrcRow, b.DstRow = make([]int32, len(b.Src)), make([]int32, len(b.Dst))
	for i := range b.Src {
		b.SrcRow[i], b.DstRow[i] = row(b.Src[i]), row(b.Dst[i])
	}
	return b
}

// TestNewBatchEqualsSearch: on random positives and negatives (few to
// many nodes, so from every endpoint repeated to none; empty parts; IDs
// up to the int32 maximum) NewBatch equals the search it replaced.
func TestNewBatchEqualsSearch(t *testing.T) {
	st := rng.NewStream(7)
	for trial := range 200 {
		nodes := uint64(1 + st.Below(1<<uint(1+trial%31)))
		draw := func(n int) Edges {
			var e Edges
			for range n {
				e.add(int32(st.Below(nodes)), int32(st.Below(nodes)))
			}
			return e
		}
		pos, neg := draw(int(st.Below(300))), draw(int(st.Below(600)))
		if pos.Len()+neg.Len() == 0 {
			continue
		}
		got, want := NewBatch(pos, neg), newBatchSearch(pos, neg)
		for _, c := range [][2][]int32{{got.Src, want.Src}, {got.Dst, want.Dst}, {got.Labels, want.Labels},
			{got.Seeds, want.Seeds}, {got.SrcRow, want.SrcRow}, {got.DstRow, want.DstRow}} {
			if !slices.Equal(c[0], c[1]) {
				t.Fatalf("trial %d (%d nodes, %d+%d pairs): %v, want %v", trial, nodes, pos.Len(), neg.Len(),
					c[0][:min(10, len(c[0]))], c[1][:min(10, len(c[1]))])
			}
		}
	}
}
