package sample

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/graph"
)

func mustSampler(t testing.TB, g *graph.CSR, cfg Config) *NeighborSampler {
	t.Helper()
	s, err := NewNeighborSampler(g, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSampleSmallExact(t *testing.T) {
	// Fanouts that cover every row make the draw independent of the RNG,
	// so the blocks can be written by hand. Every mode must agree.
	for _, cfg := range []Config{
		{Fanouts: []int{-1, 5}},
		{Fanouts: []int{2, -1}, Weighted: true},
		{Fanouts: []int{-1, -1}, Replace: true},
	} {
		s := mustSampler(t, smallGraph(), cfg)
		mb, err := s.Sample([]graph.NodeID{4, 1}, Key{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		want := &MiniBatch{
			Seeds: []graph.NodeID{4, 1},
			Blocks: []Block{
				{ // hop 1: destinations = sources of hop 0
					SrcNodes: []graph.NodeID{4, 1, 3, 0, 2}, NumDst: 5,
					Indptr:  []int64{0, 2, 3, 3, 5, 7},
					Indices: []int32{2, 3, 4, 1, 4, 3, 2},
					EdgeIDs: []int64{5, 6, 2, 0, 1, 3, 4},
				},
				{ // hop 0: the seeds
					SrcNodes: []graph.NodeID{4, 1, 3, 0, 2}, NumDst: 2,
					Indptr:  []int64{0, 2, 3},
					Indices: []int32{2, 3, 4},
					EdgeIDs: []int64{5, 6, 2},
				},
			},
		}
		if !reflect.DeepEqual(mb, want) {
			t.Fatalf("config %+v:\ngot  %+v\nwant %+v", cfg, mb, want)
		}
		if got := mb.InputNodes(); !slices.Equal(got, []graph.NodeID{4, 1, 3, 0, 2}) {
			t.Fatalf("InputNodes %v", got)
		}
	}
	// New nodes appear in first-seen order.
	s := mustSampler(t, smallGraph(), Config{Fanouts: []int{-1, -1}})
	mb, err := s.Sample([]graph.NodeID{1}, Key{})
	if err != nil {
		t.Fatal(err)
	}
	inner := mb.Blocks[0]
	if !slices.Equal(inner.SrcNodes, []graph.NodeID{1, 2, 0, 3}) || inner.NumDst != 2 ||
		!slices.Equal(inner.Indices, []int32{1, 2, 3}) || !slices.Equal(inner.EdgeIDs, []int64{2, 3, 4}) {
		t.Fatalf("inner block %+v", inner)
	}
	// Weighted without replacement at fanout 1 on row 0 (weights 1, 2):
	// the zero-weight rule and fanout >= positive degree are exercised
	// with a zero weight.
	g := smallGraph()
	g.Weights[3] = 0 // edge 2->... row 2 is [0 (w 0), 3 (w 5)]
	s = mustSampler(t, g, Config{Fanouts: []int{5}, Weighted: true})
	mb, _ = s.Sample([]graph.NodeID{2}, Key{})
	if b := mb.Blocks[0]; !slices.Equal(b.EdgeIDs, []int64{4}) || !slices.Equal(b.SrcNodes, []graph.NodeID{2, 3}) {
		t.Fatalf("zero-weight edge sampled: %+v", b)
	}
}

type mode struct {
	name              string
	replace, weighted bool
}

var modes = []mode{{"uniform", false, false}, {"uniform-replace", true, false}, {"weighted", false, true}, {"weighted-replace", true, true}}

// checkBatch verifies every structural invariant of a MiniBatch.
func checkBatch(t *testing.T, g *graph.CSR, cfg Config, seeds []graph.NodeID, mb *MiniBatch) {
	t.Helper()
	hops := len(cfg.Fanouts)
	if len(mb.Blocks) != hops || !slices.Equal(mb.Seeds, seeds) {
		t.Fatalf("%d blocks, seeds %v", len(mb.Blocks), mb.Seeds)
	}
	dst := seeds
	for hop := 0; hop < hops; hop++ {
		b := mb.Blocks[hops-1-hop]
		k := cfg.Fanouts[hop]
		if b.NumDst != len(dst) || !slices.Equal(b.SrcNodes[:b.NumDst], dst) {
			t.Fatalf("hop %d: destinations are not first", hop)
		}
		if len(b.Indptr) != b.NumDst+1 || b.Indptr[0] != 0 || b.Indptr[b.NumDst] != int64(len(b.Indices)) || len(b.EdgeIDs) != len(b.Indices) {
			t.Fatalf("hop %d: bad block shape", hop)
		}
		seen := map[graph.NodeID]bool{}
		for _, v := range b.SrcNodes {
			if seen[v] || v < 0 || int64(v) >= g.NumRows {
				t.Fatalf("hop %d: source %d repeated or out of range", hop, v)
			}
			seen[v] = true
		}
		// Rebuild the first-seen order and check every edge.
		order := slices.Clone(dst)
		pos := map[graph.NodeID]int32{}
		for i, v := range dst {
			pos[v] = int32(i)
		}
		for i, v := range dst {
			a, z := g.Indptr[v], g.Indptr[v+1]
			deg := z - a
			var posDeg int64
			for _, w := range g.Weights[a:z] {
				if w > 0 {
					posDeg++
				}
			}
			avail := deg
			if cfg.Weighted {
				avail = posDeg
			}
			var want int64
			switch {
			case k < 0:
				want = deg
			case cfg.Replace && avail > 0:
				want = int64(k)
			case !cfg.Replace:
				want = min(int64(k), avail)
			}
			got := b.Indptr[i+1] - b.Indptr[i]
			if got != want {
				t.Fatalf("hop %d node %d (deg %d, pos %d): %d edges, want %d", hop, v, deg, posDeg, got, want)
			}
			eids := b.EdgeIDs[b.Indptr[i]:b.Indptr[i+1]]
			if !cfg.Replace || k < 0 {
				if !slices.IsSorted(eids) || len(slices.Compact(slices.Clone(eids))) != len(eids) {
					t.Fatalf("hop %d node %d: edges %v repeated or unordered", hop, v, eids)
				}
			}
			for j, e := range eids {
				if e < a || e >= z {
					t.Fatalf("hop %d node %d: edge %d not in its row [%d,%d)", hop, v, e, a, z)
				}
				if cfg.Weighted && k >= 0 && g.Weights[e] <= 0 {
					t.Fatalf("hop %d: zero-weight edge %d drawn", hop, e)
				}
				u := g.Indices[e]
				l := b.Indices[b.Indptr[i]+int64(j)]
				if l < 0 || int(l) >= len(b.SrcNodes) || b.SrcNodes[l] != u {
					t.Fatalf("hop %d: local index %d does not name node %d", hop, l, u)
				}
				if _, ok := pos[u]; !ok {
					pos[u] = int32(len(order))
					order = append(order, u)
				}
			}
		}
		if !slices.Equal(order, b.SrcNodes) {
			t.Fatalf("hop %d: sources not in first-seen order", hop)
		}
		dst = b.SrcNodes
	}
}

func TestSampleInvariantsRandom(t *testing.T) {
	g := randomGraph(t, 1, 3000, 12)
	fanouts := [][]int{{5}, {15, 10, 5}, {3, -1}, {1, 1, 1, 1}, {100, 2}}
	for _, m := range modes {
		for _, f := range fanouts {
			cfg := Config{Fanouts: f, Replace: m.replace, Weighted: m.weighted}
			s := mustSampler(t, g, cfg)
			for b := range 3 {
				key := Key{Seed: 7, Epoch: 1, Batch: b}
				seeds := []graph.NodeID{}
				for i := 0; i < 64; i++ {
					seeds = append(seeds, graph.NodeID((i*37+b*11)%3000))
				}
				mb, err := s.Sample(seeds, key)
				if err != nil {
					t.Fatal(err)
				}
				checkBatch(t, g, cfg, seeds, mb)
			}
		}
	}
}

func TestSampleDeterministicAcrossWorkersAndProcs(t *testing.T) {
	n, procs, workerCounts, nb := 20000, []int{1, 2, 8}, []int{0, 1, 3}, 3
	if testing.Short() {
		n, procs, workerCounts, nb = 8000, []int{1, 8}, []int{0, 3}, 1
	}
	g := randomGraph(t, 2, int64(n), 20)
	seeds, err := SeedBatches(allNodes(n), 512, Key{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	old := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(old)
	for _, m := range modes {
		var want [][32]byte
		for _, p := range procs {
			runtime.GOMAXPROCS(p)
			for _, workers := range workerCounts {
				s := mustSampler(t, g, Config{Fanouts: []int{10, 5, 3}, Replace: m.replace, Weighted: m.weighted, Workers: workers})
				var got [][32]byte
				for b := range nb {
					mb, err := s.Sample(seeds[b], Key{Seed: 5, Batch: b})
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, digest(mb))
				}
				if want == nil {
					want = got
				} else if !slices.Equal(got, want) {
					t.Fatalf("%s: GOMAXPROCS=%d Workers=%d gives different batches", m.name, p, workers)
				}
			}
		}
		// And the key matters.
		s := mustSampler(t, g, Config{Fanouts: []int{10, 5, 3}, Replace: m.replace, Weighted: m.weighted})
		for _, k := range []Key{{Seed: 6}, {Seed: 5, Epoch: 1}, {Seed: 5, Batch: 1}} {
			mb, _ := s.Sample(seeds[0], k)
			if digest(mb) == want[0] {
				t.Fatalf("%s: key %+v gives the same batch as {Seed:5}", m.name, k)
			}
		}
	}
}

func TestSampleConcurrentUse(t *testing.T) {
	g := randomGraph(t, 3, 5000, 10)
	s := mustSampler(t, g, Config{Fanouts: []int{10, 5}, Workers: 2})
	seeds := allNodes(5000)[:500]
	want, _ := s.Sample(seeds, Key{Seed: 1})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			got, err := s.Sample(seeds, Key{Seed: 1})
			if err != nil || digest(got) != digest(want) {
				errs <- fmt.Errorf("concurrent Sample differs (err %v)", err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestToBlockMatchesSampler(t *testing.T) {
	g := randomGraph(t, 4, 2000, 15)
	s := mustSampler(t, g, Config{Fanouts: []int{10, 10}})
	seeds := allNodes(2000)[100:400]
	mb, err := s.Sample(seeds, Key{Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	dst := seeds
	for hop := range 2 {
		nb, err := s.SampleHop(dst, hop, Key{Seed: 9})
		if err != nil {
			t.Fatal(err)
		}
		// With the hop key given, the same draws.
		if nk, err := s.SampleHopKey(dst, hop, HopKey(Key{Seed: 9}, hop)); err != nil || !reflect.DeepEqual(nk, nb) {
			t.Fatalf("hop %d: SampleHopKey differs from SampleHop (%v)", hop, err)
		}
		b, err := ToBlock(dst, nb)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(b, mb.Blocks[1-hop]) {
			t.Fatalf("hop %d: ToBlock differs from the sampler's block", hop)
		}
		dst = b.SrcNodes
	}
	// The generic block sampler over the same HopSampler agrees too.
	mb2, err := NewBlockSampler(s).Sample(seeds, Key{Seed: 9})
	if err != nil || digest(mb2) != digest(mb) {
		t.Fatalf("NewBlockSampler differs: %v", err)
	}
}

func TestSampleErrors(t *testing.T) {
	g := smallGraph()
	check := func(name string, err error, kind error, field string, pos int) {
		t.Helper()
		var se *Error
		if !errors.Is(err, kind) || !errors.As(err, &se) || se.Field != field || se.Pos != pos {
			t.Errorf("%s: got %v, want %v at %s[%d]", name, err, kind, field, pos)
		}
	}
	_, err := NewNeighborSampler(g, Config{})
	check("no fanouts", err, ErrConfig, "Fanouts", -1)
	_, err = NewNeighborSampler(g, Config{Fanouts: []int{5, 0}})
	check("zero fanout", err, ErrConfig, "Fanouts", 1)
	_, err = NewNeighborSampler(g, Config{Fanouts: []int{-2}})
	check("fanout -2", err, ErrConfig, "Fanouts", 0)
	_, err = NewNeighborSampler(g, Config{Fanouts: []int{1}, Workers: -1})
	check("workers", err, ErrConfig, "Workers", -1)
	_, err = NewNeighborSampler(&graph.CSR{NumRows: 2, NumCols: 3, Indptr: []int64{0, 0, 0}, Indices: []graph.NodeID{}}, Config{Fanouts: []int{1}})
	check("not square", err, ErrGraph, "graph", -1)
	bad := smallGraph()
	bad.Indices[0] = 9
	_, err = NewNeighborSampler(bad, Config{Fanouts: []int{1}})
	check("invalid graph", err, ErrGraph, "graph", -1)
	if !errors.Is(err, graph.ErrIndex) {
		t.Errorf("invalid graph error %v does not carry graph.ErrIndex", err)
	}
	nw := smallGraph()
	nw.Weights = nil
	_, err = NewNeighborSampler(nw, Config{Fanouts: []int{1}, Weighted: true})
	check("no weights", err, ErrGraph, "graph.Weights", -1)
	for _, w := range []float32{-1, float32(math.NaN()), float32(math.Inf(1))} {
		gw := smallGraph()
		gw.Weights[4] = w
		_, err = NewNeighborSampler(gw, Config{Fanouts: []int{1}, Weighted: true})
		check(fmt.Sprintf("weight %v", w), err, ErrGraph, "graph.Weights", 4)
	}
	_, err = NewFullNeighborSampler(g, 0)
	check("full 0 layers", err, ErrConfig, "layers", -1)

	s := mustSampler(t, g, Config{Fanouts: []int{2, 2}})
	_, err = s.Sample([]graph.NodeID{0, 5}, Key{})
	check("seed too big", err, ErrNode, "seeds", 1)
	_, err = s.Sample([]graph.NodeID{-1}, Key{})
	check("seed negative", err, ErrNode, "seeds", 0)
	_, err = s.Sample([]graph.NodeID{1, 2, 1}, Key{})
	check("duplicate seed", err, ErrDuplicate, "seeds", 2)
	// The sampler still works after errors (its scratch was reset).
	mb, err := s.Sample([]graph.NodeID{1, 2}, Key{})
	if err != nil {
		t.Fatal(err)
	}
	checkBatch(t, g, Config{Fanouts: []int{2, 2}}, []graph.NodeID{1, 2}, mb)
	_, err = s.SampleHop([]graph.NodeID{1}, 2, Key{})
	check("hop", err, ErrConfig, "hop", -1)
	_, err = ToBlock([]graph.NodeID{1}, &Neighbors{Indptr: []int64{0, 2}, Nodes: []graph.NodeID{1}})
	check("ToBlock shape", err, ErrConfig, "neighbors.Indptr", -1)
	_, err = ToBlock([]graph.NodeID{1, 1}, &Neighbors{Indptr: []int64{0, 0, 0}, Nodes: []graph.NodeID{}})
	check("ToBlock dup", err, ErrDuplicate, "dst", 1)
	want := "sample: NeighborSampler.Sample: seeds[1]: 5 not in [0, 5): node out of range"
	if _, err := s.Sample([]graph.NodeID{0, 5}, Key{}); err == nil || err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	// Empty seeds give empty blocks.
	mb, err = s.Sample(nil, Key{})
	if err != nil || len(mb.Blocks) != 2 || mb.Blocks[0].NumSrc() != 0 || mb.Blocks[1].NumEdges() != 0 {
		t.Fatalf("empty seeds: %+v %v", mb, err)
	}
}

func TestFullNeighborSampler(t *testing.T) {
	g := randomGraph(t, 5, 500, 6)
	s, err := NewFullNeighborSampler(g, 2)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := s.Sample([]graph.NodeID{3, 7, 11}, Key{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkBatch(t, g, Config{Fanouts: []int{-1, -1}}, []graph.NodeID{3, 7, 11}, mb)
	// With every neighbor taken the key does not matter.
	mb2, _ := s.Sample([]graph.NodeID{3, 7, 11}, Key{Seed: 2, Epoch: 9})
	if digest(mb) != digest(mb2) {
		t.Fatalf("full sampling depends on the key")
	}
}

func allNodes(n int) []graph.NodeID {
	s := make([]graph.NodeID, n)
	for i := range s {
		s[i] = graph.NodeID(i)
	}
	return s
}

// badHop is a HopSampler returning whatever it is told to.
type badHop struct{ nb Neighbors }

func (h *badHop) NumNodes() int64 { return 10 }
func (h *badHop) NumHops() int    { return 1 }
func (h *badHop) SampleHop(dst []graph.NodeID, hop int, key Key) (*Neighbors, error) {
	c := h.nb
	c.Nodes = slices.Clone(c.Nodes)
	return &c, nil
}

func TestBlockSamplerRejectsBadHops(t *testing.T) {
	cases := []struct {
		name string
		nb   Neighbors
		kind error
	}{
		{"id out of range", Neighbors{Indptr: []int64{0, 1}, Nodes: []graph.NodeID{10}, EdgeIDs: []int64{0}}, ErrNode},
		{"negative id", Neighbors{Indptr: []int64{0, 1}, Nodes: []graph.NodeID{-1}}, ErrNode},
		{"short indptr", Neighbors{Indptr: []int64{0}, Nodes: []graph.NodeID{}}, ErrConfig},
		{"indptr end", Neighbors{Indptr: []int64{0, 2}, Nodes: []graph.NodeID{1}}, ErrConfig},
		{"edge ids", Neighbors{Indptr: []int64{0, 1}, Nodes: []graph.NodeID{1}, EdgeIDs: []int64{}}, ErrConfig},
	}
	for _, c := range cases {
		_, err := NewBlockSampler(&badHop{c.nb}).Sample([]graph.NodeID{3}, Key{})
		if !errors.Is(err, c.kind) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.kind)
		}
	}
	mb, err := NewBlockSampler(&badHop{Neighbors{Indptr: []int64{0, 2}, Nodes: []graph.NodeID{7, 3}}}).Sample([]graph.NodeID{3}, Key{})
	if err != nil || !slices.Equal(mb.Blocks[0].SrcNodes, []graph.NodeID{3, 7}) || !slices.Equal(mb.Blocks[0].Indices, []int32{1, 0}) {
		t.Fatalf("good hop: %+v %v", mb, err)
	}
}
