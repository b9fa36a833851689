package gpusample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/sample"
)

// gpu returns GPU 0, skipping the test without one.
var gpu = gputest.One

// randomGraph returns an in-adjacency of n nodes with random degrees in
// [0, 2*avg), a few hubs of degree up to 3000, self loops and repeated
// neighbors included, and random positive (some zero) weights.
func randomGraph(seed uint64, n int, avg int) *graph.CSR {
	r := rand.New(rand.NewPCG(seed, 1))
	g := &graph.CSR{NumRows: int64(n), NumCols: int64(n), Indptr: make([]int64, n+1)}
	for v := 0; v < n; v++ {
		d := r.IntN(2 * avg)
		if v%997 == 5 {
			d = 1000 + r.IntN(2000)
		}
		for j := 0; j < d; j++ {
			g.Indices = append(g.Indices, int32(r.IntN(n)))
			w := float32(r.Float64() * 3)
			if r.IntN(10) == 0 {
				w = 0
			}
			g.Weights = append(g.Weights, w)
		}
		g.Indptr[v+1] = int64(len(g.Indices))
	}
	return g
}

func seedsOf(r *rand.Rand, n, k int) []graph.NodeID {
	perm := r.Perm(n)[:k]
	out := make([]graph.NodeID, k)
	for i, v := range perm {
		out[i] = graph.NodeID(v)
	}
	return out
}

// TestMatchesCPUSampler: uniform batches equal the CPU sampler's byte for
// byte, with the graph on the device and in mapped host memory.
func TestMatchesCPUSampler(t *testing.T) {
	d := gpu(t)
	g := randomGraph(1, 20000, 12)
	r := rand.New(rand.NewPCG(2, 3))
	for _, fan := range [][]int{{15, 10, 5}, {3, -1}, {40}} {
		for _, replace := range []bool{false, true} {
			for _, place := range []Placement{OnDevice, Mapped, Split} {
				name := fmt.Sprintf("fanouts=%v replace=%v placement=%d", fan, replace, place)
				cpuS, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: fan, Replace: replace})
				if err != nil {
					t.Fatal(err)
				}
				var rows []graph.NodeID
				if place == Split {
					rows = everyThird(g.NumRows)
				}
				gs, err := New(d, g, Config{Fanouts: fan, Replace: replace, Placement: place, DeviceRows: rows})
				if err != nil {
					t.Fatal(err)
				}
				for b := 0; b < 3; b++ {
					seeds := seedsOf(r, 20000, []int{1, 512, 1024}[b])
					key := sample.Key{Seed: 42, Epoch: 1, Batch: b}
					want, err := cpuS.Sample(seeds, key)
					if err != nil {
						t.Fatal(err)
					}
					got, err := gs.Sample(seeds, key)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					compareBatches(t, name, got, want)
				}
				gs.Close()
			}
		}
	}
}

// everyThird lists rows n-1, n-4, ... (a split with rows on both sides,
// not in ID order).
func everyThird(n int64) []graph.NodeID {
	var rows []graph.NodeID
	for v := n - 1; v >= 0; v -= 3 {
		rows = append(rows, graph.NodeID(v))
	}
	return rows
}

// TestSplitRows checks the split layout on the host: every listed row's
// neighbors at its dpos, -1 elsewhere, and bad row lists refused.
func TestSplitRows(t *testing.T) {
	g := randomGraph(3, 300, 5)
	rows := everyThird(g.NumRows)
	dpos, didx, err := splitRows(g, rows)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[graph.NodeID]bool{}
	for _, v := range rows {
		listed[v] = true
	}
	var total int64
	for v := int64(0); v < g.NumRows; v++ {
		row := g.Indices[g.Indptr[v]:g.Indptr[v+1]]
		if !listed[graph.NodeID(v)] {
			if dpos[v] != -1 {
				t.Fatalf("row %d not listed but at %d", v, dpos[v])
			}
			continue
		}
		total += int64(len(row))
		if !slices.Equal(didx[dpos[v]:dpos[v]+int64(len(row))], row) {
			t.Fatalf("row %d's copy differs", v)
		}
	}
	if int64(len(didx)) != total {
		t.Fatalf("copy of %d entries, want %d", len(didx), total)
	}
	for _, bad := range [][]graph.NodeID{{1, 300}, {-1}, {5, 6, 5}} {
		if _, _, err := splitRows(g, bad); !errors.Is(err, sample.ErrConfig) {
			t.Fatalf("rows %v: %v", bad, err)
		}
	}
}

