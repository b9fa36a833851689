package partition

import (
	"math"
	"sync"

	"github.com/strata-gnn/strata/internal/rng"
)

// Initial partitioning: recursive bisection of the coarsest graph, where
// every bisection is itself multilevel (coarsen to a few dozen vertices,
// greedy graph growing from random seeds, then FM refinement while
// uncoarsening), repeated a few times keeping the best.

const (
	bisectCoarsenTo = 20 // coarsest size inside a bisection
	smallNTries     = 5  // graph-growing tries when coarsening reached bisectCoarsenTo
	largeNTries     = 7  // tries when it stopped early (harder graph)
	fmIters         = 10 // FM passes per level
	growFMIters     = 4  // FM passes after each graph-growing try
)

// bset is a set of vertices with O(1) insert, delete and membership.
type bset struct {
	list []int32
	pos  []int32 // -1 when absent
}

func newBset(n int) *bset {
	s := &bset{pos: make([]int32, n)}
	for i := range s.pos {
		s.pos[i] = -1
	}
	return s
}

func (s *bset) has(v int32) bool { return s.pos[v] >= 0 }

func (s *bset) insert(v int32) {
	s.pos[v] = int32(len(s.list))
	s.list = append(s.list, v)
}

func (s *bset) remove(v int32) {
	i := s.pos[v]
	last := s.list[len(s.list)-1]
	s.list[i] = last
	s.pos[last] = i
	s.list = s.list[:len(s.list)-1]
	s.pos[v] = -1
}

// bisection is a 2-way partition of g with its gains and part weights.
type bisection struct {
	g      *wgraph
	ncon   int
	where  []int32
	id, ed []int32
	bnd    *bset
	pw     []int64   // 2*ncon: pw[s*ncon+c]
	tp     []float64 // 2*ncon target weights
	invtw  []float64 // ncon: 1/tvw[c] (0 when tvw[c] == 0)
	ub     float64
	cut    int64
}

func newBisection(g *wgraph, where []int32, frac0, ub float64) *bisection {
	b := &bisection{g: g, ncon: g.ncon, where: where, ub: ub,
		id: make([]int32, g.n), ed: make([]int32, g.n),
		pw: make([]int64, 2*g.ncon), tp: make([]float64, 2*g.ncon), invtw: make([]float64, g.ncon)}
	for c := 0; c < g.ncon; c++ {
		t := float64(g.tvw[c])
		b.tp[c] = frac0 * t
		b.tp[g.ncon+c] = t - b.tp[c]
		if t > 0 {
			b.invtw[c] = 1 / t
		}
	}
	b.compute()
	return b
}

// compute sets id, ed, the boundary, pw and cut from where. Gains are
// computed in parallel (one scan of its own edges per vertex); the rest is
// a sequential pass in vertex order.
func (b *bisection) compute() {
	g := b.g
	where := b.where
	parallelFor(g.n, 1<<12, func(lo, hi int) {
		for v := lo; v < hi; v++ {
			s := where[v]
			var id, ed int32
			elo, ehi := g.xadj[v], g.xadj[v+1]
			if g.ew == nil {
				for _, u := range g.adj[elo:ehi] {
					if where[u] == s {
						id++
					} else {
						ed++
					}
				}
			} else {
				ws := g.ew[elo:ehi]
				for i, u := range g.adj[elo:ehi] {
					if where[u] == s {
						id += ws[i]
					} else {
						ed += ws[i]
					}
				}
			}
			b.id[v], b.ed[v] = id, ed
		}
	})
	if b.bnd == nil {
		b.bnd = newBset(g.n)
	} else {
		for _, v := range b.bnd.list {
			b.bnd.pos[v] = -1
		}
		b.bnd.list = b.bnd.list[:0]
	}
	clear(b.pw)
	var cut int64
	for v := 0; v < g.n; v++ {
		s := int(where[v])
		for c := 0; c < b.ncon; c++ {
			b.pw[s*b.ncon+c] += int64(g.vw[v*b.ncon+c])
		}
		cut += int64(b.ed[v])
		if b.ed[v] > 0 || g.xadj[v] == g.xadj[v+1] {
			b.bnd.insert(int32(v))
		}
	}
	b.cut = cut / 2
}

