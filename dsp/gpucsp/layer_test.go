package gpucsp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dsp/csp"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// ---- A host mirror of gpuLayerMachine: the node-wise mirror for
// buffers, routing and relabeling, and every kernel of layer.cu plus the
// uniform draws of gpusample's gs_draw_row in Go.

type hostLayerMachine struct {
	*hostMachine
	g                 *graph.CSR // the patch
	lo, hi, n         int64
	replace, weighted bool
	roww              []int64
	cum               []float64
	last              []int32
	// corrupt makes the machine misbehave once: "owner" writes an
	// impossible owner into the frontier's degrees (the requester's host
	// check), "count" asks an owner for one edge more than the allocation
	// says (the owner's device check).
	corrupt string
}

func (m *hostLayerMachine) w() int64 {
	if m.weighted {
		return 2
	}
	return 1
}

// info mirrors lw_info.
func (m *hostLayerMachine) info(ids backend.Buffer, R int64, out, bad backend.Buffer) error {
	if err := m.enter("info", ids, out, bad); err != nil {
		return err
	}
	w := m.w()
	if int64(len(i64s(out))) < R*w {
		return m.bad("info: %d words for %d nodes", len(i64s(out)), R)
	}
	for i, v := range i32s(ids)[:R] {
		var d, wb int64
		if r := int64(v) - m.lo; r < 0 || int64(v) >= m.hi {
			i64s(bad)[0]++
		} else {
			d = m.g.Indptr[v+1] - m.g.Indptr[v]
			if m.weighted {
				wb = m.roww[r]
			}
		}
		i64s(out)[int64(i)*w] = d
		if m.weighted {
			i64s(out)[int64(i)*w+1] = wb
		}
	}
	return nil
}

// frontierInfo mirrors lw_frontier_info.
func (m *hostLayerMachine) frontierInfo(out, in, pos backend.Buffer, bptr []int64, nF int64) error {
	if err := m.enter("frontierInfo", out, in, pos); err != nil {
		return err
	}
	w, P := m.w(), int64(m.P)
	if len(bptr) != m.P+1 || bptr[P] != nF {
		return m.bad("frontierInfo: bptr %v for %d nodes", bptr, nF)
	}
	for j := range nF {
		q := edgeRow(bptr, P, j)
		i := int64(i32s(pos)[j])
		i64s(out)[i*w] = i64s(in)[j*w]&(1<<ownerShift-1) | q<<ownerShift
		if m.weighted {
			i64s(out)[i*w+1] = i64s(in)[j*w+1]
		}
	}
	if m.corrupt == "owner" && nF > 0 {
		i64s(out)[0] |= int64(m.P+3) << ownerShift
		m.corrupt = ""
	}
	return nil
}

// packAlloc mirrors lw_pack_alloc.
func (m *hostLayerMachine) packAlloc(allocG, msg, allocF, pos backend.Buffer, bptr, hdr []int64, nF int64) error {
	if err := m.enter("packAlloc", allocG, msg, allocF, pos); err != nil {
		return err
	}
	P := int64(m.P)
	if len(hdr) != 2*m.P || len(bptr) != m.P+1 || int64(len(i64s(msg))) < nF+2*P {
		return m.bad("packAlloc: hdr %d, bptr %d, msg %d for %d nodes", len(hdr), len(bptr), len(i64s(msg)), nF)
	}
	g, ms := i64s(allocG), i64s(msg)
	for j := range nF {
		q := edgeRow(bptr, P, j)
		a := i64s(allocF)[i32s(pos)[j]]
		g[j] = a
		ms[j+2*(q+1)] = a
	}
	g[nF] = 0
	for q := range P {
		ms[bptr[q]+2*q], ms[bptr[q]+2*q+1] = hdr[2*q], hdr[2*q+1]
	}
	if m.corrupt == "count" && nF > 0 {
		q := edgeRow(bptr, P, 0)
		ms[2*(q+1)]++
		m.corrupt = ""
	}
	return nil
}

