package csp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// gpus returns the first n visible GPUs (up to 4), skipping the test
// when there are fewer.
func gpus(t testing.TB, n int) []backend.Backend {
	ds := gputest.Devices(t, n)
	bs := make([]backend.Backend, len(ds))
	for i, d := range ds {
		bs[i] = d
	}
	return bs
}

// groupSizes are the P to test: 1, and the visible GPUs up to 4, and 2
// when 4 are visible.
func groupSizes(t testing.TB) []int {
	n := numGPUs(t)
	ps := []int{1}
	if n >= 4 {
		ps = append(ps, 2)
	}
	if n > 1 {
		ps = append(ps, n)
	}
	return ps
}

// numGPUs is the number of GPUs the tests use (visible ones, up to 4).
func numGPUs(t testing.TB) int { return len(gputest.All(t)) }

var (
	commsMu sync.Mutex
	comms   = map[int][]comm.Comm{}
)

// commsFor returns NCCL communicators over the first P GPUs (nil for
// P = 1), opened once per process and shared by the tests and
// benchmarks (samplers do not own them).
func commsFor(t testing.TB, P int) []comm.Comm {
	t.Helper()
	ds := gpus(t, P)
	if P == 1 {
		return nil
	}
	if err := nccl.Available(); err != nil {
		t.Skip(err)
	}
	commsMu.Lock()
	defer commsMu.Unlock()
	if cs, ok := comms[P]; ok {
		return cs
	}
	cs := openNCCL(t, ds, fmt.Sprintf("csp-%d", P))
	comms[P] = cs
	return cs
}

