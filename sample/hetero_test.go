package sample

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// typedGraph is a random typed graph: 3 node types of the given sizes and
// relations 1->0, 0->0, 0->2, 2->0 with about deg in-edges per
// destination, rows sorted and free of repeats.
func typedGraph(sizes []int64, deg int, seed uint64) []Relation {
	rel := func(src, dst int, salt uint64) Relation {
		nd, ns := sizes[dst], sizes[src]
		ip := make([]int64, nd+1)
		var ix []int32
		for v := int64(0); v < nd; v++ {
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
		return Relation{Src: src, Dst: dst, In: &graph.CSR{NumRows: nd, NumCols: ns, Indptr: ip, Indices: ix}}
	}
	return []Relation{rel(1, 0, 1), rel(0, 0, 2), rel(0, 2, 3), rel(2, 0, 4)}
}

// checkHeteroBatch verifies a typed batch against the graph: seeds first,
// destinations first among sources, sources distinct per type, every
// sampled edge a real in-edge of its destination (EdgeIDs too), at most
// the fanout per row without repeats, and every frontier row of a
// relation present.
func checkHeteroBatch(t *testing.T, rels []Relation, fan [][]int, seedType int, seeds []int32, mb *HeteroMiniBatch) {
	t.Helper()
	hops := len(mb.Blocks)
	if !reflect.DeepEqual(mb.Blocks[hops-1].SrcNodes[seedType][:len(seeds)], seeds) || mb.Blocks[hops-1].NumDst[seedType] != len(seeds) {
		t.Fatalf("last block does not start with the seeds")
	}
	for b := range mb.Blocks {
		blk := &mb.Blocks[b]
		hop := hops - 1 - b
		for ty, src := range blk.SrcNodes {
			if len(slices.Compact(slices.Sorted(slices.Values(src)))) != len(src) {
				t.Fatalf("block %d: sources of type %d repeat: %v", b, ty, src)
			}
			if b > 0 && !reflect.DeepEqual(nonEmpty(mb.Blocks[b-1].SrcNodes[ty][:mb.Blocks[b-1].NumDst[ty]]), nonEmpty(src)) {
				t.Fatalf("block %d's sources of type %d are not block %d's destinations", b, ty, b-1)
			}
		}
		for r, rel := range rels {
			rb := blk.Rels[r]
			nd := blk.NumDst[rel.Dst]
			if len(rb.Indptr) != nd+1 || len(rb.EdgeIDs) != len(rb.Indices) {
				t.Fatalf("block %d relation %d: %d row pointers for %d destinations", b, r, len(rb.Indptr), nd)
			}
			k := fan[r][hop]
			for i := 0; i < nd; i++ {
				v := blk.SrcNodes[rel.Dst][i]
				row := rb.Indices[rb.Indptr[i]:rb.Indptr[i+1]]
				deg := int(rel.In.Degree(v))
				want := deg
				if k >= 0 {
					want = min(k, deg)
				}
				if len(row) != want {
					t.Fatalf("block %d relation %d dst %d: %d edges, want %d (fanout %d, degree %d)", b, r, v, len(row), want, k, deg)
				}
				seen := map[int64]bool{}
				for e := rb.Indptr[i]; e < rb.Indptr[i+1]; e++ {
					id := rb.EdgeIDs[e]
					u := blk.SrcNodes[rel.Src][rb.Indices[e]]
					if id < rel.In.Indptr[v] || id >= rel.In.Indptr[v+1] || rel.In.Indices[id] != u || seen[id] {
						t.Fatalf("block %d relation %d: edge %d (%d -> %d) is not a fresh in-edge of %d", b, r, id, u, v, v)
					}
					seen[id] = true
				}
			}
		}
	}
}

func nonEmpty(s []int32) []int32 {
	if len(s) == 0 {
		return []int32{}
	}
	return s
}

func TestHeteroSamplerFanouts(t *testing.T) {
	sizes := []int64{300, 150, 80}
	rels := typedGraph(sizes, 4, 7)
	fan := [][]int{{2, 3}, {-1, 1}, {3, 0}, {1, 2}}
	s, err := NewHeteroSampler(sizes, rels, HeteroConfig{Fanouts: fan})
	if err != nil {
		t.Fatal(err)
	}
	seeds := []int32{5, 17, 0, 299, 42}
	mb, err := s.Sample(0, seeds, Key{Seed: 3, Epoch: 1, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkHeteroBatch(t, rels, fan, 0, seeds, mb)
	// Hop 1 takes no has_topic edges (fanout 0), so the first block's
	// only fields come from hop 0's frontier.
	if n := mb.Blocks[0].Rels[2].NumEdges(); n != 0 {
		t.Fatalf("relation with fanout 0 sampled %d edges", n)
	}
	// The seeds' hop reached authors and fields; the second one more papers.
	if mb.Blocks[1].NumDst[1] != 0 || len(mb.Blocks[1].SrcNodes[1]) == 0 || len(mb.Blocks[0].SrcNodes[0]) <= len(seeds) {
		t.Fatalf("unexpected frontier sizes: %v / %v", mb.Blocks[1].NumDst, mb.Blocks[0].NumDst)
	}
	// Fanout -1 everywhere: every in-edge of every frontier node.
	all := [][]int{{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}}
	full, err := NewHeteroSampler(sizes, rels, HeteroConfig{Fanouts: all})
	if err != nil {
		t.Fatal(err)
	}
	mb, err = full.Sample(2, []int32{3, 1}, Key{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkHeteroBatch(t, rels, all, 2, []int32{3, 1}, mb)
	// Fields receive only has_topic: the seeds' hop reaches papers only.
	last := mb.Blocks[1]
	if len(last.SrcNodes[1]) != 0 || len(last.SrcNodes[0]) != int(rels[2].In.Degree(3)+rels[2].In.Degree(1))-dupes(rels[2].In, 3, 1) {
		t.Fatalf("seeds' hop sources %v", last.SrcNodes)
	}
}

// dupes counts the sources rows a and b of g share.
func dupes(g *graph.CSR, a, b int32) int {
	n := 0
	for _, u := range g.Neighbors(a) {
		if slices.Contains(g.Neighbors(b), u) {
			n++
		}
	}
	return n
}

// TestHeteroSamplerDeterministic: the batch is a function of the key
// alone, whatever the number of workers; another key gives another batch.
func TestHeteroSamplerDeterministic(t *testing.T) {
	sizes := []int64{3000, 1500, 800}
	rels := typedGraph(sizes, 6, 11)
	fan := [][]int{{3, 2}, {2, 2}, {2, 1}, {4, 3}}
	seeds := make([]int32, 400)
	for i := range seeds {
		seeds[i] = int32(i * 7)
	}
	var ref *HeteroMiniBatch
	for _, w := range []int{1, 3, 8} {
		s, err := NewHeteroSampler(sizes, rels, HeteroConfig{Fanouts: fan, Workers: w})
		if err != nil {
			t.Fatal(err)
		}
		mb, err := s.Sample(0, seeds, Key{Seed: 9, Epoch: 2, Batch: 5})
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			ref = mb
			checkHeteroBatch(t, rels, fan, 0, seeds, mb)
			continue
		}
		if !reflect.DeepEqual(mb, ref) {
			t.Fatalf("workers %d: batch differs from workers 1", w)
		}
	}
	s, _ := NewHeteroSampler(sizes, rels, HeteroConfig{Fanouts: fan})
	other, err := s.Sample(0, seeds, Key{Seed: 9, Epoch: 2, Batch: 6})
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(other.Blocks, ref.Blocks) {
		t.Fatal("another batch key drew the same batch")
	}
	// Seeds of several types: papers and fields at once.
	two := [][]int32{{4, 9}, nil, {0, 3, 1}}
	mb2, err := s.SampleTypes(two, Key{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	last := mb2.Blocks[len(mb2.Blocks)-1]
	if !reflect.DeepEqual(last.SrcNodes[0][:2], two[0]) || !reflect.DeepEqual(last.SrcNodes[2][:3], two[2]) || last.NumDst[1] != 0 {
		t.Fatalf("typed seeds: %v", last.NumDst)
	}
	if _, err := s.SampleTypes(two[:2], Key{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("seed lists: %v", err)
	}
	if _, err := s.SampleTypes([][]int32{nil, {3, 3}, nil}, Key{}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("duplicate typed seeds: %v", err)
	}
	// Replacement draws exactly the fanout for nodes with neighbors.
	rs, err := NewHeteroSampler(sizes, rels, HeteroConfig{Fanouts: fan, Replace: true})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := rs.Sample(0, seeds[:50], Key{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	rb := mb.Blocks[1].Rels[0]
	for i := range 50 {
		if n, deg := rb.Indptr[i+1]-rb.Indptr[i], rels[0].In.Degree(seeds[i]); deg > 0 && n != 3 || deg == 0 && n != 0 {
			t.Fatalf("replace: seed %d drew %d of degree %d", seeds[i], n, deg)
		}
	}
}

func TestHeteroSamplerErrors(t *testing.T) {
	sizes := []int64{30, 15, 8}
	rels := typedGraph(sizes, 3, 1)
	fan := [][]int{{2}, {2}, {2}, {2}}
	s, err := NewHeteroSampler(sizes, rels, HeteroConfig{Fanouts: fan})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		seedType int
		seeds    []int32
		kind     error
		want     string
	}{
		{"duplicate", 0, []int32{1, 2, 1}, ErrDuplicate, "seeds[2]"},
		{"range", 1, []int32{15}, ErrNode, "seeds[0]: 15 not in [0, 15)"},
		{"negative", 0, []int32{-1}, ErrNode, "seeds[0]"},
		{"type", 3, []int32{0}, ErrConfig, "seedType"},
	} {
		_, err := s.Sample(c.seedType, c.seeds, Key{})
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// The relabeling maps are clean after a refused batch.
	mb, err := s.Sample(0, []int32{1, 2}, Key{})
	if err != nil {
		t.Fatal(err)
	}
	checkHeteroBatch(t, rels, fan, 0, []int32{1, 2}, mb)

	bad := []struct {
		name  string
		sizes []int64
		rels  []Relation
		fan   [][]int
		want  string
	}{
		{"fanout lists", sizes, rels, fan[:3], "3 fanout lists for 4 relations"},
		{"hop counts", sizes, rels, [][]int{{2}, {2, 2}, {2}, {2}}, "2 fanouts for relation 1"},
		{"fanout", sizes, rels, [][]int{{2}, {-2}, {2}, {2}}, "hop 0: -2"},
		{"shape", []int64{30, 16, 8}, rels, fan, "graph is 30 x 15, want 30 x 16"},
		{"type", sizes, []Relation{{Src: 4, Dst: 0, In: rels[0].In}}, [][]int{{1}}, "node types 4 -> 0"},
		{"total", []int64{1 << 31, 1}, nil, nil, "types' total"},
	}
	for _, c := range bad {
		if _, err := NewHeteroSampler(c.sizes, c.rels, HeteroConfig{Fanouts: c.fan}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// SampleHop from a frontier draws, for each of its nodes, the rows Sample
// draws for that node at that hop.
func TestHeteroSampleHop(t *testing.T) {
	sizes := []int64{500, 300, 200}
	rels := typedGraph(sizes, 5, 3)
	fan := [][]int{{3, 2}, {2, 0}, {2, 1}, {-1, 3}}
	s, err := NewHeteroSampler(sizes, rels, HeteroConfig{Fanouts: fan})
	if err != nil {
		t.Fatal(err)
	}
	key := Key{Seed: 4, Epoch: 1, Batch: 2}
	seeds := []int32{7, 3, 99, 250}
	mb, err := s.Sample(0, seeds, key)
	if err != nil {
		t.Fatal(err)
	}
	// Hop 1 from a frontier of a few nodes of each type that hop 0 reached.
	last := &mb.Blocks[0] // hop 1's block
	front := make([][]int32, 3)
	for ty := range 3 {
		src := last.SrcNodes[ty][:last.NumDst[ty]]
		for i := len(src) - 1; i >= 0 && len(front[ty]) < 3; i -= 2 {
			front[ty] = append(front[ty], src[i])
		}
	}
	blk, err := s.SampleHop(front, 1, key)
	if err != nil {
		t.Fatal(err)
	}
	nodes := 0
	for r, rel := range rels {
		for i, v := range front[rel.Dst] {
			j := slices.Index(last.SrcNodes[rel.Dst][:last.NumDst[rel.Dst]], v)
			want := last.Rels[r].Indices[last.Rels[r].Indptr[j]:last.Rels[r].Indptr[j+1]]
			got := blk.Rels[r].Indices[blk.Rels[r].Indptr[i]:blk.Rels[r].Indptr[i+1]]
			if len(got) != len(want) {
				t.Fatalf("relation %d node %d: %d neighbors, Sample drew %d", r, v, len(got), len(want))
			}
			for k := range got {
				if blk.SrcNodes[rel.Src][got[k]] != last.SrcNodes[rel.Src][want[k]] {
					t.Fatalf("relation %d node %d: neighbor %d differs from Sample's", r, v, k)
				}
				nodes++
			}
		}
	}
	if nodes == 0 {
		t.Fatal("no neighbors drawn")
	}
	for _, tc := range []struct {
		dst  [][]int32
		hop  int
		says string
	}{
		{front[:2], 0, "frontier lists"},
		{front, 2, "hop"},
		{[][]int32{{500}, nil, nil}, 0, "not in [0, 500)"},
		{[][]int32{{1, 1}, nil, nil}, 0, "already at position"},
	} {
		if _, err := s.SampleHop(tc.dst, tc.hop, key); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("SampleHop(%v, %d): %v, want %q", tc.dst, tc.hop, err, tc.says)
		}
	}
}