// TestEdgeWeights checks the weighted sampler's host arrays: each row's
// positive-weight count and running sums, bad weights refused at their
// position, and a row with more positive-weight edges than posDeg's int32
// holds refused (the bound lowered for the test).
func TestEdgeWeights(t *testing.T) {
	g := randomGraph(9, 300, 6)
	posDeg, cum, err := edgeWeights("test", g, true)
	if err != nil {
		t.Fatal(err)
	}
	most := int64(0)
	for v := int64(0); v < g.NumRows; v++ {
		var sum float64
		var pos int64
		for e := g.Indptr[v]; e < g.Indptr[v+1]; e++ {
			if g.Weights[e] > 0 {
				pos++
			}
			sum += float64(g.Weights[e])
			if cum[e] != sum {
				t.Fatalf("row %d edge %d: running sum %v, want %v", v, e, cum[e], sum)
			}
		}
		if int64(posDeg[v]) != pos {
			t.Fatalf("row %d: %d positive-weight edges, want %d", v, posDeg[v], pos)
		}
		most = max(most, pos)
	}
	if _, cum, err := edgeWeights("test", g, false); err != nil || cum != nil {
		t.Fatalf("without replacement: running sums %d, %v", len(cum), err)
	}
	for _, w := range []float32{-1, float32(math.NaN()), float32(math.Inf(1))} {
		h := *g
		h.Weights = slices.Clone(g.Weights)
		h.Weights[17] = w
		var se *sample.Error
		if _, _, err := edgeWeights("test", &h, false); !errors.As(err, &se) || !errors.Is(err, sample.ErrGraph) || se.Pos != 17 {
			t.Fatalf("weight %v at 17: %v", w, err)
		}
	}
	h := *g
	h.Weights = nil
	if _, _, err := edgeWeights("test", &h, false); !errors.Is(err, sample.ErrGraph) {
		t.Fatalf("nil weights: %v", err)
	}
	defer func(m int64) { maxPosDeg = m }(maxPosDeg)
	maxPosDeg = most - 1
	if _, _, err := edgeWeights("test", g, false); !errors.Is(err, sample.ErrTooLarge) {
		t.Fatalf("a row of %d positive-weight edges over a bound of %d: %v", most, maxPosDeg, err)
	}
}

func compareBatches(t *testing.T, name string, got, want *sample.MiniBatch) {
	t.Helper()
	if !reflect.DeepEqual(got.Seeds, want.Seeds) || len(got.Blocks) != len(want.Blocks) {
		t.Fatalf("%s: seeds or block count differ", name)
	}
	for i := range want.Blocks {
		g, w := got.Blocks[i], want.Blocks[i]
		for _, c := range []struct {
			what string
			a, b any
		}{{"NumDst", g.NumDst, w.NumDst}, {"SrcNodes", g.SrcNodes, w.SrcNodes}, {"Indptr", g.Indptr, w.Indptr},
			{"Indices", g.Indices, w.Indices}, {"EdgeIDs", g.EdgeIDs, w.EdgeIDs}} {
			if !reflect.DeepEqual(c.a, c.b) {
				t.Fatalf("%s: block %d %s differs (gpu %d entries, cpu %d)", name, i, c.what, lenOf(c.a), lenOf(c.b))
			}
		}
	}
}

