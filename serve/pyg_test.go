package serve

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
)

// A hand-checked batch: in-adjacency 0<-1, 0<-2, 1<-3, 2<-3, 3<-4, every
// neighbor taken.
func TestSampleFrontierByHand(t *testing.T) {
	g := csrOf(t, 5, [][2]int32{{0, 1}, {0, 2}, {1, 3}, {2, 3}, {3, 4}})
	ns, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: []int{-1, -1, -1}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := SampleFrontier(ns, NewRelabeler(5), []graph.NodeID{0}, sample.Key{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := &PyGBatch{
		NodeIDs: []graph.NodeID{0, 1, 2, 3, 4},
		// hop 0: 1->0, 2->0; hop 1: 3->1, 3->2; hop 2: 4->3.
		Src: []int32{1, 2, 3, 3, 4}, Dst: []int32{0, 0, 1, 2, 3},
		NumSampledNodes: []int64{1, 2, 1, 1}, NumSampledEdges: []int64{2, 2, 1}, BatchSize: 1,
	}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("got %+v\nwant %+v", b, want)
	}
	// Seeds 3 and 0: node 3's hop-0 neighbor 4 comes before 0's.
	b, err = SampleFrontier(ns, NewRelabeler(5), []graph.NodeID{3, 0}, sample.Key{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	want = &PyGBatch{
		NodeIDs: []graph.NodeID{3, 0, 4, 1, 2},
		// hop 0: 4->3, 1->0, 2->0; hop 1 (frontier 4, 1, 2): 3->1, 3->2 (3 is
		// a seed: local 0); hop 2: nothing new to sample.
		Src: []int32{2, 3, 4, 0, 0}, Dst: []int32{0, 1, 1, 3, 4},
		NumSampledNodes: []int64{2, 3, 0, 0}, NumSampledEdges: []int64{3, 2, 0}, BatchSize: 2,
	}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("got %+v\nwant %+v", b, want)
	}
}

// reference is an independent, slow construction of the PyG batch: one
// SampleHop call per node, a Go map for the relabeling.
func reference(t *testing.T, ns *sample.NeighborSampler, seeds []graph.NodeID, key sample.Key) *PyGBatch {
	t.Helper()
	b := &PyGBatch{BatchSize: len(seeds), NumSampledNodes: []int64{int64(len(seeds))}}
	local := map[graph.NodeID]int32{}
	for i, v := range seeds {
		local[v] = int32(i)
		b.NodeIDs = append(b.NodeIDs, v)
	}
	frontier := slices.Clone(seeds)
	for hop := range ns.NumHops() {
		var next []graph.NodeID
		edges := len(b.Src)
		for _, v := range frontier {
			nb, err := ns.SampleHop([]graph.NodeID{v}, hop, key)
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range nb.Nodes {
				l, ok := local[u]
				if !ok {
					l = int32(len(b.NodeIDs))
					local[u] = l
					b.NodeIDs = append(b.NodeIDs, u)
					next = append(next, u)
				}
				b.Src = append(b.Src, l)
				b.Dst = append(b.Dst, local[v])
			}
		}
		b.NumSampledNodes = append(b.NumSampledNodes, int64(len(next)))
		b.NumSampledEdges = append(b.NumSampledEdges, int64(len(b.Src)-edges))
		frontier = next
	}
	return b
}

func TestSampleFrontierMatchesReferenceAndMiniBatch(t *testing.T) {
	ds := tiny(t)
	in := ds.InGraph()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, cfg := range []sample.Config{
		{Fanouts: []int{5, 3, 2}},
		{Fanouts: []int{-1, 4}},
		{Fanouts: []int{3, 3}, Replace: true},
		{Fanouts: []int{15, 10, 5}, Workers: 3},
	} {
		ns, err := sample.NewNeighborSampler(in, cfg)
		if err != nil {
			t.Fatal(err)
		}
		r1, r2 := NewRelabeler(in.NumRows), NewRelabeler(in.NumRows)
		for trial := range 6 {
			seeds := make([]graph.NodeID, 0, 40)
			for _, p := range rng.Perm(int(in.NumRows))[:1+trial*7] {
				seeds = append(seeds, graph.NodeID(p))
			}
			key := sample.Key{Seed: uint64(trial) + 7, Epoch: trial % 3, Batch: trial}
			got, err := SampleFrontier(ns, r1, seeds, key)
			if err != nil {
				t.Fatal(err)
			}
			if want := reference(t, ns, seeds, key); !reflect.DeepEqual(got, want) {
				t.Fatalf("%+v trial %d: SampleFrontier differs from the reference", cfg, trial)
			}
			mb, err := ns.Sample(seeds, key)
			if err != nil {
				t.Fatal(err)
			}
			fm, err := FromMiniBatch(mb, r2, in.NumRows)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, fm) {
				t.Fatalf("%+v trial %d: FromMiniBatch differs from SampleFrontier", cfg, trial)
			}
			checkPyG(t, in, got, seeds, cfg)
		}
	}
}

// checkPyG checks the invariants of a PyG batch against the graph alone.
func checkPyG(t *testing.T, in *graph.CSR, b *PyGBatch, seeds []graph.NodeID, cfg sample.Config) {
	t.Helper()
	if !slices.Equal(b.NodeIDs[:len(seeds)], seeds) {
		t.Fatal("n_id does not start with the seeds")
	}
	var sumN, sumE int64
	for _, c := range b.NumSampledNodes {
		sumN += c
	}
	for _, c := range b.NumSampledEdges {
		sumE += c
	}
	if sumN != int64(len(b.NodeIDs)) || sumE != int64(len(b.Src)) || len(b.Src) != len(b.Dst) {
		t.Fatalf("counts %v %v for %d nodes, %d edges", b.NumSampledNodes, b.NumSampledEdges, len(b.NodeIDs), len(b.Src))
	}
	seen := map[graph.NodeID]bool{}
	for _, v := range b.NodeIDs {
		if seen[v] {
			t.Fatalf("node %d twice in n_id", v)
		}
		seen[v] = true
	}
	e := 0
	lo, hi := int64(0), b.NumSampledNodes[0]
	for hop, ne := range b.NumSampledEdges {
		perDst := map[int32]int{}
		for range ne {
			s, d := b.Src[e], b.Dst[e]
			if int64(d) < lo || int64(d) >= hi {
				t.Fatalf("hop %d edge %d: destination %d not among the nodes hop %d added [%d, %d)", hop, e, d, hop-1, lo, hi)
			}
			v, u := b.NodeIDs[d], b.NodeIDs[s]
			row := in.Indices[in.Indptr[v]:in.Indptr[v+1]]
			if !slices.Contains(row, u) {
				t.Fatalf("hop %d: edge %d -> %d is not in the graph", hop, u, v)
			}
			perDst[d]++
			e++
		}
		for d := lo; d < hi; d++ {
			v := b.NodeIDs[d]
			deg := int(in.Indptr[v+1] - in.Indptr[v])
			want := min(deg, cfg.Fanouts[hop])
			if cfg.Fanouts[hop] < 0 {
				want = deg
			}
			if cfg.Replace && deg > 0 && cfg.Fanouts[hop] > 0 {
				want = cfg.Fanouts[hop]
			}
			if perDst[int32(d)] != want {
				t.Fatalf("hop %d: node %d (degree %d) has %d sampled neighbors, want %d", hop, v, deg, perDst[int32(d)], want)
			}
		}
		lo, hi = hi, hi+b.NumSampledNodes[hop+1]
	}
}

func TestSampleFrontierRefusals(t *testing.T) {
	g := csrOf(t, 3, [][2]int32{{0, 1}})
	ns, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: []int{2}})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRelabeler(3)
	for _, seeds := range [][]graph.NodeID{{0, 0}, {3}, {-1}} {
		_, err := SampleFrontier(ns, r, seeds, sample.Key{})
		var re *RequestError
		if !errors.As(err, &re) || re.Field != "seeds" || !errors.Is(err, ErrInvalid) {
			t.Fatalf("seeds %v: %v, want a RequestError on seeds", seeds, err)
		}
	}
	// The relabeler is reset after a refusal: a good batch still works.
	if b, err := SampleFrontier(ns, r, []graph.NodeID{0, 1}, sample.Key{}); err != nil || !slices.Equal(b.NodeIDs, []graph.NodeID{0, 1}) {
		t.Fatalf("after refusals: %v %v", b, err)
	}
	if _, err := SampleFrontier(ns, NewRelabeler(4), []graph.NodeID{0}, sample.Key{}); err == nil {
		t.Fatal("a relabeler of another size was accepted")
	}
	// A malformed MiniBatch is an error, not a panic.
	bad := &sample.MiniBatch{Seeds: []graph.NodeID{0}, Blocks: []sample.Block{{SrcNodes: []graph.NodeID{0, 7}, NumDst: 1, Indptr: []int64{0, 1}, Indices: []int32{1}}}}
	if _, err := FromMiniBatch(bad, r, 3); err == nil {
		t.Fatal("a MiniBatch with node 7 of 3 was accepted")
	}
	bad.Blocks[0] = sample.Block{SrcNodes: []graph.NodeID{1}, NumDst: 1, Indptr: []int64{0, 0}}
	if _, err := FromMiniBatch(bad, r, 3); err == nil {
		t.Fatal("a MiniBatch whose block lacks the seed was accepted")
	}
}

