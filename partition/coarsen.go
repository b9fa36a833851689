package partition

import (
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/strata-gnn/strata/internal/rng"
)

// Coarsening: heavy-edge matching (random matching on the unweighted input
// level), 2-hop matching of leftovers when many vertices stay unmatched
// (leaves around one hub, vertices with identical neighborhoods), and a
// parallel contraction that merges every matched pair into one vertex.

const unmatched = -1

// unmatchedFor2Hop is the fraction of vertices left unmatched (but light
// enough to match) above which 2-hop matching runs: on power-law graphs
// plain matching stalls because many low-degree vertices hang off the same
// few hubs.
const unmatchedFor2Hop = 0.10

// coarsenFraction: stop coarsening when a level keeps more than this share
// of its finer level's vertices.
const coarsenFraction = 0.85

// level is one graph of the multilevel hierarchy with the map to its
// coarser successor.
type level struct {
	g     *wgraph
	cmap  []int32 // vertex -> vertex of the next coarser level (nil at the coarsest)
	match []int32
}

// coarsen builds the hierarchy from g down to about coarsenTo vertices.
// levels[0] is g itself. Pairs heavier than maxvw (per constraint) are not
// matched. key seeds the random visit orders.
func coarsen(g *wgraph, coarsenTo int, maxvw []int64, key uint64, unitFirst bool, stop func() bool) []level {
	levels := []level{{g: g}}
	cur := g
	var ht [][]int32 // contraction scratch, reused across levels
	for lvl := 0; cur.n > coarsenTo; lvl++ {
		if stop != nil && stop() {
			break
		}
		rm := unitFirst && lvl == 0
		match, cmap, cn := matchGraph(cur, maxvw, rm, rng.Derive(key, uint64(lvl)))
		next := contract(cur, match, cmap, cn, &ht)
		levels[len(levels)-1].cmap = cmap
		levels[len(levels)-1].match = match
		levels = append(levels, level{g: next})
		if float64(next.n) > coarsenFraction*float64(cur.n) || next.nedges() <= int64(next.n)/2 {
			break
		}
		cur = next
	}
	return levels
}

// partialShuffle sets p to a random permutation that keeps some locality:
// the identity followed by n/8 rounds that each exchange two random runs
// of four (cheap, and traversals in this order still touch memory in
// mostly increasing order).
func partialShuffle(p []int32, s *rng.Stream) {
	n := len(p)
	for i := range p {
		p[i] = int32(i)
	}
	if n < 10 {
		for range n {
			a, b := s.Below(uint64(n)), s.Below(uint64(n))
			p[a], p[b] = p[b], p[a]
		}
		return
	}
	m := uint64(n - 3)
	for range n / 8 {
		a, b := int(s.Below(m)), int(s.Below(m))
		p[a], p[b+2] = p[b+2], p[a]
		p[a+1], p[b+3] = p[b+3], p[a+1]
		p[a+2], p[b] = p[b], p[a+2]
		p[a+3], p[b+1] = p[b+1], p[a+3]
	}
}

// visitOrder returns the matching's visit order: random, then stably
// bucket-sorted by sqrt(1+degree) (capped) so low-degree vertices choose
// first and are not left stranded by their high-degree neighbors.
func visitOrder(g *wgraph, s *rng.Stream) []int32 {
	n := g.n
	tperm := make([]int32, n)
	partialShuffle(tperm, s)
	capKey := 1
	if n > 0 {
		capKey = max(1, 4*int(g.nedges()/int64(n)))
	}
	keys := make([]int32, n)
	cnt := make([]int32, capKey+2)
	for v := 0; v < n; v++ {
		k := min(int(math.Sqrt(float64(1+g.xadj[v+1]-g.xadj[v]))), capKey)
		keys[v] = int32(k)
		cnt[k+1]++
	}
	for i := 1; i < len(cnt); i++ {
		cnt[i] += cnt[i-1]
	}
	perm := make([]int32, n)
	for _, v := range tperm {
		k := keys[v]
		perm[cnt[k]] = v
		cnt[k]++
	}
	return perm
}

