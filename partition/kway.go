package partition

import (
	"math"

	"github.com/strata-gnn/strata/internal/rng"
)

// K-way refinement: greedy moves of boundary vertices to the neighboring
// part that gains the most, best candidates first (a priority queue keyed
// by ed - id), under per-part weight limits for every constraint; plus
// balancing passes that move vertices out of overweight parts.

const (
	kwayIters       = 10 // refinement passes per level
	balanceSlack    = 0.02
	statNotPresent  = 0
	statPresent     = 1
	statExtracted   = 2
	modeRefine      = 0
	modeBalance     = 1
	forceBalanceCap = 4 // forced-balancing rounds at the end
)

type kway struct {
	k, ncon int
	tpw     []float64 // target fraction of every part
	ub      []float64 // tolerance of every constraint

	g       *wgraph
	where   []int32
	id, ed  []int32
	pw      []int64   // k*ncon part weights
	tgt     []float64 // k*ncon target weights
	maxpw   []float64 // k*ncon limits of the current pass
	minpw   []float64
	cut     int64
	nnb     []int32   // number of other parts each vertex connects to
	invSqrt []float64 // 1/sqrt(i)

	conn    []int32 // k, scratch
	touched []int32
	status  []uint8
	upd     []int32
	pq      *pqueue
	cand    []int32
	s       rng.Stream
}

func newKway(k int, tpw, ub []float64, nmax, ncon int, key uint64) *kway {
	return &kway{k: k, ncon: ncon, tpw: tpw, ub: ub,
		pw: make([]int64, k*ncon), tgt: make([]float64, k*ncon),
		maxpw: make([]float64, k*ncon), minpw: make([]float64, k*ncon),
		conn: make([]int32, k), status: make([]uint8, nmax), pq: newPQueue(nmax),
		s: rng.NewStream(key)}
}

// setLevel installs g and its partition, computing gains (in parallel: each
// vertex's id/ed is one scan of its own edges), part weights and the cut.
func (r *kway) setLevel(g *wgraph, where []int32) {
	r.g, r.where = g, where
	if cap(r.id) >= g.n {
		r.id, r.ed, r.nnb = r.id[:g.n], r.ed[:g.n], r.nnb[:g.n]
	} else {
		r.id, r.ed, r.nnb = make([]int32, g.n), make([]int32, g.n), make([]int32, g.n)
	}
	if r.invSqrt == nil {
		r.invSqrt = make([]float64, r.k+1)
		for i := 1; i <= r.k; i++ {
			r.invSqrt[i] = 1 / math.Sqrt(float64(i))
		}
	}
	parallelFor(g.n, 1<<13, func(lo, hi int) {
		mark := make([]int32, r.k)
		for v := lo; v < hi; v++ {
			p := where[v]
			var id, ed, nn int32
			stamp := int32(v - lo + 1)
			for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
				w := int32(1)
				if g.ew != nil {
					w = g.ew[e]
				}
				q := where[g.adj[e]]
				if q == p {
					id += w
				} else {
					ed += w
					if mark[q] != stamp {
						mark[q] = stamp
						nn++
					}
				}
			}
			r.id[v], r.ed[v], r.nnb[v] = id, ed, nn
		}
	})
	clear(r.pw)
	var cut int64
	for v := 0; v < g.n; v++ {
		p := int(where[v])
		for c := 0; c < r.ncon; c++ {
			r.pw[p*r.ncon+c] += int64(g.vw[v*r.ncon+c])
		}
		cut += int64(r.ed[v])
	}
	r.cut = cut / 2
	for p := 0; p < r.k; p++ {
		for c := 0; c < r.ncon; c++ {
			r.tgt[p*r.ncon+c] = r.tpw[p] * float64(g.tvw[c])
		}
	}
}

// ratio returns pw/target for part p, constraint c (0/0 = 0, x/0 = +Inf).
func (r *kway) ratio(i int, pw int64) float64 {
	if r.tgt[i] > 0 {
		return float64(pw) / r.tgt[i]
	}
	if pw > 0 {
		return math.Inf(1)
	}
	return 0
}

// load is the largest ratio of part p over constraints, with delta times
// v's weights added (delta = -1 removes v, 0 leaves p as is).
func (r *kway) load(p int32, v int32, delta int64) float64 {
	l := 0.0
	for c := 0; c < r.ncon; c++ {
		i := int(p)*r.ncon + c
		l = max(l, r.ratio(i, r.pw[i]+delta*int64(r.g.vw[int(v)*r.ncon+c])))
	}
	return l
}

