package sample

import (
	"math"
	"math/bits"
	"slices"

	"github.com/strata-gnn/strata/internal/rng"
)

// The per-node selection rules. Each takes the node's random stream key and
// returns local positions in its row (0 <= pos < degree); the set drawn is
// a pure function of (key, degree, fanout[, weights]).

// picker is one goroutine's scratch.
type picker struct {
	sel  []uint64 // chosen positions
	bits []uint64 // membership bitmap for large fanouts
	heap []keyed  // weighted without replacement
}

// uniformNoReplace draws k distinct positions of [0, n), 0 < k < n, by
// Floyd's algorithm: k random draws, O(k) memory, whatever n is. The
// positions come out sorted. Membership is kept in a sorted slice for small
// k and in a bitmap for large k; both make the same decisions, so the drawn
// set does not depend on which is used.
func (p *picker) uniformNoReplace(key uint64, n, k uint64) []uint64 {
	if k > 64 && n/64 <= 16*k {
		return p.floydBitmap(key, n, k)
	}
	return p.floydSorted(key, n, k)
}

// floydSorted keeps the chosen set in a sorted slice, inserting by a
// linear scan from the end: O(k^2) in the worst case but branch-light and
// fastest for small fanouts (<= 64); uniformNoReplace also uses it when n
// is so much larger than k that a bitmap would cost more.
func (p *picker) floydSorted(key uint64, n, k uint64) []uint64 {
	st := rng.NewStream(key)
	sel := p.sel[:0]
	for j := n - k; j < n; j++ {
		t := st.Below(j + 1)
		i := len(sel)
		for i > 0 && sel[i-1] > t {
			i--
		}
		if i > 0 && sel[i-1] == t {
			// Every position chosen so far is < j, so j goes last.
			sel = append(sel, j)
			continue
		}
		sel = append(sel, 0)
		copy(sel[i+1:], sel[i:])
		sel[i] = t
	}
	p.sel = sel
	return sel
}

// floydBitmap keeps the chosen set in an n-bit bitmap: O(k + n/64), best
// for large k when n is not much larger.
func (p *picker) floydBitmap(key uint64, n, k uint64) []uint64 {
	st := rng.NewStream(key)
	words := (n + 63) / 64
	if uint64(cap(p.bits)) < words {
		p.bits = make([]uint64, words)
	}
	b := p.bits[:words]
	clear(b)
	for j := n - k; j < n; j++ {
		t := st.Below(j + 1)
		if b[t/64]&(1<<(t%64)) != 0 {
			t = j
		}
		b[t/64] |= 1 << (t % 64)
	}
	sel := p.sel[:0]
	for w, x := range b {
		for x != 0 {
			sel = append(sel, uint64(w)*64+uint64(bits.TrailingZeros64(x)))
			x &= x - 1
		}
	}
	p.sel = sel
	return sel
}

// uniformReplace draws k positions of [0, n) independently, in draw order.
func (p *picker) uniformReplace(key uint64, n, k uint64) []uint64 {
	st := rng.NewStream(key)
	sel := p.sel[:0]
	for range k {
		sel = append(sel, st.Below(n))
	}
	p.sel = sel
	return sel
}

// aliasReplace draws k positions with probability proportional to weight,
// independently, from the row's alias table (prob, alias), in draw order.
// One random word per draw: its multiply-high by n picks the column and the
// low half of the product (uniform given the column) is the coin.
func (p *picker) aliasReplace(key uint64, prob []float32, alias []int32, k uint64) []uint64 {
	st := rng.NewStream(key)
	n := uint64(len(prob))
	sel := p.sel[:0]
	for range k {
		col, frac := bits.Mul64(st.Uint64(), n)
		coin := float32(frac>>40) * (1.0 / (1 << 24))
		if coin >= prob[col] {
			col = uint64(alias[col])
		}
		sel = append(sel, col)
	}
	p.sel = sel
	return sel
}

type keyed struct {
	key float64
	pos uint64
}

// weaker orders reservoir entries: smaller key first, ties (practically
// impossible) broken by position so the result stays deterministic.
func (a keyed) weaker(b keyed) bool { return a.key < b.key || (a.key == b.key && a.pos > b.pos) }

// weightedNoReplace draws k distinct positions with positive weight,
// 0 < k < (number of positive weights), with the law of successive
// sampling proportional to weight without replacement: the first is drawn
// with probability w_i/W, the next proportional to weight among the rest,
// and so on.
//
// Each step draws from the row's alias table and rejects positions already
// chosen, which is exactly a draw proportional to weight among the rest:
// O(1) per draw, about k draws when no few entries dominate the weight.
// After 4k+16 draws in all it finishes with expJ over the positions not yet
// chosen. That switch keeps the law exact: which position a run of i.i.d.
// draws first accepts is independent of how many draws were rejected
// before it. Positions come out sorted.
func (p *picker) weightedNoReplace(key uint64, w, prob []float32, alias []int32, k int) []uint64 {
	st := rng.NewStream(key)
	n := uint64(len(w))
	sel := p.sel[:0]
	for budget := 4*k + 16; len(sel) < k && budget > 0; budget-- {
		col, frac := bits.Mul64(st.Uint64(), n)
		if float32(frac>>40)*(1.0/(1<<24)) >= prob[col] {
			col = uint64(alias[col])
		}
		i := len(sel)
		for i > 0 && sel[i-1] > col {
			i--
		}
		if i > 0 && sel[i-1] == col {
			continue // already chosen: reject
		}
		sel = append(sel, 0)
		copy(sel[i+1:], sel[i:])
		sel[i] = col
	}
	if len(sel) < k {
		sel = p.expJ(&st, w, sel, k-len(sel))
	}
	p.sel = sel
	return sel
}