// matchGraph computes a matching of g (match[v] is v's partner, or v) and
// the coarse numbering cmap (pairs get one coarse ID, in increasing order
// of their smaller vertex, which keeps coarse graphs memory-friendly).
// rm selects random matching (first eligible neighbor), for unit edge
// weights; otherwise the heaviest eligible edge wins. A vertex heavier
// than maxvw stays alone; an isolated vertex pairs with the next unmatched
// vertex in visit order; one that finds no partner but is light is left
// for 2-hop matching.
func matchGraph(g *wgraph, maxvw []int64, rm bool, key uint64) (match, cmap []int32, cn int) {
	n := g.n
	s := rng.NewStream(key)
	perm := visitOrder(g, &s)
	match = make([]int32, n)
	for i := range match {
		match[i] = unmatched
	}
	var nunmatched int
	if g.ncon == 1 {
		nunmatched = matchSingle(g, perm, match, maxvw[0], rm || g.ew == nil)
	} else {
		nunmatched = matchMulti(g, perm, match, maxvw, rm || g.ew == nil)
	}
	if float64(nunmatched) > unmatchedFor2Hop*float64(n) {
		nunmatched = match2HopAny(g, perm, match, nunmatched, 2)
		nunmatched = match2HopAll(g, perm, match, nunmatched, 64)
		if float64(nunmatched) > 1.5*unmatchedFor2Hop*float64(n) {
			nunmatched = match2HopAny(g, perm, match, nunmatched, 3)
		}
		if float64(nunmatched) > 2.0*unmatchedFor2Hop*float64(n) {
			match2HopAny(g, perm, match, nunmatched, n)
		}
	}
	cmap = make([]int32, n)
	for i := 0; i < n; i++ {
		switch m := match[i]; {
		case m == unmatched:
			match[i] = int32(i)
			cmap[i] = int32(cn)
			cn++
		case int32(i) <= m:
			cmap[i] = int32(cn)
			cmap[m] = int32(cn)
			cn++
		}
	}
	return match, cmap, cn
}

// matchSingle is the matching pass for one constraint; it returns the
// number of vertices left for 2-hop matching.
func matchSingle(g *wgraph, perm, match []int32, mx int64, first bool) int {
	n := g.n
	xadj, adj, ew, vw := g.xadj, g.adj, g.ew, g.vw
	nunmatched, lastUnmatched := 0, 0
	for pi, i := range perm {
		if match[i] != unmatched {
			continue
		}
		wi := int64(vw[i])
		best := i
		if wi < mx {
			lo, hi := xadj[i], xadj[i+1]
			switch {
			case lo == hi:
				// An isolated vertex pairs with any unmatched vertex.
				lastUnmatched = max(pi, lastUnmatched) + 1
				for ; lastUnmatched < n; lastUnmatched++ {
					if j := perm[lastUnmatched]; match[j] == unmatched {
						best = j
						break
					}
				}
			case first:
				for _, k := range adj[lo:hi] {
					if match[k] == unmatched && wi+int64(vw[k]) <= mx {
						best = k
						break
					}
				}
			default:
				maxw := int32(-1)
				ws := ew[lo:hi]
				for j, k := range adj[lo:hi] {
					if ws[j] > maxw && match[k] == unmatched && wi+int64(vw[k]) <= mx {
						best, maxw = k, ws[j]
					}
				}
			}
			if best == i && 2*wi < mx {
				nunmatched++
				best = unmatched // left for 2-hop matching
			}
		}
		if best != unmatched {
			match[i] = best
			match[best] = i
		}
	}
	return nunmatched
}

// matchMulti is matchSingle for several constraints: a pair must fit
// under maxvw in every one.
func matchMulti(g *wgraph, perm, match []int32, maxvw []int64, first bool) int {
	n, ncon := g.n, g.ncon
	xadj, adj, ew, vw := g.xadj, g.adj, g.ew, g.vw
	fits := func(v, u int32, fu int64) bool {
		for c := 0; c < ncon; c++ {
			if int64(vw[int(v)*ncon+c])+fu*int64(vw[int(u)*ncon+c]) > maxvw[c] {
				return false
			}
		}
		return true
	}
	nunmatched, lastUnmatched := 0, 0
	for pi, i := range perm {
		if match[i] != unmatched {
			continue
		}
		best := i
		if fits(i, i, 0) {
			lo, hi := xadj[i], xadj[i+1]
			switch {
			case lo == hi:
				lastUnmatched = max(pi, lastUnmatched) + 1
				for ; lastUnmatched < n; lastUnmatched++ {
					if j := perm[lastUnmatched]; match[j] == unmatched {
						best = j
						break
					}
				}
			case first:
				for _, k := range adj[lo:hi] {
					if match[k] == unmatched && fits(i, k, 1) {
						best = k
						break
					}
				}
			default:
				maxw := int32(-1)
				ws := ew[lo:hi]
				for j, k := range adj[lo:hi] {
					if ws[j] > maxw && match[k] == unmatched && fits(i, k, 1) {
						best, maxw = k, ws[j]
					}
				}
			}
			if best == i && fits(i, i, 1) {
				nunmatched++
				best = unmatched
			}
		}
		if best != unmatched {
			match[i] = best
			match[best] = i
		}
	}
	return nunmatched
}

