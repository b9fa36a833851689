package infer

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRankIndex: a node's rank is its position in the sorted list, and
// nodes outside the list (or the range) are not found, at word edges
// too.
func TestRankIndex(t *testing.T) {
	const n = 1000
	rng := rand.New(rand.NewPCG(1, 2))
	var list []int32
	for v := range int32(n) {
		if v == 0 || v == 63 || v == 64 || v == n-1 || rng.IntN(3) == 0 {
			list = append(list, v)
		}
	}
	x := newRankIndex(n, list)
	for v := int32(-1); v <= n+64; v++ {
		want, in := slices.BinarySearch(list, v)
		got, ok := x.rank(v)
		if ok != in || (ok && got != want) {
			t.Fatalf("rank(%d) = %d, %v; want %d, %v", v, got, ok, want, in)
		}
	}
}

// TestOwner: the device whose range holds a node, empty ranges skipped.
func TestOwner(t *testing.T) {
	r := &run{opts: Options{Offsets: []int64{0, 3, 3, 5, 9}}}
	for u, want := range []int{0, 0, 0, 2, 2, 3, 3, 3, 3} {
		if got := r.owner(int32(u)); got != want {
			t.Errorf("owner(%d) = %d, want %d", u, got, want)
		}
	}
}