// imbalance returns the largest pw/target - ub (<= 0 when balanced).
func (r *kway) imbalance() float64 {
	d := math.Inf(-1)
	for p := 0; p < r.k; p++ {
		for c := 0; c < r.ncon; c++ {
			i := p*r.ncon + c
			d = max(d, r.ratio(i, r.pw[i])-r.ub[c])
		}
	}
	return d
}

// setLimits sets the per-part weight windows target*ub .. target/ub. They
// stay fixed whatever the current imbalance: refinement may overfill a
// part only by its gain-proportional slack, so passes cannot ratchet the
// imbalance up level after level.
func (r *kway) setLimits() {
	for c := 0; c < r.ncon; c++ {
		u := r.ub[c]
		for p := 0; p < r.k; p++ {
			i := p*r.ncon + c
			r.maxpw[i] = r.tgt[i] * u
			r.minpw[i] = r.tgt[i] / u
		}
	}
}

func (r *kway) fits(p, v int32) bool {
	for c := 0; c < r.ncon; c++ {
		i := int(p)*r.ncon + c
		if float64(r.pw[i]+int64(r.g.vw[int(v)*r.ncon+c])) > r.maxpw[i] {
			return false
		}
	}
	return true
}

func (r *kway) keepsMin(p, v int32) bool {
	for c := 0; c < r.ncon; c++ {
		i := int(p)*r.ncon + c
		if float64(r.pw[i]-int64(r.g.vw[int(v)*r.ncon+c])) < r.minpw[i] {
			return false
		}
	}
	return true
}

func (r *kway) overweight(p int32) bool {
	for c := 0; c < r.ncon; c++ {
		i := int(p)*r.ncon + c
		if float64(r.pw[i]) > r.maxpw[i] {
			return true
		}
	}
	return false
}

// excessDelta is the change, from moving v from part a to part b, of the
// total amount by which part weights exceed their limits (each normalized
// by its target).
func (r *kway) excessDelta(v, a, b int32) float64 {
	var d float64
	for c := 0; c < r.ncon; c++ {
		w := float64(r.g.vw[int(v)*r.ncon+c])
		if w == 0 {
			continue
		}
		i, j := int(a)*r.ncon+c, int(b)*r.ncon+c
		fa, fb := float64(r.pw[i])-r.maxpw[i], float64(r.pw[j])-r.maxpw[j]
		if r.tgt[i] > 0 {
			d += (max(fa-w, 0) - max(fa, 0)) / r.tgt[i]
		}
		if r.tgt[j] > 0 {
			d += (max(fb+w, 0) - max(fb, 0)) / r.tgt[j]
		}
	}
	return d
}

// relieves reports whether moving v out of p lowers a constraint on which
// p is overweight.
func (r *kway) relieves(p, v int32) bool {
	for c := 0; c < r.ncon; c++ {
		i := int(p)*r.ncon + c
		if float64(r.pw[i]) > r.maxpw[i] && r.g.vw[int(v)*r.ncon+c] > 0 {
			return true
		}
	}
	return false
}

func (r *kway) underweight(p int32) bool {
	for c := 0; c < r.ncon; c++ {
		i := int(p)*r.ncon + c
		if float64(r.pw[i]) < r.minpw[i] {
			return true
		}
	}
	return false
}

// gatherConn fills conn[p] with v's edge weight into every other part p
// and lists those parts in touched; clearConn undoes it.
func (r *kway) gatherConn(v int32) {
	g := r.g
	where, conn := r.where, r.conn
	from := where[v]
	touched := r.touched[:0]
	lo, hi := g.xadj[v], g.xadj[v+1]
	if g.ew == nil {
		for _, u := range g.adj[lo:hi] {
			if p := where[u]; p != from {
				if conn[p] == 0 {
					touched = append(touched, p)
				}
				conn[p]++
			}
		}
	} else {
		ew := g.ew[lo:hi]
		for i, u := range g.adj[lo:hi] {
			if p := where[u]; p != from {
				if conn[p] == 0 {
					touched = append(touched, p)
				}
				conn[p] += ew[i]
			}
		}
	}
	r.touched = touched
}

func (r *kway) clearConn() {
	for _, p := range r.touched {
		r.conn[p] = 0
	}
}

