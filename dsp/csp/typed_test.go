package csp

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// typedTestGraph is a random typed graph: 3 node types of the given
// sizes and relations 1->0, 0->0, 0->2, 2->0, 1->2 with about deg
// in-edges per destination (rows sorted, no repeats) and positive edge
// weights, so relations have more sources than destinations and fewer.
func typedTestGraph(sizes []int64, deg int, seed uint64) []sample.Relation {
	rel := func(src, dst int, salt uint64) sample.Relation {
		nd, ns := sizes[dst], sizes[src]
		ip := make([]int64, nd+1)
		var ix []int32
		for v := range nd {
			s := rng.NewStream(rng.Derive(seed, salt, uint64(v)))
			k := int(s.Below(uint64(2*deg + 1)))
			var row []int32
			for range k {
				row = append(row, int32(s.Below(uint64(ns))))
			}
			slices.Sort(row)
			ix = append(ix, slices.Compact(row)...)
			ip[v+1] = int64(len(ix))
		}
		w := make([]float32, len(ix))
		s := rng.NewStream(rng.Derive(seed, salt, 1<<40))
		for i := range w {
			w[i] = 0.1 + float32(s.Below(100))
		}
		return sample.Relation{Src: src, Dst: dst, In: &graph.CSR{NumRows: nd, NumCols: ns, Indptr: ip, Indices: ix, Weights: w}}
	}
	return []sample.Relation{rel(1, 0, 1), rel(0, 0, 2), rel(0, 2, 3), rel(2, 0, 4), rel(1, 2, 5)}
}

// typedOffsets are per-type partitions of sizes over P ranks: even ones,
// or random ones (some ranges empty) when seed != 0.
func typedOffsets(sizes []int64, P int, seed uint64) [][]int64 {
	out := make([][]int64, len(sizes))
	for t, n := range sizes {
		if seed == 0 {
			out[t] = make([]int64, P+1)
			for p := range out[t] {
				out[t][p] = n * int64(p) / int64(P)
			}
		} else {
			out[t] = randomOffsets(seed+uint64(t), n, P)
		}
	}
	return out
}

// openTyped opens one typed sampler per rank on CPU back ends with host
// communicators.
func openTyped(t *testing.T, sizes []int64, rels []sample.Relation, off [][]int64, cfg TypedConfig) []*TypedSampler {
	t.Helper()
	P := len(off[0]) - 1
	bs := cpuBackends(t, P)
	cs := cpuComms(t, bs, nil)
	ss := make([]*TypedSampler, P)
	for r := range P {
		var c comm.Comm
		if cs != nil {
			c = cs[r]
		}
		var err error
		if ss[r], err = NewTyped(bs[r], sizes, rels, off, c, cfg); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, s := range ss {
			s.Close()
		}
	})
	return ss
}

func sampleTypedAll(ctx context.Context, ss []*TypedSampler, seeds [][][]graph.NodeID, keys []sample.Key) ([]*sample.HeteroMiniBatch, []error) {
	return onEveryRank(len(ss), func(r int) (*sample.HeteroMiniBatch, error) {
		return ss[r].SampleTypes(ctx, seeds[r], keys[r])
	})
}

