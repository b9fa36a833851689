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

// floydSorted keeps the chosen set in a sorted slice: O(k log k) compares
// and O(k^2) moves, best for small k.
func (p *picker) floydSorted(key uint64, n, k uint64) []uint64 {
	st := rng.NewStream(key)
	sel := p.sel[:0]
	for j := n - k; j < n; j++ {
		t := st.Below(j + 1)
		i, found := slices.BinarySearch(sel, t)
		if found {
			// Every position chosen so far is < j, so j goes last.
			sel = append(sel, j)
			continue
		}
		sel = slices.Insert(sel, i, t)
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

// less orders by key, then position, so ties (practically impossible) are
// still deterministic.
func (a keyed) less(b keyed) bool { return a.key < b.key || (a.key == b.key && a.pos < b.pos) }

// weightedNoReplace draws k distinct positions with positive weight,
// 0 < k < (number of positive weights), by exponential keys (Efraimidis &
// Spirakis A-ES, in log form): position j gets key E_j / w_j with E_j =
// -log U_j, U_j from draw j of the stream, and the k smallest keys win. This
// is exactly successive sampling proportional to weight without
// replacement. O(n log k); positions come out sorted.
func (p *picker) weightedNoReplace(key uint64, w []float32, k int) []uint64 {
	h := p.heap[:0] // max-heap on key: the root is the worst of the best k
	for j, wj := range w {
		if wj <= 0 {
			continue
		}
		u := float64(rng.Hash(key, uint64(j))>>11+1) * (1.0 / (1 << 53))
		c := keyed{-math.Log(u) / float64(wj), uint64(j)}
		if len(h) < k {
			h = append(h, c)
			siftUp(h, len(h)-1)
		} else if c.less(h[0]) {
			h[0] = c
			siftDown(h, 0)
		}
	}
	p.heap = h
	sel := p.sel[:0]
	for _, c := range h {
		sel = append(sel, c.pos)
	}
	slices.Sort(sel)
	p.sel = sel
	return sel
}

func siftUp(h []keyed, i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h[parent].less(h[i]) {
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
		big := l
		if r := l + 1; r < len(h) && h[l].less(h[r]) {
			big = r
		}
		if !h[i].less(h[big]) {
			return
		}
		h[i], h[big] = h[big], h[i]
		i = big
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