// choose picks the part v should move to, or -1 (conn must be gathered).
// Refinement takes the connected part with the most edge weight among
// those with a non-negative gain that stay within their limit (plus
// ffactor times the gain: at coarse levels a large gain may overfill a
// part a little); ties go to the lighter part. A zero-gain move is made
// only if it improves balance, or on every other extraction (odd) to let
// the search drift across plateaus. Balancing takes the least loaded
// connected part that can take v or is lighter than v's part; a losing
// move is made only if v's part is overweight or the target underweight.
func (r *kway) choose(v int32, mode int, ffactor float64, odd bool) int32 {
	from := r.where[v]
	best := int32(-1)
	bestLoad := 0.0
	if mode == modeRefine {
		id := r.id[v]
		for _, p := range r.touched {
			cp := r.conn[p]
			if cp < id {
				continue
			}
			if best >= 0 && cp < r.conn[best] {
				continue
			}
			if !r.fitsSlack(p, v, ffactor*float64(cp-id)) {
				continue
			}
			lp := r.load(p, 0, 0)
			if best < 0 || cp > r.conn[best] || lp < bestLoad {
				best, bestLoad = p, lp
			}
		}
		if best < 0 {
			return -1
		}
		if r.conn[best] == id && !odd && !r.overweight(from) && !(r.load(best, v, 1) < r.load(from, 0, 0)) {
			return -1
		}
		return best
	}
	fromLoad := r.load(from, 0, 0)
	ok := false
	for _, p := range r.touched {
		lp := r.load(p, 0, 0)
		if !ok && (r.fits(p, v) || r.load(p, v, 1) <= fromLoad) {
			ok = true
		}
		if best < 0 || lp < bestLoad {
			best, bestLoad = p, lp
		}
	}
	if !ok {
		return -1
	}
	if !r.overweight(from) && !r.underweight(best) && r.conn[best] < r.id[v] {
		return -1
	}
	return best
}

// fitsSlack is fits with extra room: slack weight units on a single
// constraint (none with several, whose units are not comparable).
func (r *kway) fitsSlack(p, v int32, slack float64) bool {
	if r.ncon > 1 {
		slack = 0
	}
	for c := 0; c < r.ncon; c++ {
		i := int(p)*r.ncon + c
		if float64(r.pw[i]+int64(r.g.vw[int(v)*r.ncon+c])) > r.maxpw[i]+slack {
			return false
		}
	}
	return true
}

// qualifies says whether v belongs in the queue: in refinement a vertex
// whose external weight is at least its internal one; in balancing any
// vertex with external edges.
func (r *kway) qualifies(v int32, mode int) bool {
	if mode == modeRefine {
		return r.ed[v] > 0 && r.ed[v] >= r.id[v]
	}
	return r.ed[v] > 0
}

// key is the queue priority of v: its external weight discounted by the
// square root of the number of parts it connects to (a vertex whose
// outside edges all go to one part is the better move), minus its
// internal weight; fixed point with 10 fractional bits. nnb may be stale
// for vertices whose neighbors moved since it was computed: it only
// orders the queue.
func (r *kway) key(v int32) int64 {
	nn := min(max(r.nnb[v], 1), int32(r.k))
	return int64((float64(r.ed[v])*r.invSqrt[nn] - float64(r.id[v])) * 1024)
}

// move moves v to part to, whose connection weight is connTo, updating
// gains, weights, the cut and the queue entries of v's neighbors.
func (r *kway) move(v, to int32, connTo int32, mode int) {
	g := r.g
	from := r.where[v]
	r.cut -= int64(connTo - r.id[v])
	for c := 0; c < r.ncon; c++ {
		w := int64(g.vw[int(v)*r.ncon+c])
		r.pw[int(from)*r.ncon+c] -= w
		r.pw[int(to)*r.ncon+c] += w
	}
	// v now connects to the parts it touched except to, plus from if it
	// had edges there.
	nn := int32(len(r.touched))
	if connTo > 0 {
		nn--
	}
	if r.id[v] > 0 {
		nn++
	}
	r.nnb[v] = nn
	r.where[v] = to
	r.ed[v] += r.id[v] - connTo
	r.id[v] = connTo
	for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
		u := g.adj[e]
		w := g.ewt(e)
		switch r.where[u] {
		case from:
			r.id[u] -= w
			r.ed[u] += w
		case to:
			r.id[u] += w
			r.ed[u] -= w
		default:
			continue
		}
		switch r.status[u] {
		case statPresent:
			if r.qualifies(u, mode) {
				r.pq.update(u, r.key(u))
			} else {
				r.pq.remove(u)
				r.status[u] = statNotPresent
			}
		case statNotPresent:
			if r.qualifies(u, mode) {
				r.pq.insert(u, r.key(u))
				r.status[u] = statPresent
				r.upd = append(r.upd, u)
			}
		}
	}
}