// diff is the normalized distance of side 0 from its target (the largest
// over constraints).
func (b *bisection) diff() float64 {
	var d float64
	for c := 0; c < b.ncon; c++ {
		d = max(d, math.Abs(b.tp[c]-float64(b.pw[c]))*b.invtw[c])
	}
	return d
}

// over returns how far side s is above its target, normalized (largest
// over constraints; negative when under).
func (b *bisection) over(s int32) float64 {
	d := math.Inf(-1)
	for c := 0; c < b.ncon; c++ {
		i := int(s)*b.ncon + c
		d = max(d, (float64(b.pw[i])-b.tp[i])*b.invtw[c])
	}
	return d
}

// imbalance is the largest pw/tp - ub over sides and constraints (<= 0
// when balanced).
func (b *bisection) imbalance() float64 {
	d := math.Inf(-1)
	for i, p := range b.pw {
		if b.tp[i] > 0 {
			d = max(d, float64(p)/b.tp[i]-b.ub)
		} else if p > 0 {
			d = max(d, 1)
		}
	}
	return d
}

func (b *bisection) moveWeights(v, from, to int32) {
	n := b.ncon
	for c := 0; c < n; c++ {
		w := int64(b.g.vw[int(v)*n+c])
		b.pw[int(from)*n+c] -= w
		b.pw[int(to)*n+c] += w
	}
}

// move moves v to the other side, updating gains and the boundary; q (may
// hold nil) are the per-side queues of vertices with moved[v] < 0 to keep
// current; only vertices on side qside are queued when qside >= 0.
func (b *bisection) move(v int32, q *[2]*pqueue, moved []int32, qside int32) {
	g := b.g
	from := b.where[v]
	to := 1 - from
	b.moveWeights(v, from, to)
	b.cut -= int64(b.ed[v] - b.id[v])
	b.where[v] = to
	b.id[v], b.ed[v] = b.ed[v], b.id[v]
	if b.ed[v] == 0 && g.xadj[v] < g.xadj[v+1] && b.bnd.has(v) {
		b.bnd.remove(v)
	} else if b.ed[v] > 0 && !b.bnd.has(v) {
		b.bnd.insert(v)
	}
	for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
		k := g.adj[e]
		w := g.ewt(e)
		if b.where[k] == to {
			b.id[k] += w
			b.ed[k] -= w
		} else {
			b.id[k] -= w
			b.ed[k] += w
		}
		queued := q != nil && (moved == nil || moved[k] < 0) && (qside < 0 || b.where[k] == qside)
		var kq *pqueue
		if queued {
			kq = q[b.where[k]]
		}
		if b.bnd.has(k) {
			if b.ed[k] == 0 {
				b.bnd.remove(k)
				if queued && kq.contains(k) {
					kq.remove(k)
				}
			} else if queued && kq.contains(k) {
				kq.update(k, int64(b.ed[k]-b.id[k]))
			}
		} else if b.ed[k] > 0 {
			b.bnd.insert(k)
			if queued && !kq.contains(k) {
				kq.insert(k, int64(b.ed[k]-b.id[k]))
			}
		}
	}
}

