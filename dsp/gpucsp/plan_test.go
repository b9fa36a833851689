package gpucsp

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
)

func TestOwnerOf(t *testing.T) {
	for _, off := range [][]int64{{0, 10}, {0, 3, 3, 7, 7, 8}, {0, 0, 5}, {0, 4, 4}, {0, 1, 2, 3, 4}} {
		b, err := book.New(off)
		if err != nil {
			t.Fatal(err)
		}
		P := len(off) - 1
		for v := int64(-2); v < off[P]+2; v++ {
			want := b.Owner(v)
			if want < 0 {
				want = P
			}
			if got := ownerOf(off, v); got != want {
				t.Errorf("offsets %v: ownerOf(%d) = %d, want %d", off, v, got, want)
			}
		}
	}
}

func TestCheckSeeds(t *testing.T) {
	if err := checkSeeds([]graph.NodeID{3, 0, 9}, 10); err != nil {
		t.Fatal(err)
	}
	if err := checkSeeds(nil, 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		seeds []graph.NodeID
		want  string
	}{
		{[]graph.NodeID{1, 10}, "seed 1: node 10 not in [0, 10)"},
		{[]graph.NodeID{-1}, "seed 0: node -1"},
		{[]graph.NodeID{4, 2, 4}, "seed 2: node 4 already at position 0"},
		{make([]graph.NodeID, 11), "11 seeds but only 10 nodes"},
	} {
		err := checkSeeds(c.seeds, 10)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("checkSeeds(%v) = %v, want %q", c.seeds, err, c.want)
		}
	}
}

// headerFrom builds what rank `rank` receives when peer p sends counts[p]
// with its own words.
func headerFrom(P int, counts []int64, hop, fanout, hops int, status []int64) []int64 {
	h := make([]int64, 0, P*hWords)
	for p := range P {
		row := makeHeader(1, status[p], uint64(100+p), hop, fanout, hops)
		row[hCount] = counts[p]
		h = append(h, row...)
	}
	return h
}

func TestReadHeader(t *testing.T) {
	P := 3
	ok := []int64{0, 0, 0}
	sent := headerFrom(P, []int64{2, 0, 3}, 1, 5, 2, ok)
	pl := &plan{P: P, rank: 1}
	if kind, msg := pl.readHeader(headerFrom(P, []int64{4, 1, 0}, 1, 5, 2, ok), sent, 1, 5, 2, 5, 4); kind != nil {
		t.Fatal(kind, msg)
	}
	if !reflect.DeepEqual(pl.recvN, []int64{4, 1, 0}) || !reflect.DeepEqual(pl.sendN, []int64{2, 0, 3}) ||
		!reflect.DeepEqual(pl.roff, []int64{0, 4, 5, 5}) || pl.R != 5 || !reflect.DeepEqual(pl.keys, []uint64{100, 101, 102}) {
		t.Fatalf("plan %+v", pl)
	}
	for _, c := range []struct {
		name       string
		recv, sent []int64
		nF         int64
		kind       error
		msg        string
	}{
		{"peer status", headerFrom(P, []int64{0, 0, 0}, 1, 5, 2, []int64{0, 0, stInput}), sent, 5, ErrPeer, "rank 2: invalid input"},
		{"own status ignored", headerFrom(P, []int64{0, 0, 0}, 1, 5, 2, []int64{0, stFailed, 0}), sent, 5, nil, ""},
		{"other hop", headerFrom(P, []int64{0, 0, 0}, 0, 5, 2, ok), sent, 5, ErrProtocol, "rank 0 is at hop 0 of 2"},
		{"other fanout", headerFrom(P, []int64{0, 0, 0}, 1, 4, 2, ok), sent, 5, ErrProtocol, "(fanout 4)"},
		{"other hops", headerFrom(P, []int64{0, 0, 0}, 1, 5, 3, ok), sent, 5, ErrProtocol, "hop 1 of 3"},
		{"too many nodes", headerFrom(P, []int64{0, 5, 0}, 1, 5, 2, ok), sent, 5, ErrProtocol, "rank 1 sends 5 nodes, this rank owns 4"},
		{"negative", headerFrom(P, []int64{-1, 0, 0}, 1, 5, 2, ok), sent, 5, ErrProtocol, "sends -1"},
		{"routing lost nodes", headerFrom(P, []int64{0, 0, 0}, 1, 5, 2, ok), sent, 6, ErrProtocol, "frontier of 6 nodes but 5 routed"},
		{"short", make([]int64, 3), sent, 5, ErrProtocol, "header of 3/18 words"},
	} {
		pl := &plan{P: P, rank: 1}
		kind, msg := pl.readHeader(c.recv, c.sent, 1, 5, 2, c.nF, 4)
		if kind != c.kind || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: %v %q, want %v %q", c.name, kind, msg, c.kind, c.msg)
		}
	}
}

