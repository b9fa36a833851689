package csp

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// TestSiblingMatches: on 1 and all visible GPUs (up to 4), a sibling
// sampler (another handle of each GPU, its own communicators, the first
// sampler's patch read in place) gives the first one's batches, with the
// two sampling alternate batches, the patch on the device or split; a
// sibling for another GPU, or with a communicator of another rank, is
// refused; closing the sibling leaves the first one working.
func TestSiblingMatches(t *testing.T) {
	g := randomGraph(5, 20000, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ps := []int{1}
	if n := min(numGPUs(t), 4); n > 1 {
		ps = append(ps, n)
	}
	for _, P := range ps {
		off := make([]int64, P+1)
		for p := range off {
			off[p] = g.NumRows * int64(p) / int64(P)
		}
		hs := siblingHandles(t, P)
		sibComms := siblingComms(t, hs)
		for _, cfg := range []Config{{Fanouts: []int{15, 10, 5}, EdgeIDs: true}, {Fanouts: []int{10, 5}, Placement: gpusample.Split}} {
			name := fmt.Sprintf("P=%d placement=%d", P, cfg.Placement)
			ss, done := group(t, g, off, cfg)
			sibs := make([]*Sampler, P)
			for r, h := range hs {
				var c comm.Comm
				if sibComms != nil {
					c = sibComms[r]
				}
				var err error
				if sibs[r], err = ss[r].Sibling(h, c); err != nil {
					t.Fatalf("%s rank %d: %v", name, r, err)
				}
			}
			for bi := range 4 {
				seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
				for r := range P {
					seeds[r] = ownedSeeds(uint64(100*bi+r), off, r, 700)
					keys[r] = sample.Key{Seed: 9, Batch: bi*P + r}
				}
				// Alternate batches on the sibling; the first sampler
				// draws each batch too, for comparison.
				who := ss
				if bi%2 == 1 {
					who = sibs
				}
				got, errs := sampleAll(ctx, who, seeds, keys)
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("%s batch %d: %v", name, bi, err)
				}
				want, errs := sampleAll(ctx, ss, seeds, keys)
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("%s batch %d (first sampler): %v", name, bi, err)
				}
				for r := range P {
					compareBlocks(t, fmt.Sprintf("%s batch %d rank %d", name, bi, r), got[r].Blocks, want[r].Blocks)
				}
			}
			for r := range P {
				if st := sibs[r].Stats(); st.Batches != 2 {
					t.Errorf("%s rank %d: sibling stats %+v, want 2 batches", name, r, st)
				}
				if err := sibs[r].Close(); err != nil {
					t.Fatal(err)
				}
			}
			seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
			for r := range P {
				seeds[r] = ownedSeeds(uint64(r), off, r, 100)
				keys[r] = sample.Key{Seed: 9, Batch: r}
			}
			if _, errs := sampleAll(ctx, ss, seeds, keys); errors.Join(errs...) != nil {
				t.Fatalf("%s: after closing the siblings: %v", name, errors.Join(errs...))
			}
			done()
		}
	}
	// Refusals.
	if numGPUs(t) >= 2 {
		off := []int64{0, g.NumRows / 2, g.NumRows}
		ss, done := group(t, g, off, Config{Fanouts: []int{5}})
		defer done()
		hs := siblingHandles(t, 2)
		cs := siblingComms(t, hs)
		if _, err := ss[0].Sibling(hs[1], cs[0]); err == nil {
			t.Errorf("sibling on another GPU: %v, want an error", err)
		}
		h := hs[0]
		if _, err := ss[0].Sibling(h, cs[1]); !errors.Is(err, ErrInput) {
			t.Errorf("sibling with rank 1's communicator on rank 0: %v, want ErrInput", err)
		}
		if _, err := ss[0].Sibling(h, nil); !errors.Is(err, ErrInput) {
			t.Errorf("sibling without a communicator in a group of 2: %v, want ErrInput", err)
		}
	}
}

// siblingHandles opens a second handle of each of the first P GPUs,
// closed when the test ends.
func siblingHandles(t *testing.T, P int) []backend.Backend {
	t.Helper()
	hs := make([]backend.Backend, P)
	for r, d := range gpus(t, P) {
		sb, ok := d.(backend.Siblings)
		if !ok {
			t.Fatalf("%s opens no sibling handles (backend.Siblings)", d.Name())
		}
		h, err := sb.Sibling(backend.SiblingOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hs[r] = h
	}
	return hs
}

// siblingComms opens NCCL communicators over the handles hs (nil for
// one), closed when the test ends (before the handles).
func siblingComms(t *testing.T, hs []backend.Backend) []comm.Comm {
	t.Helper()
	P := len(hs)
	if P == 1 {
		return nil
	}
	cs := openNCCL(t, hs, fmt.Sprintf("csp-sibling-%d", P))
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}