// fmRefine runs up to niter Fiduccia-Mattheyses passes: move the best-gain
// boundary vertex of the heavier side, allow uphill moves, and roll back
// to the best cut seen (at no worse balance) once limit moves in a row
// brought nothing.
func (b *bisection) fmRefine(niter int, s *rng.Stream) {
	g := b.g
	n := g.n
	if n == 0 {
		return
	}
	q := [2]*pqueue{newPQueue(n), newPQueue(n)}
	moved := make([]int32, n)
	for i := range moved {
		moved[i] = -1
	}
	limit := int(min(max(0.01*float64(n), 15), 100))
	avgvw := min(1.0/20, 2.0/float64(n))
	origdiff := b.diff()
	var swaps []int32
	order := make([]int32, 0, len(b.bnd.list))
	for pass := 0; pass < niter; pass++ {
		q[0].reset()
		q[1].reset()
		initcut := b.cut
		mincut := b.cut
		mindiff := b.diff()
		mincutorder := -1
		order = append(order[:0], b.bnd.list...)
		shuffle(order, s)
		for _, v := range order {
			q[b.where[v]].insert(v, int64(b.ed[v]-b.id[v]))
		}
		swaps = swaps[:0]
		for nswaps := 0; nswaps < n; nswaps++ {
			from := int32(0)
			if b.over(1) > b.over(0) {
				from = 1
			}
			v := q[from].pop()
			if v < 0 {
				break
			}
			b.move(v, &q, moved, -1)
			d := b.diff()
			if (b.cut < mincut && d <= origdiff+avgvw) || (b.cut == mincut && d < mindiff) {
				mincut, mindiff, mincutorder = b.cut, d, nswaps
			} else if nswaps-mincutorder > limit {
				b.move(v, nil, nil, -1) // undo; v is not recorded
				break
			}
			moved[v] = int32(nswaps)
			swaps = append(swaps, v)
		}
		for _, v := range swaps {
			moved[v] = -1
		}
		for i := len(swaps) - 1; i > mincutorder; i-- {
			b.move(swaps[i], nil, nil, -1)
		}
		if mincutorder <= 0 || mincut == initcut {
			break
		}
	}
}

// balance moves vertices off the overweight side (best gain first,
// boundary vertices before interior ones) until both sides are within ub.
func (b *bisection) balance(s *rng.Stream) {
	g := b.g
	if b.imbalance() <= 0 || g.n == 0 {
		return
	}
	if b.ncon > 1 {
		b.balanceMulti(s)
		return
	}
	from := int32(0)
	if b.over(1) > b.over(0) {
		from = 1
	}
	to := 1 - from
	if b.ncon == 1 && math.Abs(b.tp[0]-float64(b.pw[0])) < 3*float64(g.tvw[0])/float64(g.n) {
		return
	}
	q := [2]*pqueue{newPQueue(g.n), newPQueue(g.n)}
	for round := 0; round < 2; round++ {
		var cand []int32
		if round == 0 {
			for _, v := range b.bnd.list {
				if b.where[v] == from {
					cand = append(cand, v)
				}
			}
		} else {
			for v := int32(0); int(v) < g.n; v++ {
				if b.where[v] == from {
					cand = append(cand, v)
				}
			}
		}
		shuffle(cand, s)
		q[from].reset()
		for _, v := range cand {
			q[from].insert(v, int64(b.ed[v]-b.id[v]))
		}
		for {
			v := q[from].pop()
			if v < 0 {
				break
			}
			if b.ncon == 1 {
				if float64(b.pw[int(to)]+int64(g.vw[v])) > b.tp[to] {
					break
				}
			} else if b.wouldOverload(v, to) {
				continue
			}
			b.move(v, &q, nil, from)
			if b.over(from) <= b.over(to) || b.imbalance() <= 0 {
				return
			}
		}
	}
}

// excess is the total amount, over sides and constraints, by which the
// side weights exceed ub times their targets (each normalized by the
// constraint's total); 0 when balanced.
func (b *bisection) excess() float64 {
	var e float64
	for i, p := range b.pw {
		if d := float64(p) - b.ub*b.tp[i]; d > 0 {
			e += d * b.invtw[i%b.ncon]
		}
	}
	return e
}

// excessDelta is how much moving v to the other side changes excess().
func (b *bisection) excessDelta(v int32) float64 {
	from := b.where[v]
	to := 1 - from
	var d float64
	for c := 0; c < b.ncon; c++ {
		w := float64(b.g.vw[int(v)*b.ncon+c])
		if w == 0 {
			continue
		}
		i, j := int(from)*b.ncon+c, int(to)*b.ncon+c
		f0, t0 := float64(b.pw[i])-b.ub*b.tp[i], float64(b.pw[j])-b.ub*b.tp[j]
		d += (max(f0-w, 0) - max(f0, 0) + max(t0+w, 0) - max(t0, 0)) * b.invtw[c]
	}
	return d
}