func TestTotals(t *testing.T) {
	pl := &plan{P: 2, rank: 0, recvN: []int64{3, 2}, sendN: []int64{1, 4}, R: 5}
	if st, msg := pl.ownerTotals([]int64{6, 4}, 10, 2); st != stOK {
		t.Fatal(msg)
	}
	if got := pl.totalsSend(stOK); !reflect.DeepEqual(got, []int64{0, 6, 0, 4}) {
		t.Fatalf("totalsSend = %v", got)
	}
	if got := pl.totalsSend(stTooLarge); !reflect.DeepEqual(got, []int64{stTooLarge, 0, stTooLarge, 0}) {
		t.Fatalf("totalsSend(failed) = %v", got)
	}
	for _, c := range []struct {
		tot    []int64
		e      int64
		fanout int
		st     int64
	}{
		{[]int64{7, 4}, 11, 2, stFailed},                     // above fanout * nodes
		{[]int64{6, 4}, 11, 2, stFailed},                     // sum mismatch
		{[]int64{-1, 4}, 3, -1, stFailed},                    // negative
		{[]int64{maxEntries, 0}, maxEntries, -1, stTooLarge}, // R + E too large
	} {
		q := &plan{P: 2, recvN: []int64{3, 2}, R: 5}
		if st, _ := q.ownerTotals(c.tot, c.e, c.fanout); st != c.st {
			t.Errorf("ownerTotals(%v, %d, %d) = %d, want %d", c.tot, c.e, c.fanout, st, c.st)
		}
	}
	if kind, msg := pl.readTotals([]int64{0, 2, 0, 7}, 2); kind != nil {
		t.Fatal(msg)
	}
	if !reflect.DeepEqual(pl.rtot, []int64{2, 7}) || !reflect.DeepEqual(pl.S, []int64{0, 2}) || pl.Erecv != 9 {
		t.Fatalf("plan %+v", pl)
	}
	send, recv := pl.answerCounts()
	if !reflect.DeepEqual(send, []int{9, 6}) || !reflect.DeepEqual(recv, []int{3, 11}) {
		t.Fatalf("answerCounts = %v %v", send, recv)
	}
	for _, c := range []struct {
		recv []int64
		kind error
	}{
		{[]int64{0, 2, stTooLarge, 0}, ErrPeer},
		{[]int64{stFailed, 0, 0, 0}, nil},  // its own status is not a peer's
		{[]int64{0, 3, 0, 0}, ErrProtocol}, // 3 > fanout 2 * 1 node
		{[]int64{0, -1, 0, 0}, ErrProtocol},
		{[]int64{0, 2}, ErrProtocol},
	} {
		q := &plan{P: 2, rank: 0, sendN: []int64{1, 4}}
		if kind, _ := q.readTotals(c.recv, 2); kind != c.kind {
			t.Errorf("readTotals(%v) = %v, want %v", c.recv, kind, c.kind)
		}
	}
}

func TestErrorText(t *testing.T) {
	e := &Error{Rank: 2, Op: "gpucsp.Sample", Hop: 1, Msg: "rank 0: failed", Err: ErrPeer}
	if e.Error() != "gpucsp: rank 2: gpucsp.Sample hop 1: rank 0: failed: a peer rank failed" || !errors.Is(e, ErrPeer) {
		t.Fatal(e.Error())
	}
}

// ---- A host emulation of the protocol: every kernel of csp.cu mirrored
// in Go, the exchanges done by copying, the owner's draws by
// sample.NeighborSampler on its patch. Batches must equal
// sample.NeighborSampler's on the whole graph for every rank.

func randomGraph(seed uint64, n int64, avg int) *graph.CSR {
	s := rng.NewStream(seed)
	g := &graph.CSR{NumRows: n, NumCols: n, Indptr: make([]int64, n+1)}
	for v := int64(0); v < n; v++ {
		var d uint64
		switch s.Below(8) {
		case 0:
			d = 0
		case 1:
			d = s.Below(uint64(10*avg + 1))
		default:
			d = s.Below(uint64(avg + 1))
		}
		for range d {
			g.Indices = append(g.Indices, graph.NodeID(s.Below(uint64(n))))
			g.Weights = append(g.Weights, float32(s.Below(5)))
		}
		g.Indptr[v+1] = int64(len(g.Indices))
	}
	return g
}

