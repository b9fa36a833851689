package gpucsp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// hostLocal is the exchanger of a single host rank: a copy.
type hostLocal struct{}

func (hostLocal) AllToAll(_ context.Context, dst, src backend.Buffer) error {
	return hostLocal{}.AllToAllV(nil, dst, nil, src, nil)
}
func (hostLocal) AllToAllV(_ context.Context, dst backend.Buffer, _ []int, src backend.Buffer, _ []int) error {
	d, s := dst.(*hbuf), src.(*hbuf)
	if d.dt != s.dt || d.Len() != s.Len() {
		return fmt.Errorf("local exchange of %d %v into %d %v", s.Len(), s.dt, d.Len(), d.dt)
	}
	copy(d.i32, s.i32)
	copy(d.i64, s.i64)
	return nil
}

// hostRanks are P protocol ranks over host machines, as New builds them
// over GPUs (P == 1: the protocol with a local exchanger).
type hostRanks struct {
	p     []*proto
	m     []*hostMachine
	keyOf map[uint64]sample.Key
	L     int
}

func newHostRanks(t *testing.T, g *graph.CSR, off []int64, cfg Config) *hostRanks {
	t.Helper()
	P := len(off) - 1
	b, err := book.New(off)
	if err != nil {
		t.Fatal(err)
	}
	hr := &hostRanks{keyOf: map[uint64]sample.Key{}, L: len(cfg.Fanouts)}
	grp := newHostGroup(P)
	for r := range P {
		patch, err := layout.Build(g, b, r, layout.Options{DeviceBytes: layout.NoLimit})
		if err != nil {
			t.Fatal(err)
		}
		owner, err := sample.NewNeighborSampler(patch.Graph, sample.Config{Fanouts: cfg.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted})
		if err != nil {
			t.Fatal(err)
		}
		m := &hostMachine{rank: r, P: P, off: b.Offsets(), owner: owner, edgeBase: patch.EdgeBase, fan: cfg.Fanouts,
			keyOf: hr.keyOf, shuffle: new(rng.Stream)}
		*m.shuffle = rng.NewStream(uint64(77 + r))
		lo, hi := b.Range(r)
		st := &Stats{BytesSent: make([]int64, P), Frontier: make([]int64, len(cfg.Fanouts))}
		p := &proto{m: m, rank: r, size: P, n: b.NumNodes(), off: b.Offsets(), rows: hi - lo, fan: cfg.Fanouts, edgeIDs: cfg.EdgeIDs, stats: st}
		if P > 1 {
			p.x, p.remote = hostComm{grp, r}, true
		} else {
			p.x = hostLocal{}
		}
		if p.ctl, err = m.alloc(backend.Int64, ctlLayout{P}.words()); err != nil {
			t.Fatal(err)
		}
		hr.p, hr.m = append(hr.p, p), append(hr.m, m)
	}
	return hr
}

// step runs one collective step on every rank; each rank's result comes
// back as host blocks (first layer first), its parts freed.
func (hr *hostRanks) step(ctx context.Context, seeds [][]graph.NodeID, keys []sample.Key) ([][]sample.Block, []error) {
	P := len(hr.p)
	for r := range P {
		for h := range hr.L {
			hr.keyOf[sample.HopKey(keys[r], h)] = keys[r]
		}
	}
	out, errs := make([][]sample.Block, P), make([]error, P)
	var wg sync.WaitGroup
	for r := range P {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := hr.p[r]
			outs, err := p.sample(ctx, seeds[r], keys[r])
			if err != nil {
				errs[r] = err
				return
			}
			out[r] = make([]sample.Block, hr.L)
			for h := range outs {
				o := &outs[h]
				out[r][hr.L-1-h] = sample.Block{NumDst: int(o.nd), SrcNodes: slices.Clone(i32s(o.srcNodes)[:o.ns]),
					Indptr: slices.Clone(i64s(o.ptr)[:o.nd+1]), Indices: slices.Clone(i32s(o.local)[:o.e]), EdgeIDs: slices.Clone(i64s(o.eid)[:o.e])}
				o.free(p.m)
			}
		}()
	}
	wg.Wait()
	return out, errs
}

