package gpusample

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
)

// typedRels is a random typed graph: node types of the given sizes and
// relations 1->0, 0->0, 0->2, 2->0, 2->1 (rows sorted, no repeats), so
// that relations have more sources than destinations and the reverse.
func typedRels(sizes []int64, deg int, seed uint64) []sample.Relation {
	r := rand.New(rand.NewPCG(seed, 9))
	rel := func(src, dst int) sample.Relation {
		nd, ns := sizes[dst], sizes[src]
		ip := make([]int64, nd+1)
		var ix []int32
		for v := int64(0); v < nd; v++ {
			k := r.IntN(2*deg + 1)
			if v%211 == 3 {
				k = 300 // a hub
			}
			row := make([]int32, k)
			for j := range row {
				row[j] = int32(r.Int64N(ns))
			}
			slices.Sort(row)
			ix = append(ix, slices.Compact(row)...)
			ip[v+1] = int64(len(ix))
		}
		return sample.Relation{Src: src, Dst: dst, In: &graph.CSR{NumRows: nd, NumCols: ns, Indptr: ip, Indices: ix}}
	}
	return []sample.Relation{rel(1, 0), rel(0, 0), rel(0, 2), rel(2, 0), rel(2, 1)}
}

// TestHeteroMatchesCPU: the CUDA machine's typed batches equal the CPU
// machine's (sample.HeteroSampler) byte for byte, for several fanouts
// (per relation, with 0 and -1), with and without replacement, with the
// relations on the device and in mapped host memory, seeded by one type
// (Sample) and by several (SampleTypes).
func TestHeteroMatchesCPU(t *testing.T) {
	d := gpu(t)
	sizes := []int64{3000, 1200, 4500}
	rels := typedRels(sizes, 8, 1)
	r := rand.New(rand.NewPCG(4, 5))
	fans := [][][]int{
		{{10, 5}, {10, 5}, {10, 5}, {10, 5}, {10, 5}},
		{{3, 0}, {0, 4}, {-1, 2}, {7, 7}, {1, -1}},
		{{4, 3, 2}, {2, 2, 2}, {5, 0, 1}, {0, 0, 0}, {6, 1, 3}},
	}
	for fi, fan := range fans {
		for _, replace := range []bool{false, true} {
			for _, place := range []Placement{OnDevice, Mapped} {
				name := fmt.Sprintf("fan%d/replace=%v/place=%d", fi, replace, place)
				cfg := sample.HeteroConfig{Fanouts: fan, Replace: replace}
				cpu, err := sample.NewHeteroSampler(sizes, rels, cfg)
				if err != nil {
					t.Fatal(err)
				}
				gs, err := NewHetero(d, sizes, rels, cfg, place)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for b := range 4 {
					key := sample.Key{Seed: uint64(7 + fi), Epoch: 2, Batch: b}
					seeds := seedsOf(r, int(sizes[0]), 64+b*100)
					want, err := cpu.Sample(0, seeds, key)
					if err != nil {
						t.Fatal(err)
					}
					got, err := gs.Sample(0, seeds, key)
					if err != nil {
						t.Fatalf("%s batch %d: %v", name, b, err)
					}
					compareTyped(t, fmt.Sprintf("%s batch %d", name, b), got, want)
					typed := [][]graph.NodeID{seedsOf(r, int(sizes[0]), 20), nil, seedsOf(r, int(sizes[2]), 30+b)}
					if want, err = cpu.SampleTypes(typed, key); err != nil {
						t.Fatal(err)
					}
					if got, err = gs.SampleTypes(typed, key); err != nil {
						t.Fatalf("%s batch %d types: %v", name, b, err)
					}
					compareTyped(t, fmt.Sprintf("%s batch %d types", name, b), got, want)
				}
				if err := gs.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func compareTyped(t *testing.T, name string, got, want *sample.HeteroMiniBatch) {
	t.Helper()
	if !reflect.DeepEqual(got.Seeds, want.Seeds) || len(got.Blocks) != len(want.Blocks) {
		t.Fatalf("%s: seeds or block count differ", name)
	}
	for b := range want.Blocks {
		g, w := got.Blocks[b], want.Blocks[b]
		if !reflect.DeepEqual(g.NumDst, w.NumDst) {
			t.Fatalf("%s block %d: NumDst %v, want %v", name, b, g.NumDst, w.NumDst)
		}
		for ty := range w.SrcNodes {
			if !slices.Equal(g.SrcNodes[ty], w.SrcNodes[ty]) {
				t.Fatalf("%s block %d type %d: %d sources, want %d (or they differ)", name, b, ty, len(g.SrcNodes[ty]), len(w.SrcNodes[ty]))
			}
		}
		for r := range w.Rels {
			gr, wr := g.Rels[r], w.Rels[r]
			if !slices.Equal(gr.Indptr, wr.Indptr) || !slices.Equal(gr.Indices, wr.Indices) || !slices.Equal(gr.EdgeIDs, wr.EdgeIDs) {
				t.Fatalf("%s block %d relation %d: %d edges, want %d (or they differ)", name, b, r, len(gr.Indices), len(wr.Indices))
			}
		}
	}
}

// TestHeteroBadInput: bad seeds are refused as the CPU sampler refuses
// them (same sentinel errors), and a closed sampler says so.
func TestHeteroBadInput(t *testing.T) {
	d := gpu(t)
	sizes := []int64{50, 20, 30}
	rels := typedRels(sizes, 3, 2)
	cfg := sample.HeteroConfig{Fanouts: [][]int{{2}, {2}, {2}, {2}, {2}}}
	gs, err := NewHetero(d, sizes, rels, cfg, OnDevice)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"duplicate", func() error { _, err := gs.Sample(0, []graph.NodeID{1, 1}, sample.Key{}); return err }, sample.ErrDuplicate},
		{"range", func() error { _, err := gs.Sample(1, []graph.NodeID{20}, sample.Key{}); return err }, sample.ErrNode},
		{"type", func() error { _, err := gs.Sample(3, []graph.NodeID{0}, sample.Key{}); return err }, sample.ErrConfig},
		{"lists", func() error { _, err := gs.SampleTypes([][]graph.NodeID{{0}}, sample.Key{}); return err }, sample.ErrConfig},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := NewHetero(d, sizes, rels, sample.HeteroConfig{Fanouts: [][]int{{2}}}, OnDevice); !errors.Is(err, sample.ErrConfig) {
		t.Errorf("fanout lists: %v, want a config error", err)
	}
	gs.Close()
	if _, err := gs.Sample(0, []graph.NodeID{1}, sample.Key{}); !errors.Is(err, sample.ErrConfig) {
		t.Errorf("closed: %v, want a config error", err)
	}
}
