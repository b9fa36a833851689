package csp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// cpuStep runs one collective Sample on every rank (the seeds and keys
// per rank) and downloads the batches' blocks.
func cpuStep(ctx context.Context, ss []*Sampler, seeds [][]graph.NodeID, keys []sample.Key) ([][]sample.Block, []error) {
	mbs, errs := sampleAll(ctx, ss, seeds, keys)
	out := make([][]sample.Block, len(mbs))
	for r, mb := range mbs {
		if mb != nil {
			out[r] = mb.Blocks
		}
	}
	return out, errs
}

// wantWaits is the host waits of one step: a hop with a fixed fanout
// reads its header (and, with a communicator, waits for the header, node
// and answer exchanges, plus the edge IDs'); a hop that takes every
// neighbor also reads and exchanges totals; the step ends with one read
// of every block's sizes.
func wantWaits(fan []int, remote, edgeIDs bool) int64 {
	w := int64(1)
	for _, k := range fan {
		reads, colls := int64(1), int64(3)
		if k < 0 {
			reads, colls = 3, 4
		}
		if edgeIDs {
			colls++
		}
		w += reads
		if remote {
			w += colls
		}
	}
	return w
}

// TestProtocolMatchesCPU runs the protocol (proto, the code GPUs run) on
// the CPU machines of 1-4 CPU back ends exchanging through staged
// in-process communicators with random delays before every collective,
// with equal and random partitions (empty ranks and ranks without seeds
// included), and compares every rank's batch with sample.NeighborSampler's
// over the whole graph, for two steps in a row. It also counts the
// host's waits; a single rank sampling directly gives the same batches.
func TestProtocolMatchesCPU(t *testing.T) {
	g := randomGraph(1, 3000, 8)
	modes := []Config{
		{Fanouts: []int{5, 3, 2}},
		{Fanouts: []int{4, -1}, Replace: true, EdgeIDs: true},
		{Fanouts: []int{3, 3}, Weighted: true},
		{Fanouts: []int{6, 2}, Weighted: true, Replace: true, EdgeIDs: true},
		{Fanouts: []int{3, -1, 2}},
	}
	if wantWaits([]int{15, 10, 5}, true, false) != 13 {
		t.Fatal("a 3-hop step with fixed fanouts should wait 13 times (the previous protocol: 24)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for mi, mode := range modes {
		ref, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: mode.Fanouts, Replace: mode.Replace, Weighted: mode.Weighted})
		if err != nil {
			t.Fatal(err)
		}
		direct := openCPUGroup(t, g, []int64{0, g.NumRows}, nil, func(be *cpu.Backend, p *layout.Patch, c comm.Comm) (*Sampler, error) {
			return New(be, p, []int64{0, g.NumRows}, c, mode)
		})
		for P := 1; P <= 4; P++ {
			trials := 3
			if testing.Short() {
				trials = 2
			}
			for trial := range trials {
				off := randomOffsets(uint64(10*P+trial), g.NumRows, P)
				if trial == 0 {
					off = make([]int64, P+1)
					for p := range off {
						off[p] = g.NumRows * int64(p) / int64(P)
					}
				}
				ss, ms := cpuGroup(t, g, off, mode, pipeline.RandomDelays(uint64(mi*100+P*10+trial), 300*time.Microsecond, 0.3))
				for stepNo := range 2 {
					seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
					for r := range P {
						n := []int{64, 0, 200, 1}[(r+trial+stepNo)%4]
						seeds[r] = randomSeeds(uint64(100*P+10*trial+r+1000*stepNo), g.NumRows, n)
						keys[r] = sample.Key{Seed: 9, Epoch: trial, Batch: r + 10*stepNo}
					}
					before := make([]Stats, P)
					for r := range P {
						before[r] = ss[r].Stats()
					}
					got, errs := cpuStep(ctx, ss, seeds, keys)
					name := fmt.Sprintf("%+v P=%d offsets %v step %d", mode, P, off, stepNo)
					for r := range P {
						if errs[r] != nil {
							t.Fatalf("%s rank %d: %v", name, r, errs[r])
						}
						want, err := ref.Sample(seeds[r], keys[r])
						if err != nil {
							t.Fatal(err)
						}
						if P == 1 {
							d, errs := cpuStep(ctx, direct, seeds, keys)
							if errs[0] != nil {
								t.Fatal(errs[0])
							}
							compareBlocks(t, name+" sampling directly", d[0], want.Blocks)
						}
						if !mode.EdgeIDs {
							for i := range got[r] {
								for _, e := range got[r][i].EdgeIDs {
									if e != -1 {
										t.Fatalf("%s rank %d: edge ID %d without EdgeIDs", name, r, e)
									}
								}
								got[r][i].EdgeIDs = want.Blocks[i].EdgeIDs
							}
						}
						compareBlocks(t, fmt.Sprintf("%s rank %d", name, r), got[r], want.Blocks)
						st := ss[r].Stats()
						if w := wantWaits(mode.Fanouts, P > 1, mode.EdgeIDs); st.Waits-before[r].Waits != w {
							t.Errorf("%s rank %d: %d host waits, want %d", name, r, st.Waits-before[r].Waits, w)
						}
						for h := range len(mode.Fanouts) {
							if d := st.Frontier[h] - before[r].Frontier[h]; d != int64(want.Blocks[len(mode.Fanouts)-1-h].NumDst) {
								t.Errorf("%s rank %d: frontier of hop %d counted %d, want %d", name, r, h, d, want.Blocks[len(mode.Fanouts)-1-h].NumDst)
							}
						}
						if st.Batches != before[r].Batches+1 || (P > 1) != (st.Exchanges > before[r].Exchanges) || st.BytesSent[r] != 0 {
							t.Errorf("%s rank %d: stats %+v", name, r, st)
						}
					}
					checkMachines(t, name, ms, 1)
				}
			}
		}
	}
}