// check fails the test on any misuse of a host machine, and on buffers
// left allocated besides the control buffer.
func (hr *hostRanks) check(t *testing.T, name string) {
	t.Helper()
	for r, m := range hr.m {
		if len(m.misuse) > 0 {
			t.Fatalf("%s: rank %d: %s", name, r, strings.Join(m.misuse, "; "))
		}
		if m.live != 1 {
			t.Fatalf("%s: rank %d holds %d buffers after the step, want 1 (the control buffer)", name, r, m.live)
		}
	}
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
// host mirrors of the kernels, on 1-4 ranks with random partitions
// (empty ranks and ranks without seeds included), and compares every
// rank's batch with sample.NeighborSampler's over the whole graph, for
// two steps in a row. It also counts the host's waits per step.
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
	for _, mode := range modes {
		ref, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: mode.Fanouts, Replace: mode.Replace, Weighted: mode.Weighted})
		if err != nil {
			t.Fatal(err)
		}
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
				hr := newHostRanks(t, g, off, mode)
				for stepNo := range 2 {
					seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
					for r := range P {
						n := []int{64, 0, 200, 1}[(r+trial+stepNo)%4]
						seeds[r] = randomSeeds(uint64(100*P+10*trial+r+1000*stepNo), g.NumRows, n)
						keys[r] = sample.Key{Seed: 9, Epoch: trial, Batch: r + 10*stepNo}
					}
					before := make([]Stats, P)
					for r := range P {
						before[r] = *hr.p[r].stats
						before[r].Frontier = slices.Clone(before[r].Frontier)
						before[r].BytesSent = slices.Clone(before[r].BytesSent)
					}
					got, errs := hr.step(ctx, seeds, keys)
					name := fmt.Sprintf("%+v P=%d offsets %v step %d", mode, P, off, stepNo)
					for r := range P {
						if errs[r] != nil {
							t.Fatalf("%s rank %d: %v", name, r, errs[r])
						}
						want, err := ref.Sample(seeds[r], keys[r])
						if err != nil {
							t.Fatal(err)
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
						st := *hr.p[r].stats
						if w := wantWaits(mode.Fanouts, P > 1, mode.EdgeIDs); st.Waits-before[r].Waits != w {
							t.Errorf("%s rank %d: %d host waits, want %d", name, r, st.Waits-before[r].Waits, w)
						}
						for h := range hr.L {
							if d := st.Frontier[h] - before[r].Frontier[h]; d != int64(want.Blocks[hr.L-1-h].NumDst) {
								t.Errorf("%s rank %d: frontier of hop %d counted %d, want %d", name, r, h, d, want.Blocks[hr.L-1-h].NumDst)
							}
						}
						if st.Batches != before[r].Batches+1 || (P > 1) != (st.Exchanges > before[r].Exchanges) || st.BytesSent[r] != 0 {
							t.Errorf("%s rank %d: stats %+v", name, r, st)
						}
					}
					hr.check(t, name)
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
			hr := newHostRanks(t, g, off, Config{Fanouts: c.fan})
			seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
			for r := range P {
				seeds[r], keys[r] = good(r), sample.Key{Seed: 5, Batch: r}
			}
			if c.op == "" {
				seeds[c.rank] = append(slices.Clone(seeds[c.rank]), seeds[c.rank][0])
			} else {
				hr.m[c.rank].failAt = map[string]int{c.op: c.call}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			_, errs := hr.step(ctx, seeds, keys)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("failing took %v: the ranks waited for a deadline", d)
			}
			checkFailedStep(t, errs, c.rank, c.selfHop, c.peerHop, c.want)
			hr.check(t, c.name)
			seeds[c.rank] = good(c.rank)
			if _, errs := hr.step(ctx, seeds, keys); errors.Join(errs...) != nil {
				t.Fatalf("after a failed step: %v", errors.Join(errs...))
			}
			hr.check(t, c.name+", next step")
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
	hr := newHostRanks(t, g, off, Config{Fanouts: []int{3, 3}})
	hr.m[0].failAt = map[string]int{"drawStrided": 1}
	seeds := [][]graph.NodeID{ownedSeeds(1, off, 0, 30), ownedSeeds(2, off, 1, 30)}
	keys := []sample.Key{{Seed: 1}, {Seed: 1, Batch: 1}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, errs := hr.step(ctx, seeds, keys)
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
