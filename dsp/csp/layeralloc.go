package csp

import (
	"math"
	"math/bits"
	"sync"

	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/sample"
)

// tagLayerAlloc is the domain tag of the requester's allocation of a
// layer ("LAYA").
const tagLayerAlloc = 0x4c415941

// LayerAllocate splits hop's layer budget f over a frontier whose nodes
// have deg edges (weights wt): with replacement, f i.i.d. draws of node i with probability
// wt[i]/sum(wt); without, f distinct edges among all the frontier's edges
// (Floyd's algorithm over its edge slots), counted per node; f = -1 (or f
// at least the frontier's edges, without replacement) takes every edge.
// It depends only on its arguments, not on the number of devices: the
// requester of every layer-wise hop calls it (LayerSampler).
//
// The result is defined by the plain algorithm (a binary search of each
// draw in the frontier's running sums, Floyd's set in a map); the code
// below returns the same counts from the same random numbers, faster: a
// guide table narrows each search to about one node, and Floyd's set is
// a bitset over the edge slots (or an open-addressing table when the
// slots are many more than the draws). Inputs outside the callers'
// contract (negative or NaN degrees and weights, an infinite total) take
// the plain algorithm, so even they give what they always gave.
func LayerAllocate(f int, replace bool, key sample.Key, hop int, deg []int64, wt []float64) []int64 {
	alloc := make([]int64, len(deg))
	if f < 0 {
		copy(alloc, deg)
		return alloc
	}
	st := rng.NewStream(rng.Derive(key.Seed, tagLayerAlloc, uint64(key.Epoch), uint64(key.Batch), uint64(hop)))
	sc := allocPool.Get().(*allocScratch)
	defer allocPool.Put(sc)
	if replace {
		sc.allotReplace(alloc, f, st, wt)
	} else {
		sc.allotDistinct(alloc, f, st, deg)
	}
	return alloc
}

// allocScratch holds LayerAllocate's buffers between calls (one per
// concurrent call, through allocPool): the GPU sampler allots every hop
// of every batch, and the buffers are as long as the frontier.
type allocScratch struct {
	cum    []float64 // running sums of the weights
	icum   []int64   // running sums of the degrees
	guide  []int32   // guide table: first node of each bucket
	bits   []uint64  // Floyd's set as a bitset over the edge slots
	rank   []int64   // set bits before each word of the bitset
	tab    []int64   // Floyd's set as an open-addressing table (-1: empty)
	chosen []int64   // the table's slots in the order chosen
}

var allocPool = sync.Pool{New: func() any { return new(allocScratch) }}

// grow returns s resliced to n elements, reallocated when too short (the
// contents are not kept).
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// allotReplace is the with-replacement allocation (alloc is all zeros).
//
// Each draw u = (1-U)*sum in [0, sum) goes to firstAbove(cum, u), the
// first node whose running sum exceeds u. The guide table splits
// [0, sum) into n buckets by b(u) = min(int(u*n/sum), n-1), which never
// decreases as u grows (rounded products keep the order); guide[b] is
// the first node i with b(cum[i]) >= b. For u in bucket b every node
// before guide[b] has cum < u and every node from guide[b+1] on has
// cum > u, so firstAbove's node lies in guide[b]..guide[b+1]: it is
// guide[b] plus the number of running sums there that are <= u.
func (sc *allocScratch) allotReplace(alloc []int64, f int, st rng.Stream, wt []float64) {
	n := len(wt)
	sc.cum = grow(sc.cum, n+pad)
	cump := sc.cum // cum and pad +Inf after it
	cum := cump[:n]
	var sum float64
	ok := n < math.MaxInt32-pad
	for i, w := range wt {
		ok = ok && w >= 0 // false for NaN too
		sum += w
		cum[i] = sum
	}
	if !(sum > 0) || f == 0 {
		return
	}
	scale := float64(n) / sum
	if !ok || math.IsInf(sum, 0) || math.IsInf(scale, 0) {
		replaceSearch(alloc, f, st, wt)
		return
	}
	for i := n; i < n+pad; i++ {
		cump[i] = math.Inf(1)
	}
	top, last := float64(n), n-1
	sc.guide = grow(sc.guide, n+1)
	guide := sc.guide
	clear(guide)
	for _, c := range cum { // count the nodes of each bucket, then sum
		guide[bucket(c, scale, top, last)+1]++
	}
	prefixSum(guide)
	for range f {
		u := (1 - st.OpenFloat64()) * sum // [0, sum)
		b := bucket(u, scale, top, last)
		lo, hi := int(guide[b]), int(guide[b+1])
		var i int
		if hi-lo <= pad { // most buckets: count without branches
			i = lo + b2int(cump[lo] <= u) + b2int(cump[lo+1] <= u) + b2int(cump[lo+2] <= u)
		} else {
			i = lo + firstAbove(cum[lo:hi], u)
		}
		if i == n { // rounding at the top end
			i = n - 1
			for wt[i] == 0 {
				i--
			}
		}
		alloc[i]++
	}
}

