package book

import (
	"errors"
	"fmt"
	"math"
)

// MaxNodes is the largest node count (node IDs are int32).
const MaxNodes = math.MaxInt32

// ErrInvalid is wrapped by every error about malformed offsets.
var ErrInvalid = errors.New("book: invalid offsets")

// Book maps global node IDs to (part, local ID). It is immutable and safe
// for concurrent use.
type Book struct {
	off []int64 // len K+1: 0 = off[0] <= off[1] <= ... <= off[K] = NumNodes
}

// New returns the book with the given offsets (copied): len >= 2,
// offsets[0] == 0, non-decreasing, offsets[K] <= MaxNodes. Empty parts are
// allowed.
func New(offsets []int64) (*Book, error) {
	if len(offsets) < 2 {
		return nil, fmt.Errorf("%w: %d offsets, want K+1 >= 2", ErrInvalid, len(offsets))
	}
	if offsets[0] != 0 {
		return nil, fmt.Errorf("%w: offsets[0] = %d, want 0", ErrInvalid, offsets[0])
	}
	for i := 1; i < len(offsets); i++ {
		if offsets[i] < offsets[i-1] {
			return nil, fmt.Errorf("%w: offsets[%d] = %d < offsets[%d] = %d", ErrInvalid, i, offsets[i], i-1, offsets[i-1])
		}
	}
	if last := offsets[len(offsets)-1]; last > MaxNodes {
		return nil, fmt.Errorf("%w: %d nodes exceed %d", ErrInvalid, last, int64(MaxNodes))
	}
	return &Book{off: append([]int64(nil), offsets...)}, nil
}

// FromCounts returns the book whose part p holds counts[p] nodes.
func FromCounts(counts []int64) (*Book, error) {
	off := make([]int64, len(counts)+1)
	for p, c := range counts {
		if c < 0 {
			return nil, fmt.Errorf("%w: part %d has negative size %d", ErrInvalid, p, c)
		}
		if off[p] > MaxNodes-c {
			return nil, fmt.Errorf("%w: more than %d nodes", ErrInvalid, int64(MaxNodes))
		}
		off[p+1] = off[p] + c
	}
	return New(off)
}

// maxEvenParts bounds Even's part count before it allocates.
const maxEvenParts = 1 << 20

// Even returns the book that splits n nodes into k contiguous parts whose
// sizes differ by at most one, the larger parts first (a range split).
func Even(n int64, k int) (*Book, error) {
	if k < 1 || k > maxEvenParts {
		return nil, fmt.Errorf("%w: %d parts, want 1 to %d", ErrInvalid, k, maxEvenParts)
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: %d nodes", ErrInvalid, n)
	}
	counts := make([]int64, k)
	for p := range counts {
		counts[p] = n / int64(k)
		if int64(p) < n%int64(k) {
			counts[p]++
		}
	}
	return FromCounts(counts)
}

// K returns the number of parts.
func (b *Book) K() int { return len(b.off) - 1 }

// NumNodes returns the total number of nodes.
func (b *Book) NumNodes() int64 { return b.off[len(b.off)-1] }

// Offsets returns a copy of the K+1 offsets.
func (b *Book) Offsets() []int64 { return append([]int64(nil), b.off...) }

// Range returns the IDs [lo, hi) owned by part p (0 <= p < K).
func (b *Book) Range(p int) (lo, hi int64) { return b.off[p], b.off[p+1] }

// Size returns the number of nodes of part p.
func (b *Book) Size(p int) int64 { return b.off[p+1] - b.off[p] }

// Owner returns the part owning global ID id, or -1 if id is outside
// [0, NumNodes).
func (b *Book) Owner(id int64) int {
	if id < 0 || id >= b.NumNodes() {
		return -1
	}
	// Largest p < K with off[p] <= id; empty parts (equal offsets) are
	// skipped because the last of equal offsets is the one whose range
	// contains id.
	lo, hi := 0, len(b.off)-1
	for hi-lo > 1 {
		mid := int(uint(lo+hi) >> 1)
		if b.off[mid] <= id {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// Local returns the owner of id and id's index inside that part, or
// (-1, -1) if id is out of range.
func (b *Book) Local(id int64) (part int, local int64) {
	p := b.Owner(id)
	if p < 0 {
		return -1, -1
	}
	return p, id - b.off[p]
}

// Global returns the global ID of local index local of part p, or -1 if p
// or local is out of range.
func (b *Book) Global(p int, local int64) int64 {
	if p < 0 || p >= b.K() || local < 0 || local >= b.Size(p) {
		return -1
	}
	return b.off[p] + local
}

// Owns reports whether part p owns id.
func (b *Book) Owns(p int, id int64) bool {
	return p >= 0 && p < b.K() && id >= b.off[p] && id < b.off[p+1]
}

// Equal reports whether two books have the same offsets.
func (b *Book) Equal(o *Book) bool {
	if len(b.off) != len(o.off) {
		return false
	}
	for i := range b.off {
		if b.off[i] != o.off[i] {
			return false
		}
	}
	return true
}