// openNCCL opens NCCL communicators over devs (prefix: the group's
// name), with the tests' timeouts.
func openNCCL(t testing.TB, devs []backend.Backend, prefix string) []comm.Comm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := nccl.OpenLocal(ctx, devs, nccl.Options{Options: comm.Options{Timeout: 15 * time.Second}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// group opens P samplers over g (offsets off) on the first P GPUs.
func group(t testing.TB, g *graph.CSR, off []int64, cfg Config) ([]*Sampler, func()) {
	return groupWith(t, g, off, cfg, false)
}

// groupWith is group; protocol makes a single rank run the collective
// protocol (local exchanges) instead of sampling directly.
func groupWith(t testing.TB, g *graph.CSR, off []int64, cfg Config, protocol bool) ([]*Sampler, func()) {
	return openGroup(t, g, off, cfg.Placement == gpusample.Split, func(d backend.Backend, p *layout.Patch, c comm.Comm) (*Sampler, error) {
		s, err := New(d, p, off, c, cfg)
		if err == nil && protocol {
			s.direct = false
		}
		return s, err
	})
}

// openGroup opens one sampler per rank of offsets off over g on the
// first P GPUs with open, each over its patch (with split, half of the
// patch's bytes on the device: its longest rows).
func openGroup[S interface{ Close() error }](t testing.TB, g *graph.CSR, off []int64, split bool, open func(backend.Backend, *layout.Patch, comm.Comm) (S, error)) ([]S, func()) {
	t.Helper()
	P := len(off) - 1
	ds := gpus(t, P)
	cs := commsFor(t, P)
	b, err := book.New(off)
	if err != nil {
		t.Fatal(err)
	}
	ss := make([]S, P)
	for r := range P {
		p, err := layout.Build(g, b, r, layout.Options{DeviceBytes: layout.NoLimit})
		if err != nil {
			t.Fatal(err)
		}
		if split {
			if p, err = layout.Build(g, b, r, layout.Options{DeviceBytes: p.DeviceBytes() / 2}); err != nil {
				t.Fatal(err)
			}
		}
		var c comm.Comm
		if cs != nil {
			c = cs[r]
		}
		if ss[r], err = open(ds[r], p, c); err != nil {
			t.Fatal(err)
		}
	}
	return ss, func() {
		for _, s := range ss {
			s.Close()
		}
	}
}

// onEveryRank runs f(r) for the P ranks concurrently (a collective).
func onEveryRank[T any](P int, f func(r int) (T, error)) ([]T, []error) {
	out, errs := make([]T, P), make([]error, P)
	var wg sync.WaitGroup
	for r := range P {
		wg.Go(func() { out[r], errs[r] = f(r) })
	}
	wg.Wait()
	return out, errs
}

// sampleAll runs one collective Sample on every rank and downloads the
// batches.
func sampleAll(ctx context.Context, ss []*Sampler, seeds [][]graph.NodeID, keys []sample.Key) ([]*sample.MiniBatch, []error) {
	return onEveryRank(len(ss), func(r int) (*sample.MiniBatch, error) {
		b, err := ss[r].Sample(ctx, seeds[r], keys[r])
		if err != nil {
			return nil, err
		}
		defer b.Free()
		return b.Download()
	})
}

// ownedSeeds draws k distinct nodes of [off[r], off[r+1]).
func ownedSeeds(seed uint64, off []int64, r, k int) []graph.NodeID {
	lo, hi := off[r], off[r+1]
	s := randomSeeds(seed, hi-lo, min(k, int(hi-lo)))
	for i := range s {
		s[i] += graph.NodeID(lo)
	}
	return s
}

// TestMatchesSingleGPU: on 1, 2 and 4 GPUs (as available), every rank's
// batch equals gpusample's over the whole graph with the same seeds and
// key: seeds, SrcNodes, indptr, indices (and edge IDs when asked), for
// uniform sampling with and without replacement, weighted sampling, and
// all-neighbor hops, on equal and random partitions (empty ranks, ranks
// without seeds), with the patches in device memory or split between
// device and host memory.
func TestMatchesSingleGPU(t *testing.T) {
	ps := groupSizes(t)
	g := randomGraph(3, 20000, 12)
	ref0 := gpus(t, 1)[0]
	modes := []Config{
		{Fanouts: []int{15, 10, 5}},
		{Fanouts: []int{15, 10, 5}, Replace: true, EdgeIDs: true},
		{Fanouts: []int{10, 5}, Weighted: true},
		{Fanouts: []int{8, 4}, Weighted: true, Replace: true},
		{Fanouts: []int{3, -1}, EdgeIDs: true},
		{Fanouts: []int{15, 10, 5}, Placement: gpusample.Split, EdgeIDs: true},
		{Fanouts: []int{10, 5}, Weighted: true, Placement: gpusample.Split},
		{Fanouts: []int{4, -1}, Placement: gpusample.Split},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, P := range ps {
		for part := range 3 {
			off := make([]int64, P+1)
			for p := range off {
				off[p] = g.NumRows * int64(p) / int64(P)
			}
			if part == 2 && P > 1 {
				continue // the protocol variant is for one rank
			}
			if part == 1 {
				if P == 1 {
					continue
				}
				off = randomOffsets(uint64(7*P), g.NumRows, P)
				if P >= 3 {
					off[1] = off[0] // an empty rank
				}
			}
			for mi, cfg := range modes {
				name := fmt.Sprintf("P=%d offsets=%v mode=%+v", P, off, cfg)
				ref, err := gpusample.New(ref0, g, gpusample.Config{Fanouts: cfg.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted})
				if err != nil {
					t.Fatal(err)
				}
				ss, done := groupWith(t, g, off, cfg, part == 2)
				name += fmt.Sprintf(" direct=%v", ss[0].direct)
				for bi, n := range []int{512, 1024, 0, 37} {
					seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
					for r := range P {
						k := n
						if r == 1 && bi == 3 {
							k = 0 // one rank without seeds
						}
						seeds[r] = ownedSeeds(uint64(1000*P+100*mi+10*bi+r), off, r, k)
						keys[r] = sample.Key{Seed: 42, Epoch: mi, Batch: bi*P + r}
					}
					got, errs := sampleAll(ctx, ss, seeds, keys)
					for r := range P {
						if errs[r] != nil {
							t.Fatalf("%s batch %d rank %d: %v", name, bi, r, errs[r])
						}
						want, err := ref.Sample(seeds[r], keys[r])
						if err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(got[r].Seeds, want.Seeds) {
							t.Fatalf("%s batch %d rank %d: seeds differ", name, bi, r)
						}
						if !cfg.EdgeIDs && !ss[r].direct {
							for i := range got[r].Blocks {
								for _, e := range got[r].Blocks[i].EdgeIDs {
									if e != -1 {
										t.Fatalf("%s: edge ID %d without EdgeIDs", name, e)
									}
								}
								got[r].Blocks[i].EdgeIDs = want.Blocks[i].EdgeIDs
							}
						}
						compareBlocks(t, fmt.Sprintf("%s batch %d rank %d", name, bi, r), got[r].Blocks, want.Blocks)
					}
				}
				var seeds0 int64
				for r := range P {
					st := ss[r].Stats()
					seeds0 += st.Frontier[0]
					if st.Batches != 4 || (P > 1 && (st.Exchanges == 0 || sum64(st.BytesSent) == 0 || st.BytesSent[r] != 0)) || (P == 1 && st.Exchanges != 0) {
						t.Errorf("%s: rank %d stats %+v", name, r, st)
					}
					waits := wantWaits(cfg.Fanouts, P > 1, cfg.EdgeIDs)
					if ss[r].direct {
						waits = 1
						for _, k := range cfg.Fanouts {
							if k < 0 {
								waits++
							}
						}
					}
					if st.Waits != 4*waits {
						t.Errorf("%s: rank %d waited %d times in 4 steps, want %d", name, r, st.Waits, 4*waits)
					}
				}
				if seeds0 == 0 {
					t.Errorf("%s: no seeds counted", name)
				}
				done()
				ref.Close()
			}
		}
	}
}

func sum64(x []int64) int64 {
	var s int64
	for _, v := range x {
		s += v
	}
	return s
}

// TestBadSeedsFailEveryRank: invalid seeds on one rank make every rank
// fail at the first exchange (the bad one with ErrInput, the others with
// ErrPeer), and the group samples normally afterwards.
func TestBadSeedsFailEveryRank(t *testing.T) {
	P := numGPUs(t)
	if P < 2 {
		t.Skip("needs 2 GPUs")
	}
	g := randomGraph(4, 5000, 6)
	off := make([]int64, P+1)
	for p := range off {
		off[p] = g.NumRows * int64(p) / int64(P)
	}
	ss, done := group(t, g, off, Config{Fanouts: []int{4, 4}})
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
	for r := range P {
		seeds[r] = ownedSeeds(uint64(r), off, r, 50)
		keys[r] = sample.Key{Seed: 1, Batch: r}
	}
	seeds[1] = append(slices.Clone(seeds[1]), seeds[1][0]) // a repeated seed
	start := time.Now()
	_, errs := sampleAll(ctx, ss, seeds, keys)
	checkFailedStep(t, errs, 1, 0, 0, ErrInput)
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("failing took %v: the ranks waited for a deadline", d)
	}
	seeds[1] = seeds[1][:len(seeds[1])-1]
	if _, errs := sampleAll(ctx, ss, seeds, keys); errors.Join(errs...) != nil {
		t.Fatalf("after a failed batch: %v", errors.Join(errs...))
	}
}