// pad is the number of sentinels after the running sums (above every
// draw): a bucket with at most pad of them is counted by comparing pad
// entries, those past the bucket being above the draw.
const pad = 3

func b2int(b bool) int {
	if b {
		return 1
	}
	return 0
}

// prefixSum turns per-bucket counts (x[b+1]: nodes in bucket b) into
// the guide table (x[b]: nodes in buckets before b).
func prefixSum(x []int32) {
	var s int32
	for i, c := range x {
		s += c
		x[i] = s
	}
}

// bucket is the guide table's bucket of x >= 0: min(int(x*scale), last),
// with top = last+1 (exact in float64).
func bucket(x, scale, top float64, last int) int {
	y := x * scale
	if y >= top {
		return last
	}
	return int(y)
}

// replaceSearch is the with-replacement allocation by a binary search per
// draw (the definition; used for inputs outside the contract).
func replaceSearch(alloc []int64, f int, st rng.Stream, wt []float64) {
	cum := make([]float64, len(wt))
	var sum float64
	for i, w := range wt {
		sum += w
		cum[i] = sum
	}
	if !(sum > 0) {
		return
	}
	for range f {
		u := (1 - st.OpenFloat64()) * sum // [0, sum)
		i := firstAbove(cum, u)
		if i == len(cum) { // rounding at the top end
			i = len(cum) - 1
			for wt[i] == 0 {
				i--
			}
		}
		alloc[i]++
	}
}

// allotDistinct is the without-replacement allocation (alloc is all
// zeros): Floyd's algorithm picks k distinct slots of [0, total), the
// frontier's edges end to end, and each node counts the slots among its
// own. Only the set matters, not the order the slots were chosen in.
func (sc *allocScratch) allotDistinct(alloc []int64, f int, st rng.Stream, deg []int64) {
	n := len(deg)
	sc.icum = grow(sc.icum, n+pad)
	cump := sc.icum // cum and pad sentinels above every slot
	cum := cump[:n]
	var total int64
	ok := n < math.MaxInt32-pad
	for i, d := range deg {
		if d < 0 || total > math.MaxInt64-d {
			ok = false
			break
		}
		total += d
		cum[i] = total
	}
	if !ok {
		distinctSearch(alloc, f, st, deg)
		return
	}
	k := min(int64(f), total)
	if k == total {
		copy(alloc, deg)
		return
	}
	if k == 0 {
		return
	}
	// The bitset costs a word per 64 slots to clear and to count; the
	// table costs a hash per draw and a search per chosen slot.
	if words := (total + 63) >> 6; words <= 2*k+int64(n)+64 {
		sc.floydBits(alloc, k, total, st, cum)
	} else {
		for i := n; i < n+pad; i++ {
			cump[i] = math.MaxInt64
		}
		sc.floydTable(alloc, k, total, st, cump)
	}
}