// drawLayer mirrors lw_owner_counts, the scan, lw_owner_check, lw_guard,
// the -1 fill and the draws (gs_draw_row through DrawHop and
// csp_add_i64, or lw_draw_weighted).
func (m *hostLayerMachine) drawLayer(ids, info, msg backend.Buffer, R int64, roff, tot []int64, keys []uint64, src, eid backend.Buffer, E int64, bad backend.Buffer) error {
	if err := m.enter("drawLayer", ids, info, msg, src, eid, bad); err != nil {
		return err
	}
	P, w := int64(m.P), m.w()
	if len(roff) != m.P+1 || roff[P] != R || len(tot) != m.P || len(keys) != m.P || int64(len(i32s(src))) < E || int64(len(i64s(eid))) < E {
		return m.bad("drawLayer: roff %v, tot %v, %d keys, E %d", roff, tot, len(keys), E)
	}
	cnt := make([]int64, R+1)
	for i := range R {
		p := edgeRow(roff, P, i)
		k := i64s(msg)[i+2*(p+1)]
		d := i64s(info)[i*w]
		ok := k >= 0 && k <= maxLayerFanout && !(k > 0 && d == 0) && (m.replace || k <= d)
		if ok && m.weighted && k > 0 {
			ok = math.Float64frombits(uint64(i64s(info)[i*w+1])) > 0
		}
		if !ok {
			i64s(bad)[0]++
			k = 0
		}
		cnt[i] = k
	}
	qptr := exclusiveScan(cnt)
	for p := range P {
		if qptr[roff[p+1]]-qptr[roff[p]] != tot[p] {
			i64s(bad)[0]++
		}
	}
	if i64s(bad)[0] != 0 {
		clear(qptr)
	}
	for t := range E {
		i32s(src)[t], i64s(eid)[t] = -1, -1
	}
	for i := range R {
		s := edgeRow(roff, P, i)
		v := i32s(ids)[i]
		key := rng.Derive(keys[s], uint64(v))
		for j, e := range m.drawRow(key, v, qptr[i+1]-qptr[i]) {
			t := qptr[i] + int64(j)
			i32s(src)[t] = m.g.Indices[e]
			i64s(eid)[t] = e
			if m.weighted {
				i64s(eid)[t] += m.edgeBase
			}
		}
	}
	if !m.weighted {
		for t := range E {
			i64s(eid)[t] += m.edgeBase
		}
	}
	return nil
}

// drawRow is node v's k draws (positions in the patch's indices) under
// key: gs_draw_row's uniform rules (all of the row, uniform with
// replacement, Floyd's algorithm kept sorted) or lw_draw_weighted's
// inverse CDF.
func (m *hostLayerMachine) drawRow(key uint64, v graph.NodeID, k int64) []int64 {
	a, b := m.g.Indptr[v], m.g.Indptr[v+1]
	n := b - a
	out := make([]int64, 0, k)
	switch {
	case k == 0:
	case m.weighted:
		for j := range k {
			h := rng.Hash(key, uint64(j))
			open := float64(h>>11+1) * (1.0 / (1 << 53))
			u := (1 - open) * m.cum[b-1]
			e := sort.Search(int(n), func(e int) bool { return m.cum[a+int64(e)] > u })
			if e == int(n) {
				e = int(m.last[int64(v)-m.lo])
			}
			out = append(out, a+int64(e))
		}
	case k == n && !m.replace:
		for e := a; e < b; e++ {
			out = append(out, e)
		}
	case m.replace:
		for j := range k {
			out = append(out, a+int64(rng.Below(rng.Hash(key, uint64(j)), uint64(n))))
		}
	default:
		ctr := uint64(0)
		for j := n - k; j < n; j++ {
			t := a + int64(rng.Below(rng.Hash(key, ctr), uint64(j+1)))
			ctr++
			q, found := slices.BinarySearch(out, t)
			if found {
				out = append(out, a+j)
				continue
			}
			out = slices.Insert(out, q, t)
		}
	}
	return out
}

// unpackLayer mirrors the scan and lw_unpack.
func (m *hostLayerMachine) unpackLayer(src, eid, ans, ansE, ptr, allocG, pos backend.Buffer, nF, E int64, bad backend.Buffer) error {
	if err := m.enter("unpackLayer", src, eid, ans, ansE, ptr, allocG, pos, bad); err != nil {
		return err
	}
	sptr := exclusiveScan(i64s(allocG)[:nF+1])
	if sptr[nF] != E || i64s(ptr)[nF] != E {
		return m.bad("unpackLayer: counts add up to %d, rows to %d, E %d", sptr[nF], i64s(ptr)[nF], E)
	}
	for t := range E {
		j := edgeRow(sptr, nF, t)
		d := i64s(ptr)[i32s(pos)[j]] + t - sptr[j]
		u := i32s(ans)[t]
		if u < 0 || int64(u) >= m.n {
			i64s(bad)[0]++
			u = 0
		}
		i32s(src)[d] = u
		i64s(eid)[d] = -1
		if ansE != nil {
			i64s(eid)[d] = i64s(ansE)[t]
		}
	}
	return nil
}

// hostLayerRanks are P layer-wise protocol ranks over host machines.
type hostLayerRanks struct {
	p []*lproto
	m []*hostLayerMachine
	L int
}

