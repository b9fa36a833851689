package infer

import (
	"fmt"
	"math"
	"sync"

	"github.com/strata-gnn/strata/graph"
)

// scratch maps global node IDs to a chunk's local source IDs without
// clearing anything between chunks: slot[v]>>32 == cur marks v as a
// source of the current chunk, and its low 32 bits hold v's local ID
// (or, while a parallel build runs, the position of v's first edge).
// One word a node, so a lookup is one random access.
type scratch struct {
	slot  []uint64
	cur   uint64
	unmap func() // frees slot when hostWords mapped it
}

func newScratch(n int) *scratch {
	s := &scratch{}
	s.slot, s.unmap = hostWords(n)
	return s
}

func (s *scratch) next() {
	s.cur++
	if s.cur >= 1<<32 { // wrapped: start the stamps afresh
		clear(s.slot)
		s.cur = 1
	}
}

// hostChunk is a chunk's block built on the host: the in-edges of its
// destinations (CSR, local source IDs, the destinations first among the
// sources) and the source list (global IDs); deg, for GCN, the sources'
// whole-graph degrees.
type hostChunk struct {
	src     []int32
	indptr  []int64
	indices []int32
	deg     []int64
}

// minPartEdges is the fewest edges a goroutine of a parallel build
// takes: below it the goroutines cost more than they save.
var minPartEdges = 1 << 15

// minParallel is the fewest goroutines a parallel build runs on: each
// goroutine reads every edge of the chunk (to find the sources it owns)
// and two more passes follow, so it pays only with a few cores free.
var minParallel = 4

// maxParts caps a parallel build's goroutines: each reads all the
// chunk's edges, so past a few the reading outgrows the lookups saved.
var maxParts = 8

// buildChunk builds the block of dst's in-edges in in with up to
// workers goroutines. The sources are dst, then every other node in the
// order of its first edge (the in-adjacency's order): the same bytes
// whatever workers is.
func buildChunk(in *graph.CSR, s *scratch, dst []int32, gcnDeg []int64, workers int) (*hostChunk, error) {
	s.next()
	cur := s.cur << 32
	nd := len(dst)
	indptr := make([]int64, nd+1)
	for i, v := range dst {
		indptr[i+1] = indptr[i] + in.Indptr[v+1] - in.Indptr[v]
	}
	edges := indptr[nd]
	if int64(nd)+edges >= math.MaxInt32 {
		return nil, fmt.Errorf("chunk of %d nodes has %d in-edges, over the %d a block holds", nd, edges, math.MaxInt32)
	}
	indices := make([]int32, edges)
	parts := 1
	if workers >= minParallel {
		parts = int(min(int64(min(workers, maxParts)), edges/int64(max(minPartEdges, 1))))
	}
	var hc *hostChunk
	if parts <= 1 {
		hc = buildSerial(in, s, cur, dst, indptr, indices)
	} else {
		hc = buildParallel(in, s, cur, dst, indptr, indices, parts)
	}
	if gcnDeg != nil {
		hc.deg = make([]int64, len(hc.src))
		forParts(len(hc.src), max(1, min(workers, len(hc.src)>>16)), func(_, a, b int) {
			for i := a; i < b; i++ {
				hc.deg[i] = gcnDeg[hc.src[i]]
			}
		})
	}
	return hc, nil
}

// buildSerial is buildChunk on one goroutine: one pass over the edges.
func buildSerial(in *graph.CSR, s *scratch, cur uint64, dst []int32, indptr []int64, indices []int32) *hostChunk {
	src := make([]int32, len(dst), len(dst)*2)
	for i, v := range dst {
		s.slot[v] = cur | uint64(i)
		src[i] = v
	}
	e := 0
	for _, v := range dst {
		for _, u := range in.Indices[in.Indptr[v]:in.Indptr[v+1]] {
			x := s.slot[u]
			if x&^(1<<32-1) != cur {
				x = cur | uint64(len(src))
				s.slot[u] = x
				src = append(src, u)
			}
			indices[e] = int32(uint32(x))
			e++
		}
	}
	return &hostChunk{src: src, indptr: indptr, indices: indices}
}