// compareHetero requires byte-equal typed batches (EdgeIDs all -1 in got
// when withEdgeIDs is off).
func compareHetero(t *testing.T, name string, got, want *sample.HeteroMiniBatch, withEdgeIDs bool) {
	t.Helper()
	eq := func(a, b any) bool {
		return reflect.DeepEqual(a, b) || (reflect.ValueOf(a).Len() == 0 && reflect.ValueOf(b).Len() == 0)
	}
	if len(got.Blocks) != len(want.Blocks) || len(got.Seeds) != len(want.Seeds) {
		t.Fatalf("%s: %d blocks, %d seed lists; want %d, %d", name, len(got.Blocks), len(got.Seeds), len(want.Blocks), len(want.Seeds))
	}
	for ty := range want.Seeds {
		if !eq(got.Seeds[ty], want.Seeds[ty]) {
			t.Fatalf("%s: seeds of type %d differ", name, ty)
		}
	}
	for i, w := range want.Blocks {
		g := got.Blocks[i]
		if !reflect.DeepEqual(g.NumDst, w.NumDst) {
			t.Fatalf("%s: block %d: NumDst %v, want %v", name, i, g.NumDst, w.NumDst)
		}
		for ty := range w.SrcNodes {
			if !eq(g.SrcNodes[ty], w.SrcNodes[ty]) {
				t.Fatalf("%s: block %d type %d: SrcNodes differ:\n got %v\nwant %v", name, i, ty, trim(g.SrcNodes[ty]), trim(w.SrcNodes[ty]))
			}
		}
		for r := range w.Rels {
			gr, wr := g.Rels[r], w.Rels[r]
			if !eq(gr.Indptr, wr.Indptr) || !eq(gr.Indices, wr.Indices) {
				t.Fatalf("%s: block %d relation %d differs:\n got %v %v\nwant %v %v", name, i, r, trim(gr.Indptr), trim(gr.Indices), trim(wr.Indptr), trim(wr.Indices))
			}
			if withEdgeIDs {
				if !eq(gr.EdgeIDs, wr.EdgeIDs) {
					t.Fatalf("%s: block %d relation %d: EdgeIDs differ:\n got %v\nwant %v", name, i, r, trim(gr.EdgeIDs), trim(wr.EdgeIDs))
				}
			} else if len(gr.EdgeIDs) != len(wr.EdgeIDs) || slices.ContainsFunc(gr.EdgeIDs, func(e int64) bool { return e != -1 }) {
				t.Fatalf("%s: block %d relation %d: EdgeIDs %v, want %d times -1", name, i, r, trim(gr.EdgeIDs), len(wr.EdgeIDs))
			}
		}
	}
}

