package serve

import (
	"errors"
	"slices"
	"testing"
)

func TestPlanRanks(t *testing.T) {
	// 10 seeds over 3 ranks: padded to 12 by wrapping around (0, 1).
	want := [][]int32{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}}
	for r := range 3 {
		got, err := Plan(10, Epoch{BatchSize: 2, World: 3, Rank: r})
		if err != nil || !slices.Equal(got, want[r]) {
			t.Fatalf("rank %d: %v %v, want %v", r, got, err, want[r])
		}
	}
	// drop_last cuts to 9.
	for r := range 3 {
		got, err := Plan(10, Epoch{BatchSize: 2, World: 3, Rank: r, DropLast: true})
		if err != nil || !slices.Equal(got, want[r][:3]) {
			t.Fatalf("rank %d drop_last: %v %v", r, got, err)
		}
	}
	if got, _ := Plan(5, Epoch{BatchSize: 2, World: 1}); !slices.Equal(got, []int32{0, 1, 2, 3, 4}) {
		t.Fatalf("one rank, no shuffle: %v", got)
	}
}

func TestPlanShuffle(t *testing.T) {
	e := Epoch{BatchSize: 4, Shuffle: true, Seed: 9, Epoch: 2, World: 1}
	a, err := Plan(100, e)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Plan(100, e)
	if !slices.Equal(a, b) {
		t.Fatal("same seed and epoch, different orders")
	}
	s := slices.Clone(a)
	slices.Sort(s)
	for i, v := range s {
		if v != int32(i) {
			t.Fatalf("not a permutation: %v", a)
		}
	}
	e.Epoch = 3
	c, _ := Plan(100, e)
	if slices.Equal(a, c) {
		t.Fatal("epochs 2 and 3 have the same order")
	}
	// Ranks of a shuffled epoch share one permutation: together they
	// cover every seed.
	seen := make([]int, 100)
	for r := range 4 {
		p, err := Plan(100, Epoch{BatchSize: 4, Shuffle: true, Seed: 9, Epoch: 2, World: 4, Rank: r})
		if err != nil || len(p) != 25 {
			t.Fatalf("rank %d: %d seeds, %v", r, len(p), err)
		}
		for _, v := range p {
			seen[v]++
		}
	}
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("seed %d taken %d times", i, c)
		}
	}
}

func TestNumBatches(t *testing.T) {
	for _, c := range []struct {
		n, bs, world int
		drop         bool
		want         int
	}{
		{10, 3, 1, false, 4}, {10, 3, 1, true, 3}, {10, 2, 3, false, 2}, {10, 2, 3, true, 1},
		{9, 3, 3, false, 1}, {2, 1, 3, true, 0}, {2, 1, 3, false, 1}, {0, 5, 1, false, 0}, {7, 0, 1, false, 0},
	} {
		if got := NumBatches(c.n, c.bs, c.world, c.drop); got != c.want {
			t.Errorf("NumBatches(%d, %d, %d, %v) = %d, want %d", c.n, c.bs, c.world, c.drop, got, c.want)
		}
		if c.bs == 0 {
			continue
		}
		for r := range c.world {
			p, err := Plan(c.n, Epoch{BatchSize: c.bs, World: c.world, Rank: r, DropLast: c.drop})
			if err != nil {
				t.Fatal(err)
			}
			nb := (len(p) + c.bs - 1) / c.bs
			if c.drop {
				nb = len(p) / c.bs
			}
			if nb != c.want {
				t.Errorf("n %d bs %d world %d drop %v rank %d: plan makes %d batches, NumBatches %d", c.n, c.bs, c.world, c.drop, r, nb, c.want)
			}
		}
	}
}

func TestPlanRefusals(t *testing.T) {
	for _, e := range []Epoch{{BatchSize: 0, World: 1}, {BatchSize: 1, World: 0}, {BatchSize: 1, World: 2, Rank: 2}, {BatchSize: 1, World: 1, Epoch: -1}} {
		if _, err := Plan(5, e); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", e, err)
		}
	}
	if k := (Epoch{Seed: 3, Epoch: 1, World: 4, Rank: 2}).Key(5); k.Batch != 22 || k.Seed != 3 || k.Epoch != 1 {
		t.Fatalf("key %+v", k)
	}
}
