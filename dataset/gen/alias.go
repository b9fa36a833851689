package gen

import (
	"math"
	"math/bits"
)

// slot is one entry of a Walker/Vose alias table: a draw picks a slot i
// uniformly, then returns item with probability thr/2^32 and alias
// otherwise. item and alias are node IDs (or class IDs) directly, so a draw
// touches one 12-byte slot.
type slot struct {
	item, alias int32
	thr         uint32
}

// buildAlias fills out (len(items)) with an alias table drawing items[i]
// with probability w[i]/sum(w). Vose's method in a fixed order, so the
// table is a pure function of its inputs. If every weight is zero the draw
// is uniform.
func buildAlias(out []slot, items []int32, w []float64) {
	n := len(items)
	if n == 0 {
		return
	}
	var sum float64
	for _, x := range w {
		sum += x
	}
	q := make([]float64, n)
	for i := range q {
		if sum > 0 {
			q[i] = w[i] * float64(n) / sum
		} else {
			q[i] = 1
		}
	}
	small := make([]int32, 0, n)
	large := make([]int32, 0, n)
	for i := n - 1; i >= 0; i-- {
		if q[i] < 1 {
			small = append(small, int32(i))
		} else {
			large = append(large, int32(i))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s := small[len(small)-1]
		small = small[:len(small)-1]
		l := large[len(large)-1]
		out[s] = slot{item: items[s], alias: items[l], thr: probToThr(q[s])}
		q[l] -= 1 - q[s]
		if q[l] < 1 {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	// Leftovers have q == 1 up to rounding: they always keep their item.
	for _, i := range large {
		out[i] = slot{item: items[i], alias: items[i], thr: math.MaxUint32}
	}
	for _, i := range small {
		out[i] = slot{item: items[i], alias: items[i], thr: math.MaxUint32}
	}
}

func probToThr(p float64) uint32 {
	if p <= 0 {
		return 0
	}
	if p >= 1 {
		return math.MaxUint32
	}
	return uint32(p * (1 << 32))
}

// draw picks from table t with one random word: the high half of h*len
// selects the slot, the low half (uniform and independent of the slot to
// within 2^-32) is compared with its threshold.
func draw(t []slot, h uint64) int32 {
	i, frac := bits.Mul64(h, uint64(len(t)))
	s := &t[i]
	if uint32(frac>>32) < s.thr {
		return s.item
	}
	return s.alias
}
