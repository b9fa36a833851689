package csp

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/graph/graphtest"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
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
// with its own words (frontier nF[p]).
func headerFrom(P int, counts, nF []int64, hop, fanout, hops int, status []int64) []int64 {
	h := make([]int64, 0, P*HeaderWords)
	for p := range P {
		row := makeHeader(1, status[p], uint64(100+p), hop, fanout, hops)
		row[hCount], row[hNF] = counts[p], nF[p]
		h = append(h, row...)
	}
	return h
}

func TestReadHeader(t *testing.T) {
	P := 3
	ok := []int64{0, 0, 0}
	nF := []int64{9, 5, 9}
	sent := headerFrom(P, []int64{2, 0, 3}, []int64{5, 5, 5}, 1, 5, 2, ok)
	pl := &plan{P: P, rank: 1}
	if kind, msg := pl.readHeader(headerFrom(P, []int64{4, 1, 0}, nF, 1, 5, 2, ok), sent, 1, 5, 2, 8, 4); kind != nil {
		t.Fatal(kind, msg)
	}
	if !reflect.DeepEqual(pl.recvN, []int64{4, 1, 0}) || !reflect.DeepEqual(pl.sendN, []int64{2, 0, 3}) || pl.nF != 5 ||
		!reflect.DeepEqual(pl.roff, []int64{0, 4, 5, 5}) || pl.R != 5 || !reflect.DeepEqual(pl.keys, []uint64{100, 101, 102}) ||
		!reflect.DeepEqual(pl.bptr(), []int64{0, 2, 2, 5}) {
		t.Fatalf("plan %+v", pl)
	}
	if send, recv := pl.stridedCounts(3); !reflect.DeepEqual(send, []int{12, 3, 0}) || !reflect.DeepEqual(recv, []int{6, 0, 9}) {
		t.Fatalf("stridedCounts = %v %v", send, recv)
	}
	badSent := func(f func([]int64)) []int64 {
		s := slices.Clone(sent)
		f(s)
		return s
	}
	for _, c := range []struct {
		name       string
		recv, sent []int64
		fcap       int64
		kind       error
		msg        string
	}{
		{"peer status", headerFrom(P, []int64{0, 0, 0}, nF, 1, 5, 2, []int64{0, 0, stInput}), sent, 8, ErrPeer, "rank 2: invalid input"},
		{"own status ignored", headerFrom(P, []int64{0, 0, 0}, nF, 1, 5, 2, []int64{0, stFailed, 0}), sent, 8, nil, ""},
		{"other hop", headerFrom(P, []int64{0, 0, 0}, nF, 0, 5, 2, ok), sent, 8, ErrProtocol, "rank 0 is at hop 0 of 2"},
		{"other fanout", headerFrom(P, []int64{0, 0, 0}, nF, 1, 4, 2, ok), sent, 8, ErrProtocol, "(fanout 4)"},
		{"other hops", headerFrom(P, []int64{0, 0, 0}, nF, 1, 5, 3, ok), sent, 8, ErrProtocol, "hop 1 of 3"},
		{"too many nodes", headerFrom(P, []int64{0, 5, 0}, nF, 1, 5, 2, ok), sent, 8, ErrProtocol, "rank 1 sends 5 nodes (of its 5), this rank owns 4"},
		{"more than its frontier", headerFrom(P, []int64{0, 0, 3}, []int64{9, 5, 2}, 1, 5, 2, ok), sent, 8, ErrProtocol, "rank 2 sends 3 nodes (of its 2)"},
		{"negative", headerFrom(P, []int64{-1, 0, 0}, nF, 1, 5, 2, ok), sent, 8, ErrProtocol, "sends -1"},
		{"frontier above its bound", headerFrom(P, []int64{0, 0, 0}, nF, 1, 5, 2, ok), sent, 4, ErrProtocol, "frontier of 5 nodes, at most 4"},
		{"nodes outside the graph", headerFrom(P, []int64{0, 0, 0}, nF, 1, 5, 2, ok), badSent(func(s []int64) { s[hBad] = 1 }), 8, ErrProtocol, "1 of 5 frontier nodes outside"},
		{"routing lost nodes", headerFrom(P, []int64{0, 0, 0}, nF, 1, 5, 2, ok), badSent(func(s []int64) { s[2*HeaderWords+hCount] = 2 }), 8, ErrProtocol, "frontier of 5 nodes but 4 routed"},
		{"rows disagree", headerFrom(P, []int64{0, 0, 0}, nF, 1, 5, 2, ok), badSent(func(s []int64) { s[HeaderWords+hNF] = 6 }), 8, ErrProtocol, "for rank 1 out of a frontier of 5"},
		{"short", make([]int64, 3), sent, 8, ErrProtocol, "header of 3/24 words"},
	} {
		pl := &plan{P: P, rank: 1}
		kind, msg := pl.readHeader(c.recv, c.sent, 1, 5, 2, c.fcap, 4)
		if kind != c.kind || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: %v %q, want %v %q", c.name, kind, msg, c.kind, c.msg)
		}
	}
	if !stridedCap(1000, 15) || stridedCap(1<<27, 15) {
		t.Error("stridedCap")
	}
	big := &plan{R: maxEntries / 4}
	if kind, _ := big.stridedSizes(5); kind != ErrTooLarge {
		t.Error("stridedSizes accepts R*k > 2^31-1")
	}
	if kind, _ := big.stridedSizes(4); kind != nil {
		t.Error("stridedSizes refuses R*k < 2^31-1")
	}
}

func TestTotals(t *testing.T) {
	pl := &plan{P: 2, rank: 0, recvN: []int64{3, 2}, sendN: []int64{1, 4}, nF: 5, R: 5}
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
		q := &plan{P: 2, rank: 0, sendN: []int64{1, 4}, nF: 5}
		if kind, _ := q.readTotals(c.recv, 2); kind != c.kind {
			t.Errorf("readTotals(%v) = %v, want %v", c.recv, kind, c.kind)
		}
	}
}

func TestErrorText(t *testing.T) {
	e := &Error{Rank: 2, Op: "csp.Sample", Hop: 1, Msg: "rank 0: failed", Err: ErrPeer}
	if e.Error() != "csp: rank 2: csp.Sample hop 1: rank 0: failed: a peer rank failed" || !errors.Is(e, ErrPeer) {
		t.Fatal(e.Error())
	}
}

// ---- Inputs for the protocol tests.

func randomGraph(seed uint64, n int64, avg int) *graph.CSR { return graphtest.Skewed(seed, n, avg, 10) }

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
	return graphtest.DistinctNodes(seed, n, k)
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
		{"other back end", p, off, ok, "back end other (csp.otherBackend): want the CPU back end or a device with run-time kernels"},
	} {
		var be backend.Backend
		if c.name == "other back end" {
			be = otherBackend{}
		}
		_, err := New(be, c.patch, c.off, nil, c.cfg)
		var ge *Error
		if !errors.Is(err, ErrInput) || !errors.As(err, &ge) || ge.Op != "csp.New" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInput mentioning %q", c.name, err, c.want)
		}
	}
}
