package partition

import (
	"cmp"
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
	for lvl := 0; cur.n > coarsenTo; lvl++ {
		if stop != nil && stop() {
			break
		}
		rm := unitFirst && lvl == 0
		match, cmap, cn := matchGraph(cur, maxvw, rm, rng.Derive(key, uint64(lvl)))
		next := contract(cur, match, cmap, cn)
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
	keyOf := func(v int32) int {
		d := g.xadj[v+1] - g.xadj[v]
		return min(int(math.Sqrt(float64(1+d))), capKey)
	}
	cnt := make([]int32, capKey+2)
	for _, v := range tperm {
		cnt[keyOf(v)+1]++
	}
	for i := 1; i < len(cnt); i++ {
		cnt[i] += cnt[i-1]
	}
	perm := make([]int32, n)
	for _, v := range tperm {
		k := keyOf(v)
		perm[cnt[k]] = v
		cnt[k]++
	}
	return perm
}

// matchGraph computes a matching of g (match[v] is v's partner, or v) and
// the coarse numbering cmap (pairs get one coarse ID, in increasing order
// of their smaller vertex, which keeps coarse graphs memory-friendly).
// rm selects random matching (first eligible neighbor), for unit edge
// weights; otherwise the heaviest eligible edge wins.
func matchGraph(g *wgraph, maxvw []int64, rm bool, key uint64) (match, cmap []int32, cn int) {
	n, ncon := g.n, g.ncon
	s := rng.NewStream(key)
	perm := visitOrder(g, &s)
	match = make([]int32, n)
	for i := range match {
		match[i] = unmatched
	}
	vw := g.vw
	// light reports whether v may be matched at all; fits whether v and u
	// together stay within maxvw; canDouble whether v is light enough that
	// a partner found by 2-hop matching would fit.
	light := func(v int32) bool {
		if ncon == 1 {
			return int64(vw[v]) < maxvw[0]
		}
		for c := 0; c < ncon; c++ {
			if int64(vw[int(v)*ncon+c]) > maxvw[c] {
				return false
			}
		}
		return true
	}
	fits := func(v, u int32) bool {
		if ncon == 1 {
			return int64(vw[v])+int64(vw[u]) <= maxvw[0]
		}
		for c := 0; c < ncon; c++ {
			if int64(vw[int(v)*ncon+c])+int64(vw[int(u)*ncon+c]) > maxvw[c] {
				return false
			}
		}
		return true
	}
	canDouble := func(v int32) bool { return fits(v, v) }

	var nunmatched int
	lastUnmatched := 0
	xadj, adj, ew := g.xadj, g.adj, g.ew
	for pi := 0; pi < n; pi++ {
		i := perm[pi]
		if match[i] != unmatched {
			continue
		}
		best := i
		if light(i) {
			if xadj[i] == xadj[i+1] {
				// An isolated vertex pairs with any unmatched vertex.
				lastUnmatched = max(pi, lastUnmatched) + 1
				for ; lastUnmatched < n; lastUnmatched++ {
					if j := perm[lastUnmatched]; match[j] == unmatched {
						best = j
						break
					}
				}
			} else {
				if rm || ew == nil {
					for e := xadj[i]; e < xadj[i+1]; e++ {
						if k := adj[e]; match[k] == unmatched && fits(i, k) {
							best = k
							break
						}
					}
				} else {
					maxw := int32(-1)
					for e := xadj[i]; e < xadj[i+1]; e++ {
						if k := adj[e]; match[k] == unmatched && ew[e] > maxw && fits(i, k) {
							best, maxw = k, ew[e]
						}
					}
				}
				if best == i && canDouble(i) {
					nunmatched++
					best = unmatched // left for 2-hop matching
				}
			}
		}
		if best != unmatched {
			match[i] = best
			match[best] = i
		}
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
// neighborhoods are identical (found through a hash of the neighbor set).
func match2HopAll(g *wgraph, perm, match []int32, nunmatched, maxdeg int) int {
	xadj, adj := g.xadj, g.adj
	type cand struct {
		key uint64
		v   int32
	}
	var cands []cand
	for _, i := range perm {
		d := xadj[i+1] - xadj[i]
		if match[i] != unmatched || d <= 1 || d >= int64(maxdeg) {
			continue
		}
		// An order-independent hash of the neighbor set.
		var h uint64
		for _, k := range adj[xadj[i]:xadj[i+1]] {
			h += rng.Hash(0x2b0b, uint64(k))
		}
		cands = append(cands, cand{h, i})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if c := cmp.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.v, b.v)
	})
	// mark[k] == stamp marks k as a neighbor of the vertex being compared.
	mark := make([]int32, g.n)
	stamp := int32(0)
	for lo := 0; lo < len(cands); {
		hi := lo + 1
		for hi < len(cands) && cands[hi].key == cands[lo].key {
			hi++
		}
		for a := lo; a < hi; a++ {
			i := cands[a].v
			if match[i] != unmatched {
				continue
			}
			stamp++
			for _, k := range adj[xadj[i]:xadj[i+1]] {
				mark[k] = stamp
			}
			for b := a + 1; b < hi; b++ {
				j := cands[b].v
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
// depend on the number of goroutines.
func contract(g *wgraph, match, cmap []int32, cn int) *wgraph {
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

	// Chunks of coarse vertices of about equal fine-edge cost.
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
	nchunks = max(nchunks, int(total>>30)+1)
	bounds := make([]int, nchunks+1)
	for j := 1; j < nchunks; j++ {
		target := total / int64(nchunks) * int64(j)
		bounds[j] = max(bounds[j-1], sort.Search(cn, func(x int) bool { return cum[x] >= target }))
	}
	bounds[nchunks] = cn
	type chunkOut struct {
		adj []int32
		ew  []int32
	}
	outs := make([]chunkOut, nchunks)
	cxadj := make([]int64, cn+1)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers(), nchunks) {
		wg.Go(func() {
			ht := make([]int32, cn)
			for i := range ht {
				ht[i] = -1
			}
			for {
				j := int(next.Add(1)) - 1
				if j >= nchunks {
					return
				}
				lo, hi := bounds[j], bounds[j+1]
				bufA := make([]int32, 0, cum[hi]-cum[lo])
				bufW := make([]int32, 0, cum[hi]-cum[lo])
				for ci := lo; ci < hi; ci++ {
					start := len(bufA)
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
									ht[cc] = int32(len(bufA))
									bufA = append(bufA, cc)
									bufW = append(bufW, 1)
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
									ht[cc] = int32(len(bufA))
									bufA = append(bufA, cc)
									bufW = append(bufW, ws[i])
								}
							}
						}
						if v == u {
							break
						}
					}
					for _, cc := range bufA[start:] {
						ht[cc] = -1
					}
					cxadj[ci+1] = int64(len(bufA) - start)
				}
				outs[j] = chunkOut{bufA, bufW}
			}
		})
	}
	wg.Wait()
	for ci := 0; ci < cn; ci++ {
		cxadj[ci+1] += cxadj[ci]
	}
	c.xadj = cxadj
	c.adj = make([]int32, cxadj[cn])
	c.ew = make([]int32, cxadj[cn])
	parallelFor(nchunks, 1, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			off := cxadj[bounds[j]]
			copy(c.adj[off:], outs[j].adj)
			copy(c.ew[off:], outs[j].ew)
			outs[j] = chunkOut{}
		}
	})
	return c
}
