package runner

import (
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
)

func TestAssignPad(t *testing.T) {
	b, _ := book.New([]int64{0, 10, 100, 300})
	var trainIDs []graph.NodeID
	for v := graph.NodeID(0); v < 300; v += 3 { // 100 nodes, 4 owned by rank 0
		trainIDs = append(trainIDs, v)
	}
	for _, bs := range []int{1, 7, 33, 34, 200} {
		p, err := assign(trainIDs, b, bs, Pad, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		nb := len(p.batches[0])
		seen := map[graph.NodeID]int{}
		for r, bt := range p.batches {
			if len(bt) != nb {
				t.Fatalf("batch %d: rank %d has %d batches, rank 0 %d", bs, r, len(bt), nb)
			}
			for _, seeds := range bt {
				if len(seeds) == 0 || len(seeds) > bs {
					t.Fatalf("batch size %d: a batch of %d", bs, len(seeds))
				}
				for _, v := range seeds {
					seen[v]++
				}
			}
		}
		if len(seen) != len(trainIDs) || p.dropped != 0 {
			t.Fatalf("batch %d: %d distinct nodes used, %d dropped; want all %d", bs, len(seen), p.dropped, len(trainIDs))
		}
		// The shares are 34, 33, 33: at most one padded repeat per rank.
		extra := 0
		for _, c := range seen {
			extra += c - 1
		}
		if extra > 2 {
			t.Fatalf("batch %d: %d repeats", bs, extra)
		}
	}
	// Rank 2 owns most training nodes and keeps its own first.
	p, _ := assign(trainIDs, b, 10, Pad, 1, 0)
	for _, seeds := range p.batches[2] {
		for _, v := range seeds {
			if v < 100 {
				t.Fatalf("rank 2 got node %d while it has spare nodes of its own", v)
			}
		}
	}
}

func TestAssignTrimAndOneDevice(t *testing.T) {
	b, _ := book.New([]int64{0, 50, 100})
	trainIDs := make([]graph.NodeID, 45)
	for i := range trainIDs {
		trainIDs[i] = graph.NodeID(2 * i)
	}
	p, err := assign(trainIDs, b, 10, Trim, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	for r, bt := range p.batches {
		if len(bt) != 2 {
			t.Fatalf("rank %d: %d batches, want 2", r, len(bt))
		}
		for _, seeds := range bt {
			if len(seeds) != 10 {
				t.Fatalf("trim: batch of %d", len(seeds))
			}
		}
	}
	if p.dropped != 5 {
		t.Fatalf("dropped %d, want 5", p.dropped)
	}
	if _, err := assign(trainIDs, b, 40, Trim, 3, 2); err == nil {
		t.Fatal("trim with no full batch per device accepted")
	}
	// One device: the trainer's shuffle, cut in order.
	one, _ := book.New([]int64{0, 100})
	p, _ = assign(trainIDs, one, 10, Pad, 3, 2)
	var flat []graph.NodeID
	for _, s := range p.batches[0] {
		flat = append(flat, s...)
	}
	if want := shuffled(trainIDs, trainShuffleKey(3, 2)); !slices.Equal(flat, want) {
		t.Fatalf("one device: %v, want the trainer's order %v", flat, want)
	}
}