// balanceMulti balances several constraints, which may pull in opposite
// directions (one side heavy in training nodes, the other in nodes): the
// most overweight (side, constraint) picks the next move, a vertex of that
// side carrying that constraint, best gain first, made only if it lowers
// the total excess (so the loop ends). One queue per side and constraint.
func (b *bisection) balanceMulti(s *rng.Stream) {
	g := b.g
	nc := b.ncon
	qs := make([]*pqueue, 2*nc)
	for i := range qs {
		qs[i] = newPQueue(g.n)
	}
	order := make([]int32, g.n)
	for i := range order {
		order[i] = int32(i)
	}
	shuffle(order, s)
	for _, v := range order {
		for c := 0; c < nc; c++ {
			if g.vw[int(v)*nc+c] > 0 {
				qs[int(b.where[v])*nc+c].insert(v, int64(b.ed[v]-b.id[v]))
			}
		}
	}
	for moves := 0; moves < g.n; moves++ {
		worst, wi := 0.0, -1
		for i, p := range b.pw {
			if d := (float64(p) - b.ub*b.tp[i]) * b.invtw[i%nc]; d > worst {
				worst, wi = d, i
			}
		}
		if wi < 0 {
			return
		}
		q := qs[wi]
		v := int32(-1)
		for q.len() > 0 {
			u := q.pop()
			if b.excessDelta(u) < 0 {
				v = u
				break
			}
		}
		if v < 0 {
			return
		}
		from := b.where[v]
		for c := 0; c < nc; c++ {
			if i := int(from)*nc + c; qs[i].contains(v) {
				qs[i].remove(v)
			}
		}
		b.move(v, nil, nil, -1)
		for c := 0; c < nc; c++ {
			if g.vw[int(v)*nc+c] > 0 {
				qs[int(1-from)*nc+c].insert(v, int64(b.ed[v]-b.id[v]))
			}
		}
		for _, u := range g.adj[g.xadj[v]:g.xadj[v+1]] {
			for c := 0; c < nc; c++ {
				if i := int(b.where[u])*nc + c; qs[i].contains(u) {
					qs[i].update(u, int64(b.ed[u]-b.id[u]))
				}
			}
		}
	}
}

// wouldOverload reports whether moving v to side to pushes a constraint of
// to beyond ub times its target.
func (b *bisection) wouldOverload(v, to int32) bool {
	for c := 0; c < b.ncon; c++ {
		i := int(to)*b.ncon + c
		if float64(b.pw[i]+int64(b.g.vw[int(v)*b.ncon+c])) > b.ub*b.tp[i] {
			return true
		}
	}
	return false
}

// shuffle permutes p uniformly (Fisher-Yates) from s.
func shuffle(p []int32, s *rng.Stream) {
	for i := len(p) - 1; i > 0; i-- {
		j := s.Below(uint64(i + 1))
		p[i], p[j] = p[j], p[i]
	}
}

// scalarLoad returns each vertex's weight as a fraction of the total,
// averaged over constraints: the single number graph growing balances.
func scalarLoad(g *wgraph) []float64 {
	l := make([]float64, g.n)
	for c := 0; c < g.ncon; c++ {
		if g.tvw[c] == 0 {
			continue
		}
		inv := 1 / (float64(g.tvw[c]) * float64(g.ncon))
		for v := 0; v < g.n; v++ {
			l[v] += float64(g.vw[v*g.ncon+c]) * inv
		}
	}
	return l
}

