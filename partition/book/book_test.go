package book

import (
	"errors"
	"testing"
)

func TestNewErrors(t *testing.T) {
	for _, off := range [][]int64{nil, {0}, {1, 2}, {0, 3, 2}, {0, MaxNodes + 1}} {
		if _, err := New(off); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%v): err = %v, want ErrInvalid", off, err)
		}
	}
	if _, err := FromCounts([]int64{3, -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative count: %v", err)
	}
	if _, err := FromCounts([]int64{MaxNodes, 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("overflow: %v", err)
	}
}

func TestOwnerLocalGlobal(t *testing.T) {
	// Parts: [0,3) [3,3) empty, [3,7) [7,7) empty, [7,8).
	b, err := FromCounts([]int64{3, 0, 4, 0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if b.K() != 5 || b.NumNodes() != 8 {
		t.Fatalf("K=%d N=%d", b.K(), b.NumNodes())
	}
	wantOwner := []int{0, 0, 0, 2, 2, 2, 2, 4}
	for id, want := range wantOwner {
		if got := b.Owner(int64(id)); got != want {
			t.Errorf("Owner(%d) = %d, want %d", id, got, want)
		}
		p, l := b.Local(int64(id))
		if p != want || b.Global(p, l) != int64(id) {
			t.Errorf("Local(%d) = (%d, %d); Global back = %d", id, p, l, b.Global(p, l))
		}
		if !b.Owns(want, int64(id)) || b.Owns(want+1, int64(id)) {
			t.Errorf("Owns wrong for %d", id)
		}
	}
	for _, id := range []int64{-1, 8, 1 << 40} {
		if b.Owner(id) != -1 {
			t.Errorf("Owner(%d) = %d, want -1", id, b.Owner(id))
		}
		if p, l := b.Local(id); p != -1 || l != -1 {
			t.Errorf("Local(%d) = %d, %d", id, p, l)
		}
	}
	for _, c := range []struct {
		p int
		l int64
	}{{-1, 0}, {5, 0}, {1, 0}, {0, 3}, {0, -1}} {
		if g := b.Global(c.p, c.l); g != -1 {
			t.Errorf("Global(%d, %d) = %d, want -1", c.p, c.l, g)
		}
	}
	if lo, hi := b.Range(2); lo != 3 || hi != 7 || b.Size(2) != 4 {
		t.Errorf("Range(2) = %d, %d", lo, hi)
	}
	o := b.Offsets()
	o[1] = 99 // a copy: the book is unchanged
	if b.Owner(1) != 0 {
		t.Fatal("Offsets returned the book's own slice")
	}
	b2, _ := New([]int64{0, 3, 3, 7, 7, 8})
	if !b.Equal(b2) {
		t.Error("Equal: same offsets differ")
	}
}

func TestOwnerLarge(t *testing.T) {
	counts := make([]int64, 257)
	for i := range counts {
		counts[i] = int64(i % 5)
	}
	b, err := FromCounts(counts)
	if err != nil {
		t.Fatal(err)
	}
	id := int64(0)
	for p, c := range counts {
		for j := int64(0); j < c; j++ {
			if got := b.Owner(id); got != p {
				t.Fatalf("Owner(%d) = %d, want %d", id, got, p)
			}
			id++
		}
	}
}

func BenchmarkOwner(b *testing.B) {
	bk, _ := FromCounts([]int64{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000})
	var s int
	for i := 0; b.Loop(); i++ {
		s += bk.Owner(int64(i % 8000))
	}
	_ = s
}

func TestEven(t *testing.T) {
	for _, c := range []struct {
		n    int64
		k    int
		want []int64
	}{
		{10, 3, []int64{0, 4, 7, 10}},
		{9, 3, []int64{0, 3, 6, 9}},
		{2, 4, []int64{0, 1, 2, 2, 2}},
		{0, 2, []int64{0, 0, 0}},
		{5, 1, []int64{0, 5}},
	} {
		b, err := Even(c.n, c.k)
		if err != nil {
			t.Fatalf("Even(%d, %d): %v", c.n, c.k, err)
		}
		got := b.Offsets()
		if len(got) != len(c.want) {
			t.Fatalf("Even(%d, %d) = %v, want %v", c.n, c.k, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("Even(%d, %d) = %v, want %v", c.n, c.k, got, c.want)
			}
		}
	}
	for _, c := range []struct {
		n int64
		k int
	}{{10, 0}, {10, -1}, {10, maxEvenParts + 1}, {-1, 2}, {MaxNodes + 1, 1}} {
		if _, err := Even(c.n, c.k); !errors.Is(err, ErrInvalid) {
			t.Errorf("Even(%d, %d): err = %v, want ErrInvalid", c.n, c.k, err)
		}
	}
}