// floydBits runs Floyd's algorithm with a bitset over the slots; a node's
// count is the difference of the ranks (set slots below) of its range's
// ends, read from the words' running popcounts.
func (sc *allocScratch) floydBits(alloc []int64, k, total int64, st rng.Stream, cum []int64) {
	words := int(total>>6) + 1 // a spare word: the rank of total reads it
	sc.bits = grow(sc.bits, words)
	set := sc.bits
	clear(set)
	for j := total - k; j < total; j++ {
		t := st.Below(uint64(j + 1))
		if set[t>>6]&(1<<(t&63)) != 0 {
			t = uint64(j) // never chosen before: earlier draws are below j
		}
		set[t>>6] |= 1 << (t & 63)
	}
	sc.rank = grow(sc.rank, words)
	rank := sc.rank // set slots in the words before
	var c int64
	for w, x := range set {
		rank[w] = c
		c += int64(bits.OnesCount64(x))
	}
	var prev int64 // rank of the node's first slot
	for i, e := range cum {
		r := rank[e>>6] + int64(bits.OnesCount64(set[e>>6]&(1<<(e&63)-1)))
		alloc[i] = r - prev
		prev = r
	}
}

// floydTable runs Floyd's algorithm with an open-addressing table of the
// chosen slots (linear probing, at most half full) and finds each chosen
// slot's node through a guide table over the slots, as allotReplace does
// with integers: bucket t>>shift, guide[b] the number of nodes whose
// running sum is in an earlier bucket. cump is the running sums and pad
// sentinels.
func (sc *allocScratch) floydTable(alloc []int64, k, total int64, st rng.Stream, cump []int64) {
	logCap := max(4, bits.Len64(uint64(2*k-1)))
	sc.tab = grow(sc.tab, 1<<logCap)
	tab := sc.tab
	for i := range tab {
		tab[i] = -1
	}
	sc.chosen = grow(sc.chosen, int(k))
	chosen := sc.chosen
	mask, hs := uint64(len(tab)-1), uint(64-logCap)
	for j := total - k; j < total; j++ {
		t := int64(st.Below(uint64(j + 1)))
		h := (uint64(t) * rng.Golden) >> hs
		for tab[h] >= 0 && tab[h] != t {
			h = (h + 1) & mask
		}
		if tab[h] == t { // chosen before: take j, never chosen before
			t = j
			h = (uint64(t) * rng.Golden) >> hs
			for tab[h] >= 0 {
				h = (h + 1) & mask
			}
		}
		tab[h] = t
		chosen[j-(total-k)] = t
	}

	n := len(cump) - pad
	cum := cump[:n]
	shift := 0
	for (total-1)>>shift >= int64(n) {
		shift++
	}
	nb := int((total-1)>>shift) + 1 // buckets, at most n
	last := int64(nb - 1)
	sc.guide = grow(sc.guide, nb+1)
	guide := sc.guide
	clear(guide)
	for _, c := range cum {
		guide[min(c>>shift, last)+1]++
	}
	prefixSum(guide)
	for _, t := range chosen {
		b := t >> shift
		lo, hi := int(guide[b]), int(guide[b+1])
		var i int
		if hi-lo <= pad {
			i = lo + b2int(cump[lo] <= t) + b2int(cump[lo+1] <= t) + b2int(cump[lo+2] <= t)
		} else {
			i = lo + firstAbove(cum[lo:hi], t)
		}
		alloc[i]++
	}
}

// distinctSearch is the without-replacement allocation with a map and a
// binary search per chosen slot (the definition; used for inputs outside
// the contract).
func distinctSearch(alloc []int64, f int, st rng.Stream, deg []int64) {
	var total int64
	cum := make([]int64, len(deg))
	for i, d := range deg {
		total += d
		cum[i] = total
	}
	k := min(int64(f), total)
	if k == total {
		copy(alloc, deg)
		return
	}
	chosen := make(map[int64]struct{}, k)
	for j := total - k; j < total; j++ {
		t := int64(st.Below(uint64(j + 1)))
		if _, dup := chosen[t]; dup {
			t = j
		}
		chosen[t] = struct{}{}
	}
	for t := range chosen {
		alloc[firstAbove(cum, t)]++
	}
}

// firstAbove is sort.Search(len(x), func(i int) bool { return x[i] > v })
// for non-decreasing x, without the closure (the allocation's inner
// loop).
func firstAbove[T int64 | float64](x []T, v T) int {
	lo, hi := 0, len(x)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if x[mid] > v {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