// pass runs one greedy pass in the given mode and returns the number of
// moves.
func (r *kway) pass(mode int, ffactor float64) int {
	g := r.g
	r.setLimits()
	r.cand = r.cand[:0]
	for v := int32(0); int(v) < g.n; v++ {
		if r.qualifies(v, mode) {
			r.cand = append(r.cand, v)
		}
	}
	shuffle(r.cand, &r.s)
	r.upd = r.upd[:0]
	for _, v := range r.cand {
		r.pq.insert(v, r.key(v))
		r.status[v] = statPresent
		r.upd = append(r.upd, v)
	}
	nmoved := 0
	for iter := 0; ; iter++ {
		if mode == modeBalance && iter&1023 == 0 && r.imbalance() <= 0 {
			break
		}
		v := r.pq.pop()
		if v < 0 {
			break
		}
		r.status[v] = statExtracted
		r.gatherConn(v)
		to := r.choose(v, mode, ffactor, iter%2 == 1)
		if to < 0 {
			r.clearConn()
			continue
		}
		r.move(v, to, r.conn[to], mode)
		r.clearConn()
		nmoved++
	}
	for _, u := range r.upd {
		r.status[u] = statNotPresent
	}
	r.pq.reset()
	return nmoved
}

// refine runs up to niter refinement passes, stopping when a pass moves
// nothing or leaves the cut unchanged.
func (r *kway) refine(niter int, ffactor float64) {
	for it := 0; it < niter; it++ {
		old := r.cut
		if r.pass(modeRefine, ffactor) == 0 || r.cut == old {
			break
		}
	}
}

// balance runs up to niter balancing passes while some part is over its
// limit, then forces balance if boundary moves could not reach it.
func (r *kway) balance(niter int) {
	for it := 0; it < niter && r.imbalance() > 0; it++ {
		if r.pass(modeBalance, 0) == 0 {
			break
		}
	}
	for it := 0; it < forceBalanceCap && r.imbalance() > 0; it++ {
		if r.forceBalance() == 0 {
			break
		}
	}
}

// forceBalance moves vertices of overweight parts, interior ones too, to
// the best part that can take them: the connected part with the most edge
// weight if one fits, else the least loaded part that fits. Vertices with
// the best gain go first.
func (r *kway) forceBalance() int {
	g := r.g
	r.setLimits()
	r.cand = r.cand[:0]
	for v := int32(0); int(v) < g.n; v++ {
		if r.overweight(r.where[v]) {
			r.cand = append(r.cand, v)
		}
	}
	shuffle(r.cand, &r.s)
	r.upd = r.upd[:0]
	for _, v := range r.cand {
		r.pq.insert(v, r.key(v))
		r.status[v] = statPresent
		r.upd = append(r.upd, v)
	}
	moved := 0
	defer func() {
		for _, u := range r.upd {
			r.status[u] = statNotPresent
		}
		r.pq.reset()
	}()
	for {
		v := r.pq.pop()
		if v < 0 {
			break
		}
		r.status[v] = statExtracted
		from := r.where[v]
		if !r.relieves(from, v) {
			continue
		}
		r.gatherConn(v)
		best := int32(-1)
		for _, p := range r.touched {
			if r.fits(p, v) && (best < 0 || r.conn[p] > r.conn[best]) {
				best = p
			}
		}
		if best < 0 {
			bl := 0.0
			for p := int32(0); int(p) < r.k; p++ {
				if p != from && r.fits(p, v) {
					if l := r.load(p, 0, 0); best < 0 || l < bl {
						best, bl = p, l
					}
				}
			}
		}
		if best < 0 && r.ncon > 1 {
			// Constraints pulling in opposite directions: no part takes v
			// within every limit, so accept the move that lowers the total
			// excess the most (a strict decrease, so this ends).
			bd := 0.0
			for p := int32(0); int(p) < r.k; p++ {
				if p != from {
					if d := r.excessDelta(v, from, p); d < bd {
						best, bd = p, d
					}
				}
			}
		}
		if best < 0 {
			r.clearConn()
			continue
		}
		r.move(v, best, r.conn[best], modeBalance)
		r.clearConn()
		moved++
	}
	return moved
}
