package csp

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
)

var nodeConfigs = []struct {
	name string
	cfg  Config
}{
	{"uniform", Config{Fanouts: []int{5, 3, 2}}},
	{"uniform-replace", Config{Fanouts: []int{4, 4}, Replace: true}},
	{"weighted", Config{Fanouts: []int{6, 3}, Weighted: true}},
	{"weighted-replace", Config{Fanouts: []int{3, 5}, Weighted: true, Replace: true}},
	{"all-then-uniform", Config{Fanouts: []int{-1, 7}}},
}

// TestNodeMatchesSingleDevice: every device's batch equals the one
// sample.NeighborSampler draws on the whole graph, for 1 to 4 devices,
// random (uneven, sometimes empty) patches and several topology budgets.
func TestNodeMatchesSingleDevice(t *testing.T) {
	n := int64(600)
	if testing.Short() {
		n = 300
	}
	g := randomGraph(t, 1, n, 12)
	for _, tc := range nodeConfigs {
		ref, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: tc.cfg.Fanouts, Replace: tc.cfg.Replace, Weighted: tc.cfg.Weighted})
		if err != nil {
			t.Fatal(err)
		}
		for k := 1; k <= 4; k++ {
			for bi, budget := range []int64{layout.NoLimit, 0, 2000} {
				t.Run(fmt.Sprintf("%s/devices=%d/budget=%d", tc.name, k, budget), func(t *testing.T) {
					b := randomBook(t, uint64(10*k+bi), n, k)
					ps := patches(t, g, b, budget)
					got := make([]*sample.MiniBatch, k)
					seeds := make([][]graph.NodeID, k)
					keys := make([]sample.Key, k)
					for r := range k {
						// Rank 1 of 3 gets no seeds: it must still take part.
						cnt := 20 + 7*r
						if k == 3 && r == 1 {
							cnt = 0
						}
						seeds[r] = randomSeeds(uint64(100*k+r), n, cnt)
						keys[r] = sample.Key{Seed: 9, Epoch: 2, Batch: r}
					}
					var m metrics.Counters
					mustGroup(t, k, func(r int, c comm.Comm) error {
						s, err := NewNodeSampler(c, b, ps[r], tc.cfg, &m)
						if err != nil {
							return err
						}
						got[r], err = s.Sample(seeds[r], keys[r])
						return err
					})
					for r := range k {
						want, err := ref.Sample(seeds[r], keys[r])
						if err != nil {
							t.Fatal(err)
						}
						if !sameBatch(got[r], want) {
							t.Fatalf("rank %d: collective batch differs from the single-device one", r)
						}
					}
					if k > 1 && m.Bytes(metrics.Sample, metrics.Peer) == 0 {
						t.Errorf("no bytes counted between devices")
					}
					if budget == 0 && m.Bytes(metrics.Sample, metrics.Host) == 0 {
						t.Errorf("budget 0 but no host reads counted")
					}
					if budget == layout.NoLimit && m.Bytes(metrics.Sample, metrics.Host) != 0 {
						t.Errorf("unlimited budget but host reads counted")
					}
				})
			}
		}
	}
}

// TestNodeSeveralBatches: consecutive batches on the same samplers (state
// reuse) still match.
func TestNodeSeveralBatches(t *testing.T) {
	n := int64(400)
	g := randomGraph(t, 3, n, 8)
	cfg := Config{Fanouts: []int{4, 4}}
	ref, _ := sample.NewNeighborSampler(g, sample.Config{Fanouts: cfg.Fanouts})
	const k, batches = 3, 4
	b := randomBook(t, 5, n, k)
	ps := patches(t, g, b, layout.NoLimit)
	got := make([][]*sample.MiniBatch, k)
	mustGroup(t, k, func(r int, c comm.Comm) error {
		s, err := NewNodeSampler(c, b, ps[r], cfg, nil)
		if err != nil {
			return err
		}
		for i := range batches {
			mb, err := s.Sample(randomSeeds(uint64(1000*r+i), n, 16), sample.Key{Seed: 1, Epoch: i, Batch: r})
			if err != nil {
				return err
			}
			got[r] = append(got[r], mb)
		}
		return nil
	})
	for r := range k {
		for i := range batches {
			want, _ := ref.Sample(randomSeeds(uint64(1000*r+i), n, 16), sample.Key{Seed: 1, Epoch: i, Batch: r})
			if !sameBatch(got[r][i], want) {
				t.Fatalf("rank %d batch %d differs", r, i)
			}
		}
	}
}

// TestNodeBadSeeds: invalid seeds on one device make every device fail
// promptly (no one waits for a deadline): the bad one with ErrInput, the
// others with ErrPeer naming it.
func TestNodeBadSeeds(t *testing.T) {
	n := int64(100)
	g := randomGraph(t, 4, n, 5)
	const k = 3
	b := randomBook(t, 6, n, k)
	ps := patches(t, g, b, layout.NoLimit)
	for _, bad := range [][]graph.NodeID{{1, 2, 1}, {5, 100}, {-1}} {
		start := time.Now()
		errs := group(t, k, 10*time.Second, func(r int, c comm.Comm) error {
			s, err := NewNodeSampler(c, b, ps[r], Config{Fanouts: []int{3}}, nil)
			if err != nil {
				return err
			}
			seeds := []graph.NodeID{graph.NodeID(r)}
			if r == 1 {
				seeds = bad
			}
			_, err = s.Sample(seeds, sample.Key{Seed: 1})
			return err
		})
		if time.Since(start) > 5*time.Second {
			t.Fatalf("bad seeds %v: took %v", bad, time.Since(start))
		}
		for r, err := range errs {
			want := ErrPeer
			if r == 1 {
				want = ErrInput
			}
			if !errors.Is(err, want) {
				t.Fatalf("bad seeds %v: rank %d: %v, want %v", bad, r, err, want)
			}
		}
	}
}

func TestNodeConfigErrors(t *testing.T) {
	g := randomGraph(t, 4, 50, 5)
	b := randomBook(t, 6, 50, 2)
	ps := patches(t, g, b, layout.NoLimit)
	mustGroup(t, 2, func(r int, c comm.Comm) error {
		if _, err := NewNodeSampler(c, b, ps[1-r], Config{Fanouts: []int{3}}, nil); !errors.Is(err, ErrInput) {
			return fmt.Errorf("patch of another rank: %v", err)
		}
		if _, err := NewNodeSampler(c, b, ps[r], Config{Fanouts: []int{0}}, nil); !errors.Is(err, sample.ErrConfig) {
			return fmt.Errorf("fanout 0: %v", err)
		}
		return nil
	})
}