// growBisection runs ntries rounds of greedy graph growing (breadth-first
// from a random vertex until side 0 holds its share), each followed by
// balancing and FM, and returns the best.
func growBisection(g *wgraph, frac0, ub float64, ntries int, s *rng.Stream) []int32 {
	n := g.n
	load := scalarLoad(g)
	frac1 := 1 - frac0
	max1 := ub * frac1
	min1 := frac1 / ub
	var best []int32
	bestCut := int64(-1)
	bestBal := math.Inf(1)
	where := make([]int32, n)
	touched := make([]bool, n)
	queue := make([]int32, 0, n)
	for try := 0; try < ntries; try++ {
		for i := range where {
			where[i] = 1
			touched[i] = false
		}
		pw0, pw1 := 0.0, 1.0
		start := int32(s.Below(uint64(n)))
		queue = append(queue[:0], start)
		touched[start] = true
		nleft := n - 1
		first := 0
		drain := false
		for {
			if first == len(queue) {
				// Disconnected: restart from a random untouched vertex.
				if nleft == 0 || drain {
					break
				}
				k := int(s.Below(uint64(nleft)))
				var i int32
				for i = 0; int(i) < n; i++ {
					if !touched[i] {
						if k == 0 {
							break
						}
						k--
					}
				}
				queue = append(queue[:0], i)
				first = 0
				touched[i] = true
				nleft--
			}
			i := queue[first]
			first++
			if pw0 > 0 && pw1-load[i] < min1 {
				drain = true
				continue
			}
			where[i] = 0
			pw0 += load[i]
			pw1 -= load[i]
			if pw1 <= max1 {
				break
			}
			drain = false
			for _, k := range g.adj[g.xadj[i]:g.xadj[i+1]] {
				if !touched[k] {
					touched[k] = true
					queue = append(queue, k)
					nleft--
				}
			}
		}
		b := newBisection(g, where, frac0, ub)
		if b.pw[0] == 0 && n > 1 {
			b.where[s.Below(uint64(n))] = 0
			b.compute()
		}
		if b.pw[b.ncon] == 0 && n > 1 {
			b.where[s.Below(uint64(n))] = 1
			b.compute()
		}
		b.balance(s)
		b.fmRefine(growFMIters, s)
		bal := max(b.imbalance(), 0)
		if best == nil || bal < bestBal || (bal == bestBal && b.cut < bestCut) {
			best = append(best[:0], where...)
			bestCut, bestBal = b.cut, bal
			if bestCut == 0 && bal == 0 {
				break
			}
		}
	}
	return best
}

// mlBisect bisects g into sides of weight fractions frac0 and 1-frac0
// (within ub), multilevel, keeping the best of ncuts runs. The runs are
// independent (each has its own random stream) and run in parallel; the
// best is chosen by scanning them in order, so the result does not depend
// on scheduling.
func mlBisect(g *wgraph, frac0, ub float64, ncuts int, key uint64) []int32 {
	maxvw := make([]int64, g.ncon)
	for c := range maxvw {
		maxvw[c] = max(int64(1.5*float64(g.tvw[c])/bisectCoarsenTo), 1)
	}
	type run struct {
		where []int32
		cut   int64
		bal   float64
	}
	runs := make([]run, ncuts)
	one := func(i int) {
		k := rng.Derive(key, uint64(i))
		levels := coarsen(g, bisectCoarsenTo, maxvw, rng.Derive(k, 1), g.ew == nil, nil)
		s := rng.NewStream(rng.Derive(k, 2))
		cg := levels[len(levels)-1].g
		ntries := largeNTries
		if cg.n <= bisectCoarsenTo {
			ntries = smallNTries
		}
		where := growBisection(cg, frac0, ub, ntries, &s)
		var b *bisection
		for l := len(levels) - 1; ; l-- {
			b = newBisection(levels[l].g, where, frac0, ub)
			b.balance(&s)
			b.fmRefine(fmIters, &s)
			if l == 0 {
				break
			}
			where = project(levels[l-1].cmap, b.where)
			levels[l] = level{}
		}
		runs[i] = run{b.where, b.cut, b.imbalance()}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, workers())
	for i := range runs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			one(i)
		})
	}
	wg.Wait()
	best := 0
	for i := 1; i < ncuts && runs[best].cut > 0; i++ {
		r, b := runs[i], runs[best]
		if (r.bal <= 0.0005 && r.cut < b.cut) || (b.bal > 0.0005 && r.bal < b.bal) {
			best = i
		}
	}
	return runs[best].where
}