// TestProtocolFailures: a failure before a hop's header exchange (bad
// seeds, routing, the previous hop's tail, a fanout -1 hop's owner
// before its totals exchange) makes every rank fail at the same hop
// without waiting for a deadline, the failing rank with its own error;
// the group samples normally afterwards. A failure in the last hop's
// tail fails that rank alone.
func TestProtocolFailures(t *testing.T) {
	g := randomGraph(4, 2000, 6)
	P := 3
	off := []int64{0, 600, 1400, 2000}
	good := func(r int) []graph.NodeID { return ownedSeeds(uint64(r), off, r, 40) }
	for _, c := range []struct {
		name    string
		fan     []int
		rank    int    // the failing rank
		op      string // injected failure (op, call), or bad seeds when ""
		call    int
		selfHop int // the hop of the failing rank's error
		peerHop int // the hop of the peers' ErrPeer (-1: peers succeed)
		want    error
	}{
		{"bad seeds", []int{4, 4, 4}, 1, "", 0, 0, 0, ErrInput},
		{"routing", []int{4, 4, 4}, 2, "route", 2, 1, 1, nil},
		{"relabel carried to the next header", []int{4, 4, 4}, 0, "relabel", 1, 0, 1, nil},
		{"owner counting, fanout -1", []int{2, -1}, 1, "countExact", 1, 1, 1, nil},
		{"last hop's tail", []int{4, 4, 4}, 2, "relabel", 3, 2, -1, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ss, ms := cpuGroup(t, g, off, Config{Fanouts: c.fan}, nil)
			seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
			for r := range P {
				seeds[r], keys[r] = good(r), sample.Key{Seed: 5, Batch: r}
			}
			if c.op == "" {
				seeds[c.rank] = append(slices.Clone(seeds[c.rank]), seeds[c.rank][0])
			} else {
				ms[c.rank].failAt = map[string]int{c.op: c.call}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			_, errs := cpuStep(ctx, ss, seeds, keys)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("failing took %v: the ranks waited for a deadline", d)
			}
			checkFailedStep(t, errs, c.rank, c.selfHop, c.peerHop, c.want)
			checkMachines(t, c.name, ms, 1)
			seeds[c.rank] = good(c.rank)
			if _, errs := cpuStep(ctx, ss, seeds, keys); errors.Join(errs...) != nil {
				t.Fatalf("after a failed step: %v", errors.Join(errs...))
			}
			checkMachines(t, c.name+", next step", ms, 1)
		})
	}
}