// TestWeightedValidAndDeterministic checks weighted batches: every edge
// exists with positive weight, no repeats without replacement, the fanout
// respected, and the same key gives the same bytes.
func TestWeightedValidAndDeterministic(t *testing.T) {
	d := gpu(t)
	g := randomGraph(4, 5000, 20)
	r := rand.New(rand.NewPCG(5, 6))
	for _, replace := range []bool{false, true} {
		gs, err := New(d, g, Config{Fanouts: []int{10, 5}, Replace: replace, Weighted: true})
		if err != nil {
			t.Fatal(err)
		}
		seeds := seedsOf(r, 5000, 700)
		key := sample.Key{Seed: 9, Epoch: 0, Batch: 3}
		a, err := gs.Sample(seeds, key)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := gs.Sample(seeds, key)
		compareBatches(t, "weighted repeat", a, b)
		split, err := New(d, g, Config{Fanouts: []int{10, 5}, Replace: replace, Weighted: true, Placement: Split, DeviceRows: everyThird(g.NumRows)})
		if err != nil {
			t.Fatal(err)
		}
		sb, err := split.Sample(seeds, key)
		if err != nil {
			t.Fatal(err)
		}
		compareBatches(t, "weighted split topology", sb, a)
		split.Close()
		c, _ := gs.Sample(seeds, sample.Key{Seed: 9, Epoch: 0, Batch: 4})
		if reflect.DeepEqual(a.Blocks[1].EdgeIDs, c.Blocks[1].EdgeIDs) {
			t.Fatal("different keys gave the same draws")
		}
		for bi, blk := range a.Blocks {
			fan := []int{5, 10}[bi]
			for i := 0; i < blk.NumDst; i++ {
				v := blk.SrcNodes[i]
				seen := map[int64]bool{}
				pos := 0
				for e := g.Indptr[v]; e < g.Indptr[v+1]; e++ {
					if g.Weights[e] > 0 {
						pos++
					}
				}
				want := min(fan, pos)
				if replace && pos > 0 {
					want = fan
				}
				if got := int(blk.Indptr[i+1] - blk.Indptr[i]); got != want {
					t.Fatalf("replace=%v node %d: %d edges, want %d", replace, v, got, want)
				}
				for p := blk.Indptr[i]; p < blk.Indptr[i+1]; p++ {
					e := blk.EdgeIDs[p]
					if e < g.Indptr[v] || e >= g.Indptr[v+1] || g.Weights[e] <= 0 {
						t.Fatalf("node %d: edge %d not a positive-weight in-edge", v, e)
					}
					if blk.SrcNodes[blk.Indices[p]] != g.Indices[e] {
						t.Fatalf("node %d: local index does not name the edge's source", v)
					}
					if !replace && seen[e] {
						t.Fatalf("node %d: edge %d drawn twice without replacement", v, e)
					}
					seen[e] = true
				}
			}
		}
		gs.Close()
	}
}

// chiSquareOK compares counts with expectations (df = cells-1) at a 1e-4
// false-alarm rate, via the Wilson-Hilferty normal approximation.
func chiSquareOK(t *testing.T, what string, obs []int, exp []float64) {
	t.Helper()
	var x2 float64
	for i := range obs {
		dd := float64(obs[i]) - exp[i]
		x2 += dd * dd / exp[i]
	}
	df := float64(len(obs) - 1)
	z := 3.72 // one-sided 1e-4
	crit := df * math.Pow(1-2/(9*df)+z*math.Sqrt(2/(9*df)), 3)
	if x2 > crit {
		t.Fatalf("%s: chi-square %.1f > %.1f (df %v): counts %v", what, x2, crit, df, obs)
	}
	t.Logf("%s: chi-square %.1f (critical %.1f, df %v)", what, x2, crit, df)
}

