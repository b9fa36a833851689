package infer

import "math/bits"

// rankIndex finds a node's position in a sorted list of distinct nodes
// in constant time: a bit a node, and the count of set bits before each
// word. At papers100M's size it takes 21 MB and replaces a binary search
// over a list of 110M nodes (27 cache misses a lookup) for every source
// of every chunk.
type rankIndex struct {
	bits   []uint64
	before []int32 // set bits in the words before
}

// newRankIndex indexes sorted, a strictly increasing list of nodes in
// [0, n).
func newRankIndex(n int, sorted []int32) *rankIndex {
	x := &rankIndex{bits: make([]uint64, (n+63)/64), before: make([]int32, (n+63)/64)}
	for _, v := range sorted {
		x.bits[v>>6] |= 1 << (v & 63)
	}
	k := int32(0)
	for i, w := range x.bits {
		x.before[i] = k
		k += int32(bits.OnesCount64(w))
	}
	return x
}

// rank returns u's position in the list, and whether u is in it.
func (x *rankIndex) rank(u int32) (int, bool) {
	if u < 0 || int(u>>6) >= len(x.bits) {
		return 0, false
	}
	w, bit := x.bits[u>>6], uint64(1)<<(u&63)
	if w&bit == 0 {
		return 0, false
	}
	return int(x.before[u>>6]) + bits.OnesCount64(w&(bit-1)), true
}
