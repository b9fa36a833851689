package csp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// walkGroup opens P walkers over g (offsets off) on the first P GPUs.
func walkGroup(t testing.TB, g *graph.CSR, off []int64, length int, pl gpusample.Placement) ([]*Walker, func()) {
	return openGroup(t, g, off, false, func(d backend.Backend, p *layout.Patch, c comm.Comm) (*Walker, error) {
		return NewWalker(d, p, off, c, length, pl)
	})
}

// walkAll runs one collective Walk on every rank and downloads the walks.
func walkAll(ctx context.Context, ws []*Walker, starts [][]graph.NodeID, keys []sample.Key) ([]*sample.Walks, []error) {
	return onEveryRank(len(ws), func(r int) (*sample.Walks, error) {
		w, err := ws[r].Walk(ctx, starts[r], keys[r])
		if err != nil {
			return nil, err
		}
		defer w.Free()
		return w.Download()
	})
}

// TestWalkMatchesCPU: on 1, 2 and 4 GPUs (as available) every rank's
// walks equal sample.RandomWalk's over the whole graph with the same
// starts, length and key, for lengths 0 to 40, the rows in device or
// host memory, on equal and random partitions (an empty rank, ranks
// without starts, repeated starts, dead ends). It also counts the
// host's waits.
func TestWalkMatchesCPU(t *testing.T) {
	ps := groupSizes(t)
	g := randomGraph(3, 20000, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, P := range ps {
		for part := range 2 {
			off := make([]int64, P+1)
			for p := range off {
				off[p] = g.NumRows * int64(p) / int64(P)
			}
			if part == 1 {
				if P == 1 {
					continue
				}
				off = randomOffsets(uint64(11*P), g.NumRows, P)
				if P >= 3 {
					off[1] = off[0]
				}
			}
			for li, L := range []int{0, 1, 10, 40} {
				for _, pl := range []gpusample.Placement{gpusample.OnDevice, gpusample.Mapped, gpusample.Split} {
					if pl != gpusample.OnDevice && L != 10 {
						continue
					}
					name := fmt.Sprintf("P=%d offsets=%v L=%d placement=%d", P, off, L, pl)
					ws, done := walkGroup(t, g, off, L, pl)
					for bi, n := range []int{512, 1024, 0, 37} {
						starts, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
						for r := range P {
							k := n
							if r == 1 && bi == 3 {
								k = 0
							}
							starts[r] = ownedSeeds(uint64(3000*P+100*li+10*bi+r), off, r, k)
							if len(starts[r]) > 2 {
								starts[r] = append(starts[r], starts[r][0], starts[r][1])
							}
							keys[r] = sample.Key{Seed: 44, Epoch: li, Batch: bi*P + r}
						}
						got, errs := walkAll(ctx, ws, starts, keys)
						for r := range P {
							if errs[r] != nil {
								t.Fatalf("%s batch %d rank %d: %v", name, bi, r, errs[r])
							}
							want, err := sample.RandomWalk(g, starts[r], L, keys[r])
							if err != nil {
								t.Fatal(err)
							}
							if got[r].Length != L || !slices.Equal(got[r].Nodes, want.Nodes) {
								t.Fatalf("%s batch %d rank %d: walks differ:\n got %v\nwant %v", name, bi, r, trim(got[r].Nodes), trim(want.Nodes))
							}
						}
					}
					for r := range P {
						st := ws[r].Stats()
						if w := 4 * wantWalkWaits(L, P > 1); st.Batches != 4 || st.Waits != w {
							t.Errorf("%s: rank %d: %d walks, %d waits, want 4 and %d", name, r, st.Batches, st.Waits, w)
						}
					}
					done()
				}
			}
		}
	}
}

// TestWalkBadStartFailsEveryRank: an invalid start on one rank makes
// every rank fail at the first exchange (the bad one with ErrInput, the
// others with ErrPeer), and the group walks normally afterwards.
func TestWalkBadStartFailsEveryRank(t *testing.T) {
	P := numGPUs(t)
	if P < 2 {
		t.Skip("needs 2 GPUs")
	}
	g := randomGraph(4, 5000, 6)
	off := make([]int64, P+1)
	for p := range off {
		off[p] = g.NumRows * int64(p) / int64(P)
	}
	ws, done := walkGroup(t, g, off, 8, gpusample.OnDevice)
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	starts, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
	for r := range P {
		starts[r] = ownedSeeds(uint64(r), off, r, 50)
		keys[r] = sample.Key{Seed: 1, Batch: r}
	}
	starts[1] = append(slices.Clone(starts[1]), -3)
	start := time.Now()
	_, errs := walkAll(ctx, ws, starts, keys)
	checkFailedStep(t, errs, 1, 0, 0, ErrInput)
	for r, err := range errs {
		var ge *Error
		if errors.As(err, &ge) && ge.Op != "csp.Walk" {
			t.Errorf("rank %d: %v from %s, want csp.Walk", r, err, ge.Op)
		}
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("failing took %v: the ranks waited for a deadline", d)
	}
	starts[1] = starts[1][:len(starts[1])-1]
	if _, errs := walkAll(ctx, ws, starts, keys); errors.Join(errs...) != nil {
		t.Fatalf("after a failed walk: %v", errors.Join(errs...))
	}
}