// TestDistributionChiSquare draws many one-hop samples of nodes with 20
// in-edges each and checks the position frequencies: uniform without and
// with replacement (each position equally likely), weighted with
// replacement and weighted with fanout 1 (proportional to weight).
func TestDistributionChiSquare(t *testing.T) {
	d := gpu(t)
	const nodes, deg = 2000, 20
	g := &graph.CSR{NumRows: nodes, NumCols: nodes, Indptr: make([]int64, nodes+1)}
	for v := 0; v < nodes; v++ {
		for j := 0; j < deg; j++ {
			g.Indices = append(g.Indices, int32((v+j+1)%nodes))
			g.Weights = append(g.Weights, float32(j+1))
		}
		g.Indptr[v+1] = int64(len(g.Indices))
	}
	seeds := make([]graph.NodeID, nodes)
	for i := range seeds {
		seeds[i] = graph.NodeID(i)
	}
	cases := []struct {
		name     string
		cfg      Config
		weighted bool
	}{
		{"uniform k=5", Config{Fanouts: []int{5}}, false},
		{"uniform replace k=5", Config{Fanouts: []int{5}, Replace: true}, false},
		{"weighted replace k=5", Config{Fanouts: []int{5}, Replace: true, Weighted: true}, true},
		{"weighted k=1", Config{Fanouts: []int{1}, Weighted: true}, true},
	}
	for _, c := range cases {
		gs, err := New(d, g, c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		obs := make([]int, deg)
		total := 0
		for b := 0; b < 10; b++ {
			mb, err := gs.Sample(seeds, sample.Key{Seed: 1234, Batch: b})
			if err != nil {
				t.Fatal(err)
			}
			blk := mb.Blocks[0]
			for i := 0; i < blk.NumDst; i++ {
				v := int64(blk.SrcNodes[i])
				for p := blk.Indptr[i]; p < blk.Indptr[i+1]; p++ {
					obs[blk.EdgeIDs[p]-g.Indptr[v]]++
					total++
				}
			}
		}
		exp := make([]float64, deg)
		for j := range exp {
			if c.weighted {
				exp[j] = float64(total) * float64(j+1) / float64(deg*(deg+1)/2)
			} else {
				exp[j] = float64(total) / deg
			}
		}
		chiSquareOK(t, c.name, obs, exp)
		gs.Close()
	}
}

func TestBadInput(t *testing.T) {
	d := gpu(t)
	g := randomGraph(7, 100, 4)
	if _, err := New(d, g, Config{Fanouts: []int{0}}); !errors.Is(err, sample.ErrConfig) {
		t.Fatalf("fanout 0: %v", err)
	}
	if _, err := New(d, g, Config{}); !errors.Is(err, sample.ErrConfig) {
		t.Fatalf("no fanouts: %v", err)
	}
	if _, err := New(d, g, Config{Fanouts: []int{2}, DeviceRows: []graph.NodeID{1}}); !errors.Is(err, sample.ErrConfig) {
		t.Fatalf("device rows without the split placement: %v", err)
	}
	if _, err := New(d, g, Config{Fanouts: []int{2}, Placement: Split, DeviceRows: []graph.NodeID{100}}); !errors.Is(err, sample.ErrConfig) {
		t.Fatalf("device row out of range: %v", err)
	}
	g2 := *g
	g2.Weights = nil
	if _, err := New(d, &g2, Config{Fanouts: []int{2}, Weighted: true}); !errors.Is(err, sample.ErrGraph) {
		t.Fatalf("weighted without weights: %v", err)
	}
	gs, err := New(d, g, Config{Fanouts: []int{2, 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	if _, err := gs.Sample([]graph.NodeID{1, 2, 1}, sample.Key{}); !errors.Is(err, sample.ErrDuplicate) {
		t.Fatalf("duplicate seeds: %v", err)
	}
	if _, err := gs.Sample([]graph.NodeID{1, 100}, sample.Key{}); !errors.Is(err, sample.ErrNode) {
		t.Fatalf("seed out of range: %v", err)
	}
	mb, err := gs.Sample(nil, sample.Key{})
	if err != nil || len(mb.Blocks) != 2 || mb.Blocks[0].NumDst != 0 {
		t.Fatalf("empty seeds: %v %+v", err, mb)
	}
}

// TestNoAllocInSteadyState: after a warm-up batch, sampling makes no
// cuMemAlloc calls.
func TestNoAllocInSteadyState(t *testing.T) {
	d := gpu(t)
	g := randomGraph(8, 20000, 12)
	gs, err := New(d, g, Config{Fanouts: []int{15, 10, 5}})
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	r := rand.New(rand.NewPCG(1, 1))
	run := func(b int) {
		bt, err := gs.SampleDevice(seedsOf(r, 20000, 1024), sample.Key{Seed: 1, Batch: b})
		if err != nil {
			t.Fatal(err)
		}
		bt.Free()
	}
	run(0)
	run(1)
	before := d.Stats().Mallocs
	for b := 2; b < 10; b++ {
		run(b)
	}
	if after := d.Stats().Mallocs; after != before {
		t.Fatalf("%d cuMemAlloc calls in steady state", after-before)
	}
}

func lenOf(x any) int {
	v := reflect.ValueOf(x)
	if v.Kind() == reflect.Slice {
		return v.Len()
	}
	return -1
}