// expJ adds m positions to the sorted set sel, drawn by successive
// sampling proportional to weight among the positive-weight positions not
// in sel (at least m of them must exist). It is Efraimidis & Spirakis'
// A-ExpJ in log form: position j has key log(U_j)/w_j and the m largest keys
// win (A-ES); instead of a key per position, the reservoir's weakest key T
// fixes how much weight X = log(U)/T to skip before the next entry, whose
// key is then drawn conditioned on beating T. O(n) additions but only
// O(m log(n/m)) random draws and logarithms. Returns sel, still sorted.
func (p *picker) expJ(st *rng.Stream, w []float32, sel []uint64, m int) []uint64 {
	h := p.heap[:0] // min-heap: the root is the weakest of the best m
	s := 0          // next element of sel not yet passed
	excluded := func(j int) bool {
		if w[j] <= 0 {
			return true
		}
		for s < len(sel) && sel[s] < uint64(j) {
			s++
		}
		return s < len(sel) && sel[s] == uint64(j)
	}
	j := 0
	for ; j < len(w) && len(h) < m; j++ {
		if !excluded(j) {
			h = append(h, keyed{math.Log(st.OpenFloat64()) / float64(w[j]), uint64(j)})
			siftUp(h, len(h)-1)
		}
	}
	t := h[0].key
	skip := math.Log(st.OpenFloat64()) / t
	for ; j < len(w) && t < 0; j++ {
		if excluded(j) {
			continue
		}
		wj := float64(w[j])
		if skip -= wj; skip > 0 {
			continue
		}
		// Position j enters with a key drawn from U^(1/wj) given > T:
		// log(U) uniform on (T*wj, 0] in U-space, i.e.
		// log(exp(a) + V*(1-exp(a))) with a = T*wj, written with
		// expm1/log1p so that keys near 0 keep their precision.
		h[0] = keyed{math.Log1p(math.Expm1(t*wj)*st.OpenFloat64()) / wj, uint64(j)}
		siftDown(h, 0)
		t = h[0].key
		skip = math.Log(st.OpenFloat64()) / t
	}
	p.heap = h
	for _, c := range h {
		sel = append(sel, c.pos)
	}
	slices.Sort(sel)
	return sel
}

func siftUp(h []keyed, i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h[i].weaker(h[parent]) {
			return
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
}

func siftDown(h []keyed, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].weaker(h[l]) {
			m = r
		}
		if !h[m].weaker(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// aliasScratch is one goroutine's scratch for building alias tables.
type aliasScratch struct {
	rem          []float64
	small, large []int32
}

// buildAlias fills prob and alias (one entry per weight) with Vose's alias
// table for w: column i keeps itself with probability prob[i] and otherwise
// yields alias[i]. Zero weights get prob 0 and an alias with positive
// weight, so they are never drawn. A row whose weights sum to 0 is left
// all-zero (the sampler never draws from it).
func (a *aliasScratch) buildAlias(w []float32, prob []float32, alias []int32) {
	n := len(w)
	var total float64
	firstPos := int32(-1)
	for i, x := range w {
		total += float64(x)
		if x > 0 && firstPos < 0 {
			firstPos = int32(i)
		}
	}
	if total <= 0 {
		clear(prob)
		clear(alias)
		return
	}
	// Remainders n*w/total are tracked in float64 so rounding stays out of
	// the pairing; prob keeps the final float32.
	if cap(a.rem) < n {
		a.rem = make([]float64, n)
	}
	rem := a.rem[:n]
	small, large := a.small[:0], a.large[:0]
	for i, x := range w {
		rem[i] = float64(x) * float64(n) / total
		alias[i] = int32(i)
		if rem[i] < 1 {
			small = append(small, int32(i))
		} else {
			large = append(large, int32(i))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s := small[len(small)-1]
		small = small[:len(small)-1]
		l := large[len(large)-1]
		prob[s] = float32(rem[s])
		alias[s] = l
		rem[l] -= 1 - rem[s]
		if rem[l] < 1 {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	// Whatever is left holds probability 1 up to rounding.
	for _, i := range large {
		prob[i] = 1
	}
	for _, i := range small {
		if w[i] > 0 {
			prob[i] = 1
		} else {
			prob[i], alias[i] = 0, firstPos
		}
	}
	a.small, a.large = small, large
}