// match2HopAny pairs unmatched vertices of degree < maxdeg that share a
// neighbor. It returns the new count of unmatched vertices.
func match2HopAny(g *wgraph, perm, match []int32, nunmatched, maxdeg int) int {
	n := g.n
	xadj, adj := g.xadj, g.adj
	eligible := func(i int32) bool {
		return match[i] == unmatched && xadj[i+1]-xadj[i] < int64(maxdeg)
	}
	colptr := make([]int64, n+1)
	for i := int32(0); int(i) < n; i++ {
		if eligible(i) {
			for _, k := range adj[xadj[i]:xadj[i+1]] {
				colptr[k+1]++
			}
		}
	}
	for i := 0; i < n; i++ {
		colptr[i+1] += colptr[i]
	}
	if colptr[n] == 0 {
		return nunmatched
	}
	next := make([]int64, n)
	copy(next, colptr[:n])
	rowind := make([]int32, colptr[n])
	for _, i := range perm {
		if eligible(i) {
			for _, k := range adj[xadj[i]:xadj[i+1]] {
				rowind[next[k]] = i
				next[k]++
			}
		}
	}
	for _, i := range perm {
		list := rowind[colptr[i]:colptr[i+1]]
		lo, hi := 0, len(list)-1
		for lo < hi {
			if match[list[lo]] != unmatched {
				lo++
				continue
			}
			if match[list[hi]] != unmatched {
				hi--
				continue
			}
			a, b := list[lo], list[hi]
			match[a], match[b] = b, a
			nunmatched -= 2
			lo++
			hi--
		}
	}
	return nunmatched
}

// match2HopAll pairs unmatched vertices of degree in (1, maxdeg) whose
// neighborhoods are identical: candidates are sorted by a 32-bit,
// order-independent hash of their neighbor set (packed above the vertex
// ID, so one integer sort groups them) and equal hashes are compared
// exactly.
func match2HopAll(g *wgraph, perm, match []int32, nunmatched, maxdeg int) int {
	xadj, adj := g.xadj, g.adj
	var cands []uint64
	for i := int32(0); int(i) < g.n; i++ {
		d := xadj[i+1] - xadj[i]
		if match[i] != unmatched || d <= 1 || d >= int64(maxdeg) {
			continue
		}
		var h uint32
		for _, k := range adj[xadj[i]:xadj[i+1]] {
			h += uint32((uint64(k) + 1) * rng.Golden >> 32)
		}
		cands = append(cands, uint64(h)<<32|uint64(i))
	}
	if len(cands) < 2 {
		return nunmatched
	}
	slices.Sort(cands)
	mark := make([]int32, g.n)
	stamp := int32(0)
	for lo := 0; lo < len(cands); {
		hi := lo + 1
		for hi < len(cands) && cands[hi]>>32 == cands[lo]>>32 {
			hi++
		}
		for a := lo; a < hi-1; a++ {
			i := int32(cands[a])
			if match[i] != unmatched {
				continue
			}
			stamp++
			for _, k := range adj[xadj[i]:xadj[i+1]] {
				mark[k] = stamp
			}
			for b := a + 1; b < hi; b++ {
				j := int32(cands[b])
				if match[j] != unmatched || xadj[j+1]-xadj[j] != xadj[i+1]-xadj[i] {
					continue
				}
				same := true
				for _, k := range adj[xadj[j]:xadj[j+1]] {
					if mark[k] != stamp {
						same = false
						break
					}
				}
				if same {
					match[i], match[j] = j, i
					nunmatched -= 2
					break
				}
			}
		}
		lo = hi
	}
	return nunmatched
}