func newHostLayerRanks(t *testing.T, g *graph.CSR, off []int64, cfg Config) *hostLayerRanks {
	t.Helper()
	if err := checkLayerConfig(cfg); err != nil {
		t.Fatal(err)
	}
	P := len(off) - 1
	b, err := book.New(off)
	if err != nil {
		t.Fatal(err)
	}
	hr := &hostLayerRanks{L: len(cfg.Fanouts)}
	grp := newHostGroup(P)
	for r := range P {
		patch, err := layout.Build(g, b, r, layout.Options{DeviceBytes: layout.NoLimit})
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := b.Range(r)
		hm := &hostMachine{rank: r, P: P, off: b.Offsets(), edgeBase: patch.EdgeBase, fan: cfg.Fanouts, shuffle: new(rng.Stream)}
		*hm.shuffle = rng.NewStream(uint64(91 + r))
		m := &hostLayerMachine{hostMachine: hm, g: patch.Graph, lo: lo, hi: hi, n: g.NumRows, replace: cfg.Replace, weighted: cfg.Weighted}
		if cfg.Weighted {
			m.roww, m.cum, m.last = layerWeights(patch.Graph.Indptr[lo:hi+1], patch.Graph.Weights)
		}
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
		lp := &lproto{proto: p, lm: m, replace: cfg.Replace, weighted: cfg.Weighted}
		if lp.bad, err = m.alloc(backend.Int64, int64(2*len(cfg.Fanouts))); err != nil {
			t.Fatal(err)
		}
		hr.p, hr.m = append(hr.p, lp), append(hr.m, m)
	}
	return hr
}

// step runs one collective step on every rank; each rank's result comes
// back as a host MiniBatch, its parts freed.
func (hr *hostLayerRanks) step(ctx context.Context, seeds [][]graph.NodeID, keys []sample.Key) ([]*sample.MiniBatch, []error) {
	P := len(hr.p)
	out, errs := make([]*sample.MiniBatch, P), make([]error, P)
	var wg sync.WaitGroup
	for r := range P {
		wg.Go(func() {
			p := hr.p[r]
			outs, err := p.sample(ctx, seeds[r], keys[r])
			if err != nil {
				errs[r] = err
				return
			}
			mb := &sample.MiniBatch{Seeds: slices.Clone(seeds[r]), Blocks: make([]sample.Block, hr.L)}
			for h := range outs {
				o := &outs[h]
				mb.Blocks[hr.L-1-h] = sample.Block{NumDst: int(o.nd), SrcNodes: slices.Clone(i32s(o.srcNodes)[:o.ns]),
					Indptr: slices.Clone(i64s(o.ptr)[:o.nd+1]), Indices: slices.Clone(i32s(o.local)[:o.e]), EdgeIDs: slices.Clone(i64s(o.eid)[:o.e])}
				o.free(p.m)
			}
			out[r] = mb
		})
	}
	wg.Wait()
	return out, errs
}

// check fails the test on any misuse of a host machine, and on buffers
// left allocated besides the control and violation buffers.
func (hr *hostLayerRanks) check(t *testing.T, name string) {
	t.Helper()
	for r, m := range hr.m {
		if len(m.misuse) > 0 {
			t.Fatalf("%s: rank %d: %s", name, r, strings.Join(m.misuse, "; "))
		}
		if m.live != 2 {
			t.Fatalf("%s: rank %d holds %d buffers after the step, want 2", name, r, m.live)
		}
	}
}

// wantLayerWaits is the host waits of one layer-wise step: per hop the
// reads of the header, the frontier's degrees and the allocation headers,
// and with a communicator the header, node, degree, allocation and answer
// exchanges (plus the edge IDs'); one read of every block's sizes.
func wantLayerWaits(L int, remote, edgeIDs bool) int64 {
	colls := int64(5)
	if edgeIDs {
		colls++
	}
	if !remote {
		colls = 0
	}
	return 1 + int64(L)*(3+colls)
}