// TestProtocolFailureAfterHeader pins the documented limit: a rank that
// fails between a hop's header and its answer exchange (here the owner's
// draw) returns at once, and its peers' next exchange ends at the
// context's deadline.
func TestProtocolFailureAfterHeader(t *testing.T) {
	g := randomGraph(5, 1000, 6)
	off := []int64{0, 500, 1000}
	ss, ms := cpuGroup(t, g, off, Config{Fanouts: []int{3, 3}}, nil)
	ms[0].failAt = map[string]int{"drawStrided": 1}
	seeds := [][]graph.NodeID{ownedSeeds(1, off, 0, 30), ownedSeeds(2, off, 1, 30)}
	keys := []sample.Key{{Seed: 1}, {Seed: 1, Batch: 1}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, errs := cpuStep(ctx, ss, seeds, keys)
	var ge *Error
	if !errors.As(errs[0], &ge) || ge.Hop != 0 || !strings.Contains(errs[0].Error(), "drawing") {
		t.Errorf("rank 0: %v, want its draw's failure at hop 0", errs[0])
	}
	if !errors.Is(errs[1], context.DeadlineExceeded) {
		t.Errorf("rank 1: %v, want the deadline", errs[1])
	}
}

// checkFailedStep checks the errors of a collective step in which rank
// failed: its own *Error at selfHop (of kind want when set), and every
// other rank an ErrPeer naming it at peerHop (peerHop < 0: they
// succeeded).
func checkFailedStep(t *testing.T, errs []error, rank, selfHop, peerHop int, want error) {
	t.Helper()
	for r, err := range errs {
		var ge *Error
		switch {
		case r == rank:
			if err == nil || !errors.As(err, &ge) || ge.Rank != r || ge.Hop != selfHop || errors.Is(err, ErrPeer) ||
				(want != nil && !errors.Is(err, want)) {
				t.Errorf("failing rank %d: %v, want its own error at hop %d", r, err, selfHop)
			}
		case peerHop < 0:
			if err != nil {
				t.Errorf("rank %d: %v, want success", r, err)
			}
		default:
			if !errors.Is(err, ErrPeer) || !errors.As(err, &ge) || ge.Rank != r || ge.Hop != peerHop ||
				!strings.Contains(err.Error(), fmt.Sprintf("rank %d: ", rank)) {
				t.Errorf("rank %d: %v, want ErrPeer naming rank %d at hop %d", r, err, rank, peerHop)
			}
		}
	}
}

// TestFailureSweep fails every machine call of one rank's step in turn
// (each call of each operation of a clean step, on rank 0 of 2, for the
// node-wise and layer-wise samplers and the walker): the failing rank
// returns its own *Error, its peer succeeds, fails with ErrPeer or ends
// at the deadline (a failure after a header), and neither leaves a
// buffer behind or misuses one.
func TestFailureSweep(t *testing.T) {
	g := randomGraph(11, 600, 5)
	off := []int64{0, 250, 600}
	seeds := [][]graph.NodeID{ownedSeeds(1, off, 0, 30), ownedSeeds(2, off, 1, 30)}
	keys := []sample.Key{{Seed: 3}, {Seed: 3, Batch: 1}}
	kinds := []struct {
		name string
		open func(t *testing.T) ([]*checked, func(ctx context.Context) []error)
		own  int // the protocol's own buffers
	}{
		{"node-wise", func(t *testing.T) ([]*checked, func(ctx context.Context) []error) {
			ss, ms := cpuGroup(t, g, off, Config{Fanouts: []int{3, -1}, EdgeIDs: true}, nil)
			return ms, func(ctx context.Context) []error { _, errs := cpuStep(ctx, ss, seeds, keys); return errs }
		}, 1},
		{"layer-wise", func(t *testing.T) ([]*checked, func(ctx context.Context) []error) {
			ss, ms := cpuLayerGroup(t, g, off, Config{Fanouts: []int{40, -1}, EdgeIDs: true}, nil)
			return ms, func(ctx context.Context) []error { _, errs := layerSampleAll(ctx, ss, seeds, keys); return errs }
		}, 2},
		{"walk", func(t *testing.T) ([]*checked, func(ctx context.Context) []error) {
			ws, ms := cpuWalkGroup(t, g, off, 3, nil)
			return ms, func(ctx context.Context) []error { _, errs := walkAll(ctx, ws, seeds, keys); return errs }
		}, 2},
	}
	for _, k := range kinds {
		ms, step := k.open(t)
		if errs := step(context.Background()); errors.Join(errs...) != nil {
			t.Fatalf("%s: %v", k.name, errors.Join(errs...))
		}
		var ops []string
		for op := range ms[0].calls {
			ops = append(ops, op)
		}
		slices.Sort(ops)
		for _, op := range ops {
			for call := 1; call <= ms[0].calls[op]; call++ {
				if testing.Short() && call%3 != 1 {
					continue
				}
				name := fmt.Sprintf("%s: %s call %d", k.name, op, call)
				ms, step := k.open(t)
				ms[0].failAt = map[string]int{op: call}
				ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
				errs := step(ctx)
				cancel()
				var ge *Error
				if !errors.As(errs[0], &ge) || ge.Rank != 0 || errors.Is(errs[0], ErrPeer) || !strings.Contains(errs[0].Error(), "injected failure of "+op) {
					t.Errorf("%s: rank 0: %v, want its own error", name, errs[0])
				}
				if err := errs[1]; err != nil && !errors.Is(err, ErrPeer) && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: rank 1: %v, want success, ErrPeer or the deadline", name, err)
				}
				checkMachines(t, name, ms, k.own)
			}
		}
	}
}
