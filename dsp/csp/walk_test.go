package csp

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
)

// TestWalkMatchesRandomWalk: collective walks equal sample.RandomWalk on
// the whole graph for 1 to 4 devices (dead ends and repeated starts
// included).
func TestWalkMatchesRandomWalk(t *testing.T) {
	n := int64(400)
	g := randomGraph(t, 21, n, 4)
	const length = 6
	for k := 1; k <= 4; k++ {
		b := randomBook(t, uint64(70+k), n, k)
		ps := patches(t, g, b, 1000)
		starts := make([][]graph.NodeID, k)
		keys := make([]sample.Key, k)
		for r := range k {
			starts[r] = append(randomSeeds(uint64(80+r), n, 30), 0, 0, 1)
			keys[r] = sample.Key{Seed: 5, Epoch: 2, Batch: 10 + r}
		}
		got := make([]*sample.Walks, k)
		mustGroup(t, k, func(r int, c comm.Comm) error {
			w, err := NewWalker(c, b, ps[r], length, nil)
			if err != nil {
				return err
			}
			got[r], err = w.Walk(context.Background(), starts[r], keys[r])
			return err
		})
		for r := range k {
			want, err := sample.RandomWalk(g, starts[r], length, keys[r])
			if err != nil {
				t.Fatal(err)
			}
			if got[r].Length != want.Length || !slices.Equal(got[r].Nodes, want.Nodes) {
				t.Fatalf("%d devices, rank %d: walks differ\n got %v\nwant %v", k, r, got[r].Nodes, want.Nodes)
			}
		}
	}
}

func TestWalkErrors(t *testing.T) {
	g := randomGraph(t, 4, 50, 5)
	b := randomBook(t, 6, 50, 2)
	ps := patches(t, g, b, layout.NoLimit)
	errs := group(t, 2, 0, func(r int, c comm.Comm) error {
		if _, err := NewWalker(c, b, ps[r], -1, nil); !errors.Is(err, ErrInput) {
			return errors.New("negative length accepted")
		}
		w, err := NewWalker(c, b, ps[r], 3, nil)
		if err != nil {
			return err
		}
		starts := []graph.NodeID{1}
		if r == 0 {
			starts = []graph.NodeID{50}
		}
		_, err = w.Walk(context.Background(), starts, sample.Key{})
		return err
	})
	if !errors.Is(errs[0], ErrInput) || !errors.Is(errs[1], ErrPeer) {
		t.Fatalf("errors %v", errs)
	}
	// Length 0: the starts only.
	mustGroup(t, 2, func(r int, c comm.Comm) error {
		w, err := NewWalker(c, b, ps[r], 0, nil)
		if err != nil {
			return err
		}
		ws, err := w.Walk(context.Background(), []graph.NodeID{3, 4}, sample.Key{})
		if err != nil {
			return err
		}
		if !slices.Equal(ws.Nodes, []graph.NodeID{3, 4}) {
			return errors.New("length 0 walks are not the starts")
		}
		return nil
	})
}