// TestTypedMatchesHeteroSampler: on 1-4 CPU ranks with even and random
// per-type partitions (empty ranges, ranks without seeds), every rank's
// typed batch equals sample.HeteroSampler's over the whole graph with
// the same seeds and key, byte for byte: with and without replacement,
// weighted, fanout -1, relations left out at a hop (fanout 0), seeds of
// one type and of two.
func TestTypedMatchesHeteroSampler(t *testing.T) {
	sizes := []int64{700, 450, 1100}
	rels := typedTestGraph(sizes, 4, 7)
	modes := []TypedConfig{
		{Fanouts: [][]int{{5, 3}, {4, 2}, {3, 0}, {0, 2}, {2, 2}}, EdgeIDs: true},
		{Fanouts: [][]int{{5, 3}, {4, 2}, {3, 3}, {2, 2}, {2, 0}}, Replace: true},
		{Fanouts: [][]int{{-1, 2}, {3, -1}, {2, 2}, {1, 0}, {0, 3}}, EdgeIDs: true},
		{Fanouts: [][]int{{4, 2}, {3, 2}, {2, 2}, {2, 2}, {3, 1}}, Weighted: true, EdgeIDs: true},
		{Fanouts: [][]int{{4, 2, 2}, {3, 2, 1}, {2, 2, 1}, {2, 2, 1}, {3, 1, 1}}, Weighted: true, Replace: true, EdgeIDs: true},
	}
	if testing.Short() {
		modes = modes[:3]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for mi, cfg := range modes {
		ref, err := sample.NewHeteroSampler(sizes, rels, sample.HeteroConfig{Fanouts: cfg.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted, Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, P := range []int{1, 2, 3, 4} {
			for _, pseed := range []uint64{0, 11} {
				if P == 1 && pseed != 0 {
					continue
				}
				off := typedOffsets(sizes, P, pseed)
				ss := openTyped(t, sizes, rels, off, cfg)
				for bi := range 2 {
					seeds, keys := make([][][]graph.NodeID, P), make([]sample.Key, P)
					for r := range P {
						seeds[r] = make([][]graph.NodeID, len(sizes))
						lo, hi := off[0][r], off[0][r+1]
						if r != 1 || P < 3 { // rank 1 of 3 or 4 has no seeds
							seeds[r][0] = randomSeeds(uint64(100*bi+r+1), hi-lo, min(40, int(hi-lo)))
							for i := range seeds[r][0] {
								seeds[r][0][i] += graph.NodeID(lo)
							}
						}
						if bi == 1 { // seeds of a second type: any nodes
							seeds[r][2] = randomSeeds(uint64(7*r+3), sizes[2], 15)
						}
						keys[r] = sample.Key{Seed: 5, Epoch: mi, Batch: bi*P + r}
					}
					got, errs := sampleTypedAll(ctx, ss, seeds, keys)
					if err := errors.Join(errs...); err != nil {
						t.Fatalf("mode %d P=%d partition %d batch %d: %v", mi, P, pseed, bi, err)
					}
					for r := range P {
						want, err := ref.SampleTypes(seeds[r], keys[r])
						if err != nil {
							t.Fatal(err)
						}
						compareHetero(t, fmt.Sprintf("mode %d P=%d partition %d batch %d rank %d", mi, P, pseed, bi, r), got[r], want, cfg.EdgeIDs)
					}
				}
				st := ss[0].Stats()
				if st.Batches != 2 || (P > 1 && st.Exchanges == 0) || st.Frontier[0] == 0 {
					t.Errorf("mode %d P=%d: stats %+v: want 2 batches, exchanges on several ranks, a frontier", mi, P, st)
				}
			}
		}
	}
}

// TestTypedErrors: invalid seeds on one rank fail that rank with
// ErrInput and its peers with ErrPeer at the same step, and the group
// samples on afterwards; bad configurations and partitions are refused
// by NewTyped; a closed sampler refuses work.
func TestTypedErrors(t *testing.T) {
	sizes := []int64{300, 200, 400}
	rels := typedTestGraph(sizes, 3, 2)
	cfg := TypedConfig{Fanouts: [][]int{{3, 2}, {3, 2}, {2, 2}, {2, 0}, {0, 1}}}
	off := typedOffsets(sizes, 3, 0)
	ss := openTyped(t, sizes, rels, off, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	good := func(r int) [][]graph.NodeID {
		s := make([][]graph.NodeID, 3)
		s[0] = []graph.NodeID{graph.NodeID(off[0][r]), graph.NodeID(off[0][r] + 1)}
		return s
	}
	keys := []sample.Key{{Seed: 1}, {Seed: 1, Batch: 1}, {Seed: 1, Batch: 2}}
	for name, bad := range map[string][][]graph.NodeID{
		"node out of range": {{5, 300}, nil, nil},
		"duplicate seed":    {nil, {4, 9, 4}, nil},
		"seed lists":        {{1}},
	} {
		seeds := [][][]graph.NodeID{good(0), bad, good(2)}
		_, errs := sampleTypedAll(ctx, ss, seeds, keys)
		if !errors.Is(errs[1], ErrInput) || !errors.Is(errs[0], ErrPeer) || !errors.Is(errs[2], ErrPeer) {
			t.Fatalf("%s: errors %v, want ErrInput on rank 1 and ErrPeer on the others", name, errs)
		}
		var ge *Error
		if !errors.As(errs[0], &ge) || ge.Rank != 0 {
			t.Fatalf("%s: rank 0's error %v does not name its rank", name, errs[0])
		}
		seeds = [][][]graph.NodeID{good(0), good(1), good(2)}
		if _, errs := sampleTypedAll(ctx, ss, seeds, keys); errors.Join(errs...) != nil {
			t.Fatalf("%s: the batch after: %v", name, errors.Join(errs...))
		}
	}
	be := cpuBackends(t, 1)[0]
	one := typedOffsets(sizes, 1, 0)
	for name, c := range map[string]struct {
		off [][]int64
		cfg TypedConfig
	}{
		"offsets per type": {one[:2], cfg},
		"offsets' total":   {[][]int64{{0, 300}, {0, 199}, {0, 400}}, cfg},
		"offsets' parts":   {typedOffsets(sizes, 2, 0), cfg},
		"fanout lists":     {one, TypedConfig{Fanouts: cfg.Fanouts[:4]}},
		"fanout":           {one, TypedConfig{Fanouts: [][]int{{3, -2}, {3, 2}, {2, 2}, {2, 0}, {0, 1}}}},
		"nothing sampled":  {one, TypedConfig{Fanouts: [][]int{{0}, {0}, {0}, {0}, {0}}}},
		"weights":          {one, TypedConfig{Fanouts: cfg.Fanouts, Weighted: true}},
	} {
		rs := rels
		if name == "weights" {
			rs = slices.Clone(rels)
			g := *rs[0].In
			g.Weights = nil
			rs[0].In = &g
		}
		if _, err := NewTyped(be, sizes, rs, c.off, nil, c.cfg); !errors.Is(err, ErrInput) {
			t.Errorf("%s: %v, want ErrInput", name, err)
		}
	}
	if _, err := NewTyped(otherBackend{}, sizes, rels, one, nil, cfg); !errors.Is(err, ErrInput) {
		t.Errorf("another back end: %v, want ErrInput", err)
	}
	s, err := NewTyped(be, sizes, rels, one, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sample(ctx, 3, nil, keys[0]); !errors.Is(err, ErrInput) {
		t.Errorf("seed type 3: %v, want ErrInput", err)
	}
	if _, err := s.Sample(ctx, 0, []graph.NodeID{1, 2}, keys[0]); err != nil {
		t.Errorf("after a bad call: %v", err)
	}
	s.Close()
	if _, err := s.Sample(ctx, 0, []graph.NodeID{1}, keys[0]); !errors.Is(err, ErrInput) {
		t.Errorf("closed: %v, want ErrInput", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// failingMachine fails its op's at-th call (relabel or route) and
// passes everything else to Machine.
type failingMachine struct {
	Machine
	op       string
	at, seen int
}

func (f *failingMachine) fail(op string) error {
	if op != f.op {
		return nil
	}
	f.seen++
	if f.seen == f.at {
		return fmt.Errorf("injected failure of %s (call %d)", op, f.at)
	}
	return nil
}

func (f *failingMachine) Relabel(F backend.Buffer, nF int64, src, ptr backend.Buffer, e int64) (a, b, c backend.Buffer, err error) {
	if err := f.fail("relabel"); err != nil {
		return nil, nil, nil, err
	}
	return f.Machine.Relabel(F, nF, src, ptr, e)
}

func (f *failingMachine) Route(hdr, sendIDs, pos, F, nFB, ctr backend.Buffer, fcap int64, key uint64, hop, fanout, hops int) error {
	if err := f.fail("route"); err != nil {
		return err
	}
	return f.Machine.Route(hdr, sendIDs, pos, F, nFB, ctr, fcap, key, hop, fanout, hops)
}

// TestTypedFailures: a rank whose routing fails reports it in that
// relation's header (its peers fail with ErrPeer at the same hop); a
// failed relabel is carried to the next hop's first header; one in the
// last hop fails only its rank. The group samples on afterwards, and
// every batch still equals the single-device sampler's.
func TestTypedFailures(t *testing.T) {
	sizes := []int64{300, 200, 400}
	rels := typedTestGraph(sizes, 3, 4)
	cfg := TypedConfig{Fanouts: [][]int{{3, 2, 2}, {3, 2, 1}, {2, 2, 2}, {2, 0, 1}, {0, 1, 1}}}
	ref, err := sample.NewHeteroSampler(sizes, rels, sample.HeteroConfig{Fanouts: cfg.Fanouts})
	if err != nil {
		t.Fatal(err)
	}
	P := 3
	off := typedOffsets(sizes, P, 3)
	seeds, keys := make([][][]graph.NodeID, P), make([]sample.Key, P)
	for r := range P {
		seeds[r] = [][]graph.NodeID{randomSeeds(uint64(r), sizes[0], 20), nil, nil}
		keys[r] = sample.Key{Seed: 4, Batch: r}
	}
	for _, c := range []struct {
		name             string
		op               string
		at               int
		rank             int
		selfHop, peerHop int
	}{
		// The first relation's machine routes relation 0 once per hop
		// and relabels every type with edges (all three, each hop, here).
		{"routing", "route", 2, 1, 1, 1},
		{"relabel carried to the next header", "relabel", 1, 0, 0, 1},
		{"last hop's relabel", "relabel", 7, 2, 2, -1},
	} {
		ss := openTyped(t, sizes, rels, off, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		fm := &failingMachine{Machine: ss[c.rank].first.p.m, op: c.op, at: c.at}
		ss[c.rank].first.p.m = fm
		start := time.Now()
		_, errs := sampleTypedAll(ctx, ss, seeds, keys)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: failing took %v: the ranks waited for a deadline", c.name, d)
		}
		if fm.seen < c.at {
			t.Fatalf("%s: %s called %d times, fewer than %d", c.name, c.op, fm.seen, c.at)
		}
		checkFailedStep(t, errs, c.rank, c.selfHop, c.peerHop, nil)
		got, errs := sampleTypedAll(ctx, ss, seeds, keys)
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s: the batch after: %v", c.name, err)
		}
		for r := range P {
			want, err := ref.SampleTypes(seeds[r], keys[r])
			if err != nil {
				t.Fatal(err)
			}
			compareHetero(t, fmt.Sprintf("%s: rank %d", c.name, r), got[r], want, false)
		}
	}
}

// countingComm counts the collectives a rank issues (every call is a
// round: a launch and a synchronization on NCCL, a round trip across
// hosts).
type countingComm struct {
	comm.Comm
	rounds atomic.Int64
}

func (c *countingComm) AllToAll(ctx context.Context, dst, src backend.Buffer) error {
	c.rounds.Add(1)
	return c.Comm.AllToAll(ctx, dst, src)
}

func (c *countingComm) AllToAllV(ctx context.Context, dst backend.Buffer, recv []int, src backend.Buffer, send []int) error {
	c.rounds.Add(1)
	return c.Comm.AllToAllV(ctx, dst, recv, src, send)
}

// TestTypedRoundsPerHop: the collective rounds of a typed batch do not
// grow with the number of relations: a hop costs a header all-to-all,
// the requests' and the answers' all-to-all-v (edge IDs: one more), and
// one totals all-to-all when some relation takes every neighbor, for 1,
// 2, 3 or 5 relations; the batches still equal sample.HeteroSampler's.
func TestTypedRoundsPerHop(t *testing.T) {
	sizes := []int64{300, 200, 400}
	all := typedTestGraph(sizes, 3, 9)
	const P = 3
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		name    string
		edgeIDs bool
		exact   bool // relation 0 takes every neighbor at hop 0
		perHop  []int64
	}{
		{"fixed fanouts", false, false, []int64{3, 3}},
		{"edge IDs", true, false, []int64{4, 4}},
		{"fanout -1 at hop 0", false, true, []int64{4, 3}},
	} {
		for _, use := range [][]int{{0}, {0, 1}, {0, 1, 3}, {0, 1, 2, 3, 4}} {
			rels := make([]sample.Relation, len(use))
			fan := make([][]int, len(use))
			for i, r := range use {
				rels[i], fan[i] = all[r], []int{3, 2}
			}
			if c.exact {
				fan[0][0] = -1
			}
			off := typedOffsets(sizes, P, 5)
			bs := cpuBackends(t, P)
			cs := cpuComms(t, bs, nil)
			counted := make([]*countingComm, P)
			seeds, keys := make([][][]graph.NodeID, P), make([]sample.Key, P)
			for r := range P {
				counted[r] = &countingComm{Comm: cs[r]}
				seeds[r] = [][]graph.NodeID{randomSeeds(uint64(r+1), sizes[0], 25), nil, nil}
				keys[r] = sample.Key{Seed: 8, Batch: r}
			}
			// The first hop alone, then both: each hop's rounds.
			for hops := 1; hops <= 2; hops++ {
				hf := make([][]int, len(fan))
				for i := range fan {
					hf[i] = fan[i][:hops]
				}
				ss := make([]*TypedSampler, P)
				before := make([]int64, P)
				for r := range P {
					var err error
					if ss[r], err = NewTyped(bs[r], sizes, rels, off, counted[r], TypedConfig{Fanouts: hf, EdgeIDs: c.edgeIDs}); err != nil {
						t.Fatal(err)
					}
					defer ss[r].Close()
					before[r] = counted[r].rounds.Load()
				}
				got, errs := sampleTypedAll(ctx, ss, seeds, keys)
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("%s, relations %v, %d hops: %v", c.name, use, hops, err)
				}
				var want int64
				for _, n := range c.perHop[:hops] {
					want += n
				}
				for r := range P {
					if n := counted[r].rounds.Load() - before[r]; n != want {
						t.Errorf("%s, relations %v: %d rounds for %d hops on rank %d, want %d (per hop %v)", c.name, use, n, hops, r, want, c.perHop[:hops])
					}
				}
				ref, err := sample.NewHeteroSampler(sizes, rels, sample.HeteroConfig{Fanouts: hf})
				if err != nil {
					t.Fatal(err)
				}
				for r := range P {
					w, err := ref.SampleTypes(seeds[r], keys[r])
					if err != nil {
						t.Fatal(err)
					}
					compareHetero(t, fmt.Sprintf("%s, relations %v, %d hops, rank %d", c.name, use, hops, r), got[r], w, c.edgeIDs)
				}
			}
		}
	}
}