// buildParallel is buildChunk split over parts goroutines. Three
// passes, each parallel, with no atomic operation:
//
//  1. goroutine q owns the nodes [q*n/parts, (q+1)*n/parts): it reads
//     every edge of the chunk in order and, for the sources it owns,
//     does buildSerial's lookup on their words alone, a source's word
//     taking the position of its first edge; every edge gets its
//     source's word (a destination's local ID, or the position of the
//     source's first edge). One random access an edge, as serial.
//  2. each goroutine takes a range of the edges, counts its first
//     edges (an edge is its source's first when it got its own
//     position), and numbers them from the counts of the ranges
//     before it, in edge order, listing their sources;
//  3. every edge takes its source's number (from the first edge's).
//
// The numbering is buildSerial's: the destinations, then the other
// sources by their first edge.
func buildParallel(in *graph.CSR, s *scratch, cur uint64, dst []int32, indptr []int64, indices []int32, parts int) *hostChunk {
	nd := len(dst)
	edges := indptr[nd]
	// Edge ranges: part p takes destinations [cut[p], cut[p+1]).
	cut := make([]int, parts+1)
	for p := 1; p < parts; p++ {
		want := edges * int64(p) / int64(parts)
		lo, hi := cut[p-1], nd
		for lo < hi { // the first destination whose edges start at or after want
			m := int(uint(lo+hi) >> 1)
			if indptr[m] < want {
				lo = m + 1
			} else {
				hi = m
			}
		}
		cut[p] = lo
	}
	cut[parts] = nd
	run := func(f func(p int)) {
		var wg sync.WaitGroup
		for p := range parts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f(p)
			}()
		}
		wg.Wait()
	}
	slot := s.slot
	n := int64(len(slot))
	// The destinations' local IDs (distinct nodes: plain stores).
	run(func(p int) {
		for i := cut[p]; i < cut[p+1]; i++ {
			slot[dst[i]] = cur | uint64(i)
		}
	})
	// 1. Each goroutine the words of its nodes, over every edge.
	run(func(q int) {
		lo := n * int64(q) / int64(parts)
		span := uint64(n*int64(q+1)/int64(parts) - lo)
		e := int64(0)
		for _, v := range dst {
			for _, u := range in.Indices[in.Indptr[v]:in.Indptr[v+1]] {
				if uint64(int64(u)-lo) < span {
					x := slot[u]
					if x&^(1<<32-1) != cur {
						x = cur | uint64(int64(nd)+e)
						slot[u] = x
					}
					indices[e] = int32(uint32(x))
				}
				e++
			}
		}
	})
	// 2. The first edges, counted and numbered per edge range.
	firsts := make([]int, parts)
	run(func(p int) {
		c := 0
		for e := indptr[cut[p]]; e < indptr[cut[p+1]]; e++ {
			if int64(indices[e]) == int64(nd)+e {
				c++
			}
		}
		firsts[p] = c
	})
	start := make([]int, parts)
	total := nd
	for p, c := range firsts {
		start[p] = total
		total += c
	}
	src := make([]int32, total)
	copy(src, dst)
	ids := make([]int32, edges) // ids[e]: the number of the source first seen at edge e
	run(func(p int) {
		e := indptr[cut[p]]
		id := start[p]
		for _, v := range dst[cut[p]:cut[p+1]] {
			for _, u := range in.Indices[in.Indptr[v]:in.Indptr[v+1]] {
				if int64(indices[e]) == int64(nd)+e {
					ids[e] = int32(id)
					src[id] = u
					id++
				}
				e++
			}
		}
	})
	// 3. Every edge's source number.
	run(func(p int) {
		for e := indptr[cut[p]]; e < indptr[cut[p+1]]; e++ {
			if t := indices[e]; int(t) >= nd {
				indices[e] = ids[int(t)-nd]
			}
		}
	})
	return &hostChunk{src: src, indptr: indptr, indices: indices}
}

// forParts runs f over parts equal ranges of [0, n) at once and waits.
func forParts(n, parts int, f func(p, a, b int)) {
	if parts <= 1 {
		f(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(p, n*p/parts, n*(p+1)/parts)
		}()
	}
	wg.Wait()
}