// fakeHop returns fixed neighbors for every hop (for malformed samplers).
type fakeHop struct {
	n  int64
	nb sample.Neighbors
}

func (f fakeHop) NumNodes() int64 { return f.n }
func (f fakeHop) NumHops() int    { return 1 }
func (f fakeHop) SampleHop(dst []graph.NodeID, hop int, key sample.Key) (*sample.Neighbors, error) {
	nb := f.nb
	return &nb, nil
}

// A sampler that returns bad rows or nodes after good ones is an error,
// and the relabeler (whose array the good ones marked) is clean again
// for the next batch.
func TestRelabelAfterMalformedHop(t *testing.T) {
	g := csrOf(t, 4, [][2]int32{{0, 1}, {0, 2}, {1, 3}, {2, 3}})
	ns, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: []int{2, 2}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := SampleFrontier(ns, NewRelabeler(4), []graph.NodeID{0, 3}, sample.Key{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRelabeler(4)
	for _, bad := range []sample.Neighbors{
		{Indptr: []int64{0, 2}, Nodes: []graph.NodeID{2, 9}},  // node 9 of 4, after node 2
		{Indptr: []int64{1, 2}, Nodes: []graph.NodeID{2, 3}},  // rows that do not start at 0
		{Indptr: []int64{0, 3}, Nodes: []graph.NodeID{1, 2}},  // a row past the neighbors
		{Indptr: []int64{0, 1}, Nodes: []graph.NodeID{1, 2}},  // neighbors no row covers
		{Indptr: []int64{0, 2}, Nodes: []graph.NodeID{3, -1}}, // a negative node
	} {
		if _, err := SampleFrontier(fakeHop{4, bad}, r, []graph.NodeID{0}, sample.Key{}); err == nil {
			t.Fatalf("neighbors %+v accepted", bad)
		}
		got, err := SampleFrontier(ns, r, []graph.NodeID{0, 3}, sample.Key{Seed: 2})
		if err != nil || !slices.Equal(got.NodeIDs, want.NodeIDs) || !slices.Equal(got.Src, want.Src) || !slices.Equal(got.Dst, want.Dst) {
			t.Fatalf("after %+v: %+v (%v), want %+v", bad, got, err, want)
		}
	}
	// The same for a MiniBatch whose second edge is bad.
	mb := &sample.MiniBatch{Seeds: []graph.NodeID{0}, Blocks: []sample.Block{{SrcNodes: []graph.NodeID{0, 2, 7}, NumDst: 1, Indptr: []int64{0, 2}, Indices: []int32{1, 2}}}}
	if _, err := FromMiniBatch(mb, r, 4); err == nil {
		t.Fatal("a MiniBatch with node 7 of 4 was accepted")
	}
	got, err := SampleFrontier(ns, r, []graph.NodeID{0, 3}, sample.Key{Seed: 2})
	if err != nil || !slices.Equal(got.NodeIDs, want.NodeIDs) || !slices.Equal(got.Src, want.Src) {
		t.Fatalf("after a bad MiniBatch: %+v (%v), want %+v", got, err, want)
	}
}