// project maps a coarse partition to the finer level through cmap.
func project(cmap, coarse []int32) []int32 {
	fine := make([]int32, len(cmap))
	parallelFor(len(cmap), 1<<15, func(lo, hi int) {
		for v := lo; v < hi; v++ {
			fine[v] = coarse[cmap[v]]
		}
	})
	return fine
}

// subgraph returns the subgraph of g induced by the vertices with
// side[v] == s, and the map from its vertices to g's.
func subgraph(g *wgraph, side []int32, s int32) (*wgraph, []int32) {
	newID := make([]int32, g.n)
	var orig []int32
	for v := 0; v < g.n; v++ {
		if side[v] == s {
			newID[v] = int32(len(orig))
			orig = append(orig, int32(v))
		} else {
			newID[v] = -1
		}
	}
	h := &wgraph{n: len(orig), ncon: g.ncon, xadj: make([]int64, len(orig)+1), vw: make([]int32, len(orig)*g.ncon)}
	for i, v := range orig {
		var d int64
		for _, u := range g.adj[g.xadj[v]:g.xadj[v+1]] {
			if side[u] == s {
				d++
			}
		}
		h.xadj[i+1] = h.xadj[i] + d
		copy(h.vw[i*g.ncon:(i+1)*g.ncon], g.vw[int(v)*g.ncon:(int(v)+1)*g.ncon])
	}
	h.adj = make([]int32, h.xadj[h.n])
	h.ew = make([]int32, h.xadj[h.n])
	p := 0
	for _, v := range orig {
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			if u := g.adj[e]; side[u] == s {
				h.adj[p] = newID[u]
				h.ew[p] = g.ewt(e)
				p++
			}
		}
	}
	h.setTotals()
	return h, orig
}

// recursiveBisect partitions g into len(tpw) parts with target fractions
// tpw (summing to about 1), writing part first+i into out for g's
// vertices; ub is the tolerance of each bisection.
func recursiveBisect(g *wgraph, tpw []float64, ub float64, ncuts int, out []int32, first int32, key uint64) {
	recursiveBisectDepth(g, tpw, ub, ncuts, out, first, key, 0)
}

// parallelRBDepth is how many levels of the recursion run their two halves
// concurrently: enough to keep a few cores busy, few enough that only a
// few subgraphs of each size are alive at once.
const parallelRBDepth = 2

func recursiveBisectDepth(g *wgraph, tpw []float64, ub float64, ncuts int, out []int32, first int32, key uint64, depth int) {
	k := len(tpw)
	if k == 1 || g.n == 0 {
		for i := range out {
			out[i] = first
		}
		return
	}
	k0 := k / 2
	var s0, sum float64
	for i, t := range tpw {
		if i < k0 {
			s0 += t
		}
		sum += t
	}
	side := mlBisect(g, s0/sum, ub, ncuts, rng.Derive(key, 0))
	if k == 2 {
		for v, s := range side {
			out[v] = first + s
		}
		return
	}
	// The two halves are independent: near the top, partition them in
	// parallel.
	var wg sync.WaitGroup
	for s := int32(0); s < 2; s++ {
		lo, hi, f := 0, k0, first
		if s == 1 {
			lo, hi, f = k0, k, first+int32(k0)
		}
		half := func() {
			h, orig := subgraph(g, side, s)
			sub := make([]int32, h.n)
			recursiveBisectDepth(h, tpw[lo:hi], ub, ncuts, sub, f, rng.Derive(key, uint64(s)+1), depth+1)
			for i, v := range orig {
				out[v] = sub[i]
			}
		}
		if depth < parallelRBDepth {
			wg.Go(half)
		} else {
			half()
		}
	}
	wg.Wait()
}