// contract builds the coarse graph of a matching: coarse vertex c merges
// the pair mapped to c, with summed vertex weights; parallel edges merge
// with summed weights and edges inside a pair disappear. Rows are built in
// parallel by chunks of coarse vertices, each row by one deterministic
// scan (the pair's smaller vertex's edges first), so the result does not
// depend on the number of goroutines. Every chunk writes its rows at an
// upper bound of their offset (the fine degrees before it) in the output
// arrays; a final in-order pass slides them together. ht holds one
// position table per worker, all -1, reused across levels (grown as
// needed).
func contract(g *wgraph, match, cmap []int32, cn int, ht *[][]int32) *wgraph {
	ncon := g.ncon
	rep := make([]int32, cn)
	for v := 0; v < g.n; v++ {
		if int32(v) <= match[v] {
			rep[cmap[v]] = int32(v)
		}
	}
	c := &wgraph{n: cn, ncon: ncon, vw: make([]int32, cn*ncon)}
	parallelFor(cn, 1<<14, func(lo, hi int) {
		for ci := lo; ci < hi; ci++ {
			u := int(rep[ci])
			v := int(match[u])
			for k := 0; k < ncon; k++ {
				w := g.vw[u*ncon+k]
				if v != u {
					w += g.vw[v*ncon+k]
				}
				c.vw[ci*ncon+k] = w
			}
		}
	})
	c.tvw = append([]int64(nil), g.tvw...)

	// Chunks of coarse vertices of about equal fine-edge cost; cum is
	// also each row's upper-bound offset.
	cum := make([]int64, cn+1)
	for ci := 0; ci < cn; ci++ {
		u := rep[ci]
		v := match[u]
		d := g.xadj[u+1] - g.xadj[u]
		if v != u {
			d += g.xadj[v+1] - g.xadj[v]
		}
		cum[ci+1] = cum[ci] + d
	}
	total := cum[cn]
	nchunks := 1
	if w := workers(); w > 1 && total > 1<<16 {
		nchunks = 8 * w
	}
	nchunks = max(nchunks, int(total>>30)+1) // chunk-relative positions fit int32
	bounds := make([]int, nchunks+1)
	for j := 1; j < nchunks; j++ {
		target := total / int64(nchunks) * int64(j)
		bounds[j] = max(bounds[j-1], sort.Search(cn, func(x int) bool { return cum[x] >= target }))
	}
	bounds[nchunks] = cn
	nw := min(workers(), nchunks)
	for len(*ht) < nw {
		*ht = append(*ht, nil)
	}
	for w := 0; w < nw; w++ {
		if len((*ht)[w]) < cn {
			t := make([]int32, cn)
			for i := range t {
				t[i] = -1
			}
			(*ht)[w] = t
		}
	}
	adj := make([]int32, total)
	ew := make([]int32, total)
	used := make([]int64, nchunks)
	cxadj := make([]int64, cn+1)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range nw {
		ht := (*ht)[w]
		wg.Go(func() {
			for {
				j := int(next.Add(1)) - 1
				if j >= nchunks {
					return
				}
				lo, hi := bounds[j], bounds[j+1]
				base := cum[lo]
				bufA := adj[base:cum[hi]]
				bufW := ew[base:cum[hi]]
				pos := int32(0)
				for ci := lo; ci < hi; ci++ {
					start := pos
					u := rep[ci]
					v := match[u]
					self := int32(ci)
					for _, x := range [2]int32{u, v} {
						elo, ehi := g.xadj[x], g.xadj[x+1]
						nbrs := g.adj[elo:ehi]
						if g.ew == nil {
							for _, y := range nbrs {
								cc := cmap[y]
								if cc == self {
									continue
								}
								if p := ht[cc]; p >= 0 {
									bufW[p]++
								} else {
									ht[cc] = pos
									bufA[pos] = cc
									bufW[pos] = 1
									pos++
								}
							}
						} else {
							ws := g.ew[elo:ehi]
							for i, y := range nbrs {
								cc := cmap[y]
								if cc == self {
									continue
								}
								if p := ht[cc]; p >= 0 {
									bufW[p] += ws[i]
								} else {
									ht[cc] = pos
									bufA[pos] = cc
									bufW[pos] = ws[i]
									pos++
								}
							}
						}
						if v == u {
							break
						}
					}
					for _, cc := range bufA[start:pos] {
						ht[cc] = -1
					}
					cxadj[ci+1] = int64(pos - start)
				}
				used[j] = int64(pos)
			}
		})
	}
	wg.Wait()
	for ci := 0; ci < cn; ci++ {
		cxadj[ci+1] += cxadj[ci]
	}
	// Slide the chunks left into place, in order (a chunk's destination
	// never reaches past its own source, nor into a later chunk's).
	for j := 0; j < nchunks; j++ {
		dst, src := cxadj[bounds[j]], cum[bounds[j]]
		if dst != src {
			copy(adj[dst:dst+used[j]], adj[src:src+used[j]])
			copy(ew[dst:dst+used[j]], ew[src:src+used[j]])
		}
	}
	c.xadj = cxadj
	c.adj = adj[:cxadj[cn]:cxadj[cn]]
	c.ew = ew[:cxadj[cn]:cxadj[cn]]
	return c
}