// randomOffsets splits n nodes into P contiguous ranges of random sizes
// (some may be empty).
func randomOffsets(seed uint64, n int64, P int) []int64 {
	s := rng.NewStream(seed)
	cuts := make([]int64, P+1)
	cuts[P] = n
	for i := 1; i < P; i++ {
		cuts[i] = int64(s.Below(uint64(n + 1)))
	}
	for i := 1; i < P; i++ {
		for j := i + 1; j < P; j++ {
			if cuts[j] < cuts[i] {
				cuts[i], cuts[j] = cuts[j], cuts[i]
			}
		}
	}
	return cuts
}

func randomSeeds(seed uint64, n int64, k int) []graph.NodeID {
	s := rng.NewStream(seed)
	seen := map[graph.NodeID]bool{}
	var out []graph.NodeID
	for len(out) < k && int64(len(out)) < n {
		v := graph.NodeID(s.Below(uint64(n)))
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// a2av is an all-to-all-v over host slices: rank r receives from every p
// the block p addressed to r.
func a2av[T any](send [][]T, counts [][]int) [][]T {
	P := len(send)
	recv := make([][]T, P)
	for p := range P {
		at := 0
		for r := range P {
			recv[r] = append(recv[r], send[p][at:at+counts[p][r]]...)
			at += counts[p][r]
		}
	}
	return recv
}

func exclusiveScan(x []int64) []int64 {
	out := make([]int64, len(x))
	var s int64
	for i, v := range x {
		out[i] = s
		s += v
	}
	return out
}

// edgeRow mirrors common.cuh's edge_row.
func edgeRow(ptr []int64, rows, e int64) int64 {
	lo, hi := int64(0), rows
	for hi-lo > 1 {
		mid := (lo + hi) >> 1
		if ptr[mid] <= e {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

type emuRank struct {
	F      []graph.NodeID
	key    sample.Key
	blocks []sample.Block
	// per hop
	bptr  []int64
	order []int32
	send  []int32
	pl    *plan
	recv  []int32
	qptr  []int64
	src   []int32
	eid   []int64
}

func emulate(t *testing.T, g *graph.CSR, off []int64, cfg sample.Config, seeds [][]graph.NodeID, keys []sample.Key) [][]sample.Block {
	t.Helper()
	P := len(off) - 1
	b, err := book.New(off)
	if err != nil {
		t.Fatal(err)
	}
	owners := make([]*sample.NeighborSampler, P)
	patches := make([]*layout.Patch, P)
	for p := range P {
		if patches[p], err = layout.Build(g, b, p, layout.Options{DeviceBytes: layout.NoLimit}); err != nil {
			t.Fatal(err)
		}
		if owners[p], err = sample.NewNeighborSampler(patches[p].Graph, cfg); err != nil {
			t.Fatal(err)
		}
	}
	L := len(cfg.Fanouts)
	rk := make([]*emuRank, P)
	for r := range P {
		rk[r] = &emuRank{F: seeds[r], key: keys[r], blocks: make([]sample.Block, L)}
	}
	for h := range L {
		k := cfg.Fanouts[h]
		// 1. Owners, stable grouping (Bucket), gather, headers.
		sentHdr := make([][]int64, P)
		for _, x := range rk {
			nF := len(x.F)
			x.bptr = make([]int64, P+2)
			keysOf := make([]int32, nF)
			for i, v := range x.F {
				keysOf[i] = int32(ownerOf(off, int64(v)))
				x.bptr[keysOf[i]+1]++
			}
			for p := 1; p < P+2; p++ {
				x.bptr[p] += x.bptr[p-1]
			}
			x.order = make([]int32, 0, nF)
			for p := int32(0); p <= int32(P); p++ {
				for i := range nF {
					if keysOf[i] == p {
						x.order = append(x.order, int32(i))
					}
				}
			}
			x.send = make([]int32, nF)
			for i := range nF {
				x.send[i] = x.F[x.order[i]]
			}
		}
		for r, x := range rk {
			hdr := makeHeader(P, stOK, 0, h, k, L)
			for p := range P {
				hdr[p*hWords+hCount] = x.bptr[p+1] - x.bptr[p]
				hdr[p*hWords+hKey] = int64(r) // stands for the hop key: the owner looks the key up by requester
			}
			sentHdr[r] = hdr
		}
		for r, x := range rk {
			recv := make([]int64, 0, P*hWords)
			for p := range P {
				recv = append(recv, sentHdr[p][r*hWords:(r+1)*hWords]...)
			}
			x.pl = &plan{P: P, rank: r}
			if kind, msg := x.pl.readHeader(recv, sentHdr[r], h, k, L, int64(len(x.F)), int64(off[r+1]-off[r])); kind != nil {
				t.Fatalf("rank %d hop %d: %v %s", r, h, kind, msg)
			}
		}
		// Node exchange.
		sends, counts := make([][]int32, P), make([][]int, P)
		for r, x := range rk {
			sends[r], counts[r] = x.send, ints(x.pl.sendN)
		}
		for r, in := range a2av(sends, counts) {
			rk[r].recv = in
			if int64(len(in)) != rk[r].pl.R {
				t.Fatalf("rank %d received %d nodes, plan says %d", r, len(in), rk[r].pl.R)
			}
		}
		// 2. Owners draw each requester's segment under its key.
		tots := make([][]int64, P)
		for q, x := range rk {
			pl := x.pl
			x.qptr, x.src, x.eid = []int64{0}, nil, nil
			for p := range P {
				seg := x.recv[pl.roff[p]:pl.roff[p+1]]
				nb, err := owners[q].SampleHop(seg, h, rk[pl.keys[p]].key)
				if err != nil {
					t.Fatal(err)
				}
				for i := range seg {
					x.qptr = append(x.qptr, x.qptr[len(x.qptr)-1]+nb.Indptr[i+1]-nb.Indptr[i])
				}
				x.src = append(x.src, nb.Nodes...)
				for _, e := range nb.EdgeIDs {
					x.eid = append(x.eid, e+patches[q].EdgeBase) // csp_add_i64
				}
			}
			tot := make([]int64, P) // csp_totals
			for p := range P {
				tot[p] = x.qptr[pl.roff[p+1]] - x.qptr[pl.roff[p]]
			}
			if st, msg := pl.ownerTotals(tot, x.qptr[pl.R], k); st != stOK {
				t.Fatalf("rank %d hop %d: %s", q, h, msg)
			}
			tots[q] = pl.totalsSend(stOK)
		}
		for r, x := range rk {
			recv := make([]int64, 0, P*tWords)
			for p := range P {
				recv = append(recv, tots[p][r*tWords:(r+1)*tWords]...)
			}
			if kind, msg := x.pl.readTotals(recv, k); kind != nil {
				t.Fatalf("rank %d hop %d: %v %s", r, h, kind, msg)
			}
		}
		// csp_pack, then the answer and edge ID exchanges.
		packs, pc, eids, ec := make([][]int32, P), make([][]int, P), make([][]int64, P), make([][]int, P)
		for q, x := range rk {
			pl := x.pl
			packed := make([]int32, pl.R+pl.E)
			for i := int64(0); i < pl.R; i++ {
				p := edgeRow(pl.roff, int64(P), i)
				s0 := pl.roff[p]
				base := s0 + x.qptr[s0]
				np := pl.roff[p+1] - s0
				a, b := x.qptr[i], x.qptr[i+1]
				packed[base+(i-s0)] = int32(b - a)
				out := base + np + (a - x.qptr[s0])
				for e := a; e < b; e++ {
					packed[out+e-a] = x.src[e]
				}
			}
			send, _ := pl.answerCounts()
			packs[q], pc[q], eids[q], ec[q] = packed, send, x.eid, ints(pl.tot)
		}
		rpacks, reids := a2av(packs, pc), a2av(eids, ec)
		// 3. csp_unpack_counts, the scans, csp_unpack_src, then the block.
		for r, x := range rk {
			pl, nF := x.pl, int64(len(x.F))
			_, want := pl.answerCounts()
			if int64(len(rpacks[r])) != sum(want) || int64(len(reids[r])) != pl.Erecv {
				t.Fatalf("rank %d hop %d: received %d/%d entries, plan says %d/%d", r, h, len(rpacks[r]), len(reids[r]), sum(want), pl.Erecv)
			}
			cnt, cntS := make([]int64, nF+1), make([]int64, nF+1)
			for j := int64(0); j < nF; j++ {
				q := edgeRow(x.bptr, int64(P), j)
				c := int64(rpacks[r][pl.S[q]+j])
				cntS[j], cnt[x.order[j]] = c, c
			}
			ptr, sptr := exclusiveScan(cnt), exclusiveScan(cntS)
			src, eid := make([]graph.NodeID, pl.Erecv), make([]int64, pl.Erecv)
			for j := int64(0); j < nF; j++ {
				q := edgeRow(x.bptr, int64(P), j)
				a, m := sptr[j], sptr[j+1]-sptr[j]
				in := x.bptr[q+1] + a
				d := ptr[x.order[j]]
				for t := int64(0); t < m; t++ {
					src[d+t] = rpacks[r][in+t]
					eid[d+t] = reids[r][a+t]
				}
			}
			blk, err := sample.ToBlock(x.F, &sample.Neighbors{Indptr: ptr, Nodes: src, EdgeIDs: eid})
			if err != nil {
				t.Fatalf("rank %d hop %d: %v", r, h, err)
			}
			x.blocks[L-1-h] = blk
			x.F = blk.SrcNodes
		}
	}
	out := make([][]sample.Block, P)
	for r, x := range rk {
		out[r] = x.blocks
	}
	return out
}

// TestEmulatedProtocol runs the host mirror of the kernels on 1-4 ranks
// with random partitions (empty ranks and seed-less ranks included) and
// compares every rank's batch with sample.NeighborSampler's.
func TestEmulatedProtocol(t *testing.T) {
	g := randomGraph(1, 3000, 8)
	for _, mode := range []sample.Config{
		{Fanouts: []int{5, 3, 2}},
		{Fanouts: []int{4, -1}, Replace: true},
		{Fanouts: []int{3, 3}, Weighted: true},
		{Fanouts: []int{6, 2}, Weighted: true, Replace: true},
	} {
		ref, err := sample.NewNeighborSampler(g, mode)
		if err != nil {
			t.Fatal(err)
		}
		for P := 1; P <= 4; P++ {
			for trial := range 3 {
				off := randomOffsets(uint64(10*P+trial), g.NumRows, P)
				if trial == 0 {
					off = make([]int64, P+1)
					for p := range off {
						off[p] = g.NumRows * int64(p) / int64(P)
					}
				}
				seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
				for r := range P {
					n := []int{64, 0, 200, 1}[(r+trial)%4]
					seeds[r] = randomSeeds(uint64(100*P+10*trial+r), g.NumRows, n)
					keys[r] = sample.Key{Seed: 9, Epoch: trial, Batch: r}
				}
				got := emulate(t, g, off, mode, seeds, keys)
				for r := range P {
					want, err := ref.Sample(seeds[r], keys[r])
					if err != nil {
						t.Fatal(err)
					}
					name := fmt.Sprintf("%+v P=%d offsets %v rank %d", mode, P, off, r)
					compareBlocks(t, name, got[r], want.Blocks)
				}
			}
		}
	}
}

func compareBlocks(t *testing.T, name string, got, want []sample.Block) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d blocks, want %d", name, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		for _, c := range []struct {
			what string
			a, b any
		}{{"NumDst", g.NumDst, w.NumDst}, {"SrcNodes", g.SrcNodes, w.SrcNodes}, {"Indptr", g.Indptr, w.Indptr},
			{"Indices", g.Indices, w.Indices}, {"EdgeIDs", g.EdgeIDs, w.EdgeIDs}} {
			if !reflect.DeepEqual(c.a, c.b) && !(reflect.ValueOf(c.a).Kind() == reflect.Slice && reflect.ValueOf(c.a).Len() == 0 && reflect.ValueOf(c.b).Len() == 0) {
				t.Fatalf("%s: block %d: %s differs:\n got %v\nwant %v", name, i, c.what, trim(c.a), trim(c.b))
			}
		}
	}
}

func trim(x any) string {
	s := fmt.Sprint(x)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// TestNewValidates: New checks the patch, offsets and configuration
// before it touches the device.
func TestNewValidates(t *testing.T) {
	g := randomGraph(2, 100, 4)
	off := []int64{0, 100}
	b, _ := book.New(off)
	p, err := layout.Build(g, b, 0, layout.Options{DeviceBytes: layout.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := book.New([]int64{0, 40, 100})
	p1, err := layout.Build(g, b2, 1, layout.Options{DeviceBytes: layout.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	ok := Config{Fanouts: []int{3, 2}}
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
		{"other rank's patch", p1, off, ok, "patch of rank 1 given to rank 0"},
		{"range mismatch", p, []int64{0, 99}, ok, "does not match the offsets' range"},
		{"no fanouts", p, off, Config{}, "0 fanouts"},
		{"zero fanout", p, off, Config{Fanouts: []int{3, 0}}, "fanout 0 of hop 1"},
		{"nil device", p, off, ok, "nil device"},
	} {
		_, err := New(nil, c.patch, c.off, nil, c.cfg)
		var ge *Error
		if !errors.Is(err, ErrInput) || !errors.As(err, &ge) || ge.Op != "gpucsp.New" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInput mentioning %q", c.name, err, c.want)
		}
	}
}