// cpuLayer samples with csp.LayerSampler on P in-process ranks over the
// partition off (P = 1: the single-device reference), one batch per rank.
func cpuLayer(t *testing.T, g *graph.CSR, off []int64, cfg Config, seeds [][]graph.NodeID, keys []sample.Key) []*sample.MiniBatch {
	t.Helper()
	P := len(off) - 1
	b, err := book.New(off)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := inproc.New(P, comm.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out, errs := make([]*sample.MiniBatch, P), make([]error, P)
	var wg sync.WaitGroup
	for r := range P {
		wg.Go(func() {
			patch, err := layout.Build(g, b, r, layout.Options{DeviceBytes: layout.NoLimit})
			if err != nil {
				errs[r] = err
				return
			}
			s, err := csp.NewLayerSampler(cs[r], b, patch, csp.Config{Fanouts: cfg.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted}, nil)
			if err != nil {
				errs[r] = err
				return
			}
			out[r], errs[r] = s.Sample(seeds[r], keys[r])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

var layerModes = []Config{
	{Fanouts: []int{40, 60}, Replace: true},
	{Fanouts: []int{40, 60}, EdgeIDs: true},
	{Fanouts: []int{30, 50, 20}, Replace: true, Weighted: true, EdgeIDs: true},
	{Fanouts: []int{-1, 25}, Replace: true},
	{Fanouts: []int{-1, 30}},
	{Fanouts: []int{5000, 7}}, // a budget above the frontier's edges takes them all
	{Fanouts: []int{400, 9}, Replace: true, Weighted: true},
	// (Weighted with fanout -1 draws every edge's count with replacement;
	// csp refuses it as soon as a frontier node has edges of weight 0.)
}

// TestLayerProtocolMatchesCPU runs the layer-wise protocol (lproto, the
// code GPUs run) on host mirrors of the kernels, on 1-4 ranks with equal
// and random partitions (empty ranks and ranks without seeds included),
// and compares every rank's batch with csp.LayerSampler's: on the same
// partition, and alone on one rank (the single-device reference), for
// two steps in a row. It also counts the host's waits.
func TestLayerProtocolMatchesCPU(t *testing.T) {
	g := randomGraph(6, 1500, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	one := []int64{0, g.NumRows}
	for _, mode := range layerModes {
		for P := 1; P <= 4; P++ {
			trials := 2
			if testing.Short() && P == 3 {
				trials = 1
			}
			for trial := range trials {
				off := randomOffsets(uint64(20*P+trial), g.NumRows, P)
				if trial == 0 {
					off = make([]int64, P+1)
					for p := range off {
						off[p] = g.NumRows * int64(p) / int64(P)
					}
				}
				hr := newHostLayerRanks(t, g, off, mode)
				for stepNo := range 2 {
					seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
					for r := range P {
						n := []int{40, 0, 120, 1}[(r+trial+stepNo)%4]
						seeds[r] = randomSeeds(uint64(300*P+10*trial+r+1000*stepNo), g.NumRows, n)
						keys[r] = sample.Key{Seed: 12, Epoch: trial, Batch: r + 10*stepNo}
					}
					before := make([]int64, P)
					for r := range P {
						before[r] = hr.p[r].stats.Waits
					}
					got, errs := hr.step(ctx, seeds, keys)
					name := fmt.Sprintf("%+v P=%d offsets %v step %d", mode, P, off, stepNo)
					if err := errors.Join(errs...); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					var same []*sample.MiniBatch
					if trial == 0 && P > 1 {
						same = cpuLayer(t, g, off, mode, seeds, keys)
					}
					for r := range P {
						want := cpuLayer(t, g, one, mode, seeds[r:r+1], keys[r:r+1])[0]
						if same != nil && !sameMiniBatch(same[r], want) {
							t.Fatalf("%s rank %d: csp.LayerSampler differs between 1 and %d ranks", name, r, P)
						}
						if !mode.EdgeIDs {
							for i := range got[r].Blocks {
								for _, e := range got[r].Blocks[i].EdgeIDs {
									if e != -1 {
										t.Fatalf("%s rank %d: edge ID %d without EdgeIDs", name, r, e)
									}
								}
								got[r].Blocks[i].EdgeIDs = want.Blocks[i].EdgeIDs
							}
						}
						if !slices.Equal(got[r].Seeds, want.Seeds) {
							t.Fatalf("%s rank %d: seeds differ", name, r)
						}
						compareBlocks(t, fmt.Sprintf("%s rank %d", name, r), got[r].Blocks, want.Blocks)
						if w := wantLayerWaits(hr.L, P > 1, mode.EdgeIDs); hr.p[r].stats.Waits-before[r] != w {
							t.Errorf("%s rank %d: %d host waits, want %d", name, r, hr.p[r].stats.Waits-before[r], w)
						}
					}
					hr.check(t, name)
				}
			}
		}
	}
}

func sameMiniBatch(a, b *sample.MiniBatch) bool {
	if !slices.Equal(a.Seeds, b.Seeds) || len(a.Blocks) != len(b.Blocks) {
		return false
	}
	for i := range a.Blocks {
		x, y := a.Blocks[i], b.Blocks[i]
		if x.NumDst != y.NumDst || !slices.Equal(x.SrcNodes, y.SrcNodes) || !slices.Equal(x.Indptr, y.Indptr) ||
			!slices.Equal(x.Indices, y.Indices) || !slices.Equal(x.EdgeIDs, y.EdgeIDs) {
			return false
		}
	}
	return true
}

// TestLayerProtocolFailures: bad seeds, a failure before a hop's header
// (routing, the previous hop's tail) and a requester's failure while
// allotting its layer (an impossible degree answer) make every rank fail
// at the same hop without waiting for a deadline, the failing rank with
// its own error; an owner asked for more than its allocation says fails
// with the requester at the step's end (ErrProtocol on both). The group
// samples normally afterwards.
func TestLayerProtocolFailures(t *testing.T) {
	g := randomGraph(7, 1200, 6)
	P := 3
	off := []int64{0, 400, 800, 1200}
	good := func(r int) []graph.NodeID { return ownedSeeds(uint64(r+5), off, r, 30) }
	for _, c := range []struct {
		name    string
		rank    int
		op      string // injected failure (op, call), "corrupt:..." or bad seeds when ""
		call    int
		selfHop int
		peerHop int // -1: the other ranks succeed (or fail as owners, see owner)
		want    error
	}{
		{"bad seeds", 1, "", 0, 0, 0, ErrInput},
		{"routing", 2, "route", 2, 1, 1, nil},
		{"relabel carried to the next header", 0, "relabel", 1, 0, 1, nil},
		{"allocation", 1, "corrupt:owner", 0, 0, 0, ErrProtocol},
		// Hop 0's frontier is the seeds, which rank 0 owns: it asks itself,
		// and fails alone when it reads its violation counters.
		{"owner asked too much", 0, "corrupt:count", 0, 0, -1, ErrProtocol},
	} {
		t.Run(c.name, func(t *testing.T) {
			hr := newHostLayerRanks(t, g, off, Config{Fanouts: []int{20, 30, 10}})
			seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
			for r := range P {
				seeds[r], keys[r] = good(r), sample.Key{Seed: 8, Batch: r}
			}
			switch {
			case c.op == "":
				seeds[c.rank] = append(slices.Clone(seeds[c.rank]), seeds[c.rank][0])
			case strings.HasPrefix(c.op, "corrupt:"):
				hr.m[c.rank].corrupt = strings.TrimPrefix(c.op, "corrupt:")
			default:
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

// TestNewLayerValidates: NewLayer checks the patch, offsets and the
// layer-wise configuration before it touches the device.
func TestNewLayerValidates(t *testing.T) {
	g := randomGraph(2, 100, 4)
	off := []int64{0, 100}
	b, _ := book.New(off)
	p, err := layout.Build(g, b, 0, layout.Options{DeviceBytes: layout.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	noW := *p
	gw := *p.Graph
	gw.Weights = nil
	noW.Graph = &gw
	negW := *p
	gn := *p.Graph
	gn.Weights = slices.Clone(gn.Weights)
	gn.Weights[3] = -1
	negW.Graph = &gn
	ok := Config{Fanouts: []int{30, 20}}
	for _, c := range []struct {
		name  string
		patch *layout.Patch
		off   []int64
		cfg   Config
		want  string
	}{
		{"nil patch", nil, off, ok, "nil patch"},
		{"bad offsets", p, []int64{0, 50, 40}, ok, "offsets"},
		{"parts vs ranks", p, []int64{0, 40, 100}, ok, "2 parts in the offsets but the communicator has 1 ranks"},
		{"no fanouts", p, off, Config{}, "0 fanouts"},
		{"zero fanout", p, off, Config{Fanouts: []int{3, 0}}, "fanout 0 of hop 1"},
		{"huge fanout", p, off, Config{Fanouts: []int{1 << 25}}, "fanout 33554432 of hop 0"},
		{"weighted without replacement", p, off, Config{Fanouts: []int{3}, Weighted: true}, "with replacement only"},
		{"no weights", &noW, off, Config{Fanouts: []int{3}, Weighted: true, Replace: true}, "needs edge weights"},
		{"negative weight", &negW, off, Config{Fanouts: []int{3}, Weighted: true, Replace: true}, "edge 3 of the patch has weight -1"},
		{"nil device", p, off, ok, "nil device"},
	} {
		_, err := NewLayer(nil, c.patch, c.off, nil, c.cfg)
		var ge *Error
		if !errors.Is(err, ErrInput) || !errors.As(err, &ge) || ge.Op != "gpucsp.NewLayer" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInput mentioning %q", c.name, err, c.want)
		}
	}
}
