package infer

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// TestHotRowsMatchHost: inputs gathered on the host with a copy of their
// most-read rows on each device (Options.HotBytes) give the plain host
// path's output bit for bit: 1, 2 and 4 CPU devices (two sharing a back
// end), copies holding some rows (chunks read from both) or every row
// (chunks read only the copy), SAGE, GCN (sparse features: layer 1 keeps
// no copy) and GAT, every node or a few.
func TestHotRowsMatchHost(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	for _, kind := range []string{nn.KindSAGE, nn.KindGCN, nn.KindGAT} {
		cfg, params := deepModel(t, b, kind, ds)
		x := inputs(t, ds, kind == nn.KindGCN)
		for _, devices := range []int{1, 2, 4} {
			for _, req := range []Request{{}, {Nodes: []int32{2707, 3, 3, 1000, 42}}} {
				for _, all := range []bool{false, true} {
					if testing.Short() && (kind != nn.KindSAGE || devices == 2) {
						continue
					}
					t.Run(fmt.Sprintf("%s/devices=%d/nodes=%d/all=%v", kind, devices, len(req.Nodes), all), func(t *testing.T) {
						bs := make([]backend.Backend, devices)
						for i := range bs {
							bs[i] = newCPU(t)
						}
						if devices == 4 {
							bs[3] = bs[2] // virtual devices sharing a back end
						}
						base := Options{Budget: MinBudget, Placement: PlaceHost, Resident: ResidentOff}
						want := runOn(t, bs, cfg, params, in, x, req, base)
						// A copy of 300 rows of the hidden layers (3 of the
						// features'), or room for every row of the widest.
						opts := base
						opts.HotBytes = 300 * 4 * int64(cfg.Hidden*max(1, cfg.Heads))
						if all {
							opts.HotBytes = int64(ds.NumNodes()) * 4 * int64(ds.FeatDim)
						}
						var log bytes.Buffer
						opts.Log = &log
						got := runOn(t, bs, cfg, params, in, x, req, opts)
						sameBits(t, got, want)
						for _, st := range got.Layers {
							if st.Layer == 1 && kind == nn.KindGCN {
								if st.HotRows != 0 {
									t.Errorf("layer 1 of sparse features kept %d rows", st.HotRows)
								}
								continue
							}
							if st.HotRows <= 0 || st.HotReads <= 0 || st.Reads <= 0 || st.HotReads > st.Reads {
								t.Fatalf("layer %d: %d rows kept, %d of %d reads from them", st.Layer, st.HotRows, st.HotReads, st.Reads)
							}
							// (A few nodes' layers below read fewer rows than 300.)
							if full := st.HotReads == st.Reads; full != all && (all || req.Nodes == nil) {
								t.Errorf("layer %d: %d of %d reads from the %d rows kept", st.Layer, st.HotReads, st.Reads, st.HotRows)
							}
						}
						if !strings.Contains(log.String(), "most-read input rows copied to the devices") {
							t.Errorf("the log does not tell of the copies:\n%s", log.String())
						}
					})
				}
			}
		}
	}
}

// TestPickHot: the rows of highest in-degree, ties broken by node ID,
// among the candidates, at most k.
func TestPickHot(t *testing.T) {
	// In-degrees 1, 3, 0, 3, 2, 5.
	deg := []int{1, 3, 0, 3, 2, 5}
	in := &graph.CSR{NumRows: int64(len(deg)), NumCols: int64(len(deg)), Indptr: []int64{0}}
	for _, d := range deg {
		for range d {
			in.Indices = append(in.Indices, 0)
		}
		in.Indptr = append(in.Indptr, int64(len(in.Indices)))
	}
	r := &run{in: in, n: len(deg)}
	for _, c := range []struct {
		candidates []int32
		k          int
		want       []int32
	}{
		{nil, 1, []int32{5}},
		{nil, 2, []int32{1, 5}},    // a tie at 3: the lower ID
		{nil, 3, []int32{1, 3, 5}}, // by ID in the copy
		{nil, 6, []int32{0, 1, 2, 3, 4, 5}},
		{nil, 9, []int32{0, 1, 2, 3, 4, 5}},
		{[]int32{0, 2, 3, 4}, 2, []int32{3, 4}},
		{nil, 0, nil},
	} {
		set := r.pickHot(c.candidates, c.k, 4)
		var got []int32
		if set != nil {
			got = set.nodes
			for i, v := range set.nodes {
				if set.slot[v] != int32(i) {
					t.Errorf("k %d: node %d in slot %d, its slot says %d", c.k, v, i, set.slot[v])
				}
			}
			if kept := len(deg) - strings.Count(fmt.Sprint(set.slot), "-1"); kept != len(set.nodes) {
				t.Errorf("k %d: %d slots set for %d rows", c.k, kept, len(set.nodes))
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("candidates %v, k %d: %v, want %v", c.candidates, c.k, got, c.want)
		}
	}
}

// TestHotSplit: a chunk's sources sorted into hot slots and cold IDs on
// several goroutines, each in source order, perm placing source i among
// the staged rows (hot first), as one goroutine does.
func TestHotSplit(t *testing.T) {
	const n, srcs = 50_000, 100_000
	r := rand.New(rand.NewPCG(3, 4))
	set := &hotSet{slot: make([]int32, n), width: 1}
	for v := range set.slot {
		set.slot[v] = -1
		if r.IntN(3) == 0 {
			set.slot[v] = int32(len(set.nodes))
			set.nodes = append(set.nodes, int32(v))
		}
	}
	h := &hotRows{set: set}
	src := make([]int32, srcs)
	for i := range src {
		src[i] = int32(r.IntN(n))
	}
	wantSlots, wantCold, wantPerm := h.split(src, 1)
	for _, workers := range []int{2, 5, 16} {
		slots, cold, perm := h.split(src, workers)
		if !slices.Equal(slots, wantSlots) || !slices.Equal(cold, wantCold) || !slices.Equal(perm, wantPerm) {
			t.Fatalf("%d workers: a different split than one goroutine's", workers)
		}
	}
	// One goroutine's, checked by hand: staged rows in perm order are the sources.
	for i, v := range src {
		p := int(wantPerm[i])
		if p < len(wantSlots) {
			if set.nodes[wantSlots[p]] != v {
				t.Fatalf("source %d (node %d): staged hot row %d is node %d", i, v, p, set.nodes[wantSlots[p]])
			}
		} else if wantCold[p-len(wantSlots)] != v {
			t.Fatalf("source %d (node %d): staged cold row %d is node %d", i, v, p, wantCold[p-len(wantSlots)])
		}
	}
	if len(wantSlots) == 0 || len(wantCold) == 0 {
		t.Fatalf("%d hot and %d cold sources: want both", len(wantSlots), len(wantCold))
	}
}
