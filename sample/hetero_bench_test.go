package sample

import (
	"testing"

	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/graph"
)

// BenchmarkHeteroSample compares typed sampling of the hetero preset
// (16,000 papers, fanout 10 per relation and hop) with homogeneous
// sampling of the same graph with its types erased (fanout 10 per hop,
// so fewer edges a batch): sampled edges per second is the figure to
// compare (b.ReportMetric "edges/s").
func BenchmarkHeteroSample(b *testing.B) {
	c := gen.HeteroPreset()
	c.Papers = 16000
	h, err := gen.GenerateHetero(c)
	if err != nil {
		b.Fatal(err)
	}
	seeds := make([]graph.NodeID, 1024)
	for i := range seeds {
		seeds[i] = int32(i * 13 % int(c.Papers))
	}
	b.Run("typed", func(b *testing.B) {
		n := make([]int64, len(h.NodeTypes))
		for t, nt := range h.NodeTypes {
			n[t] = nt.NumNodes
		}
		var rels []Relation
		var fan [][]int
		for _, et := range h.EdgeTypes {
			rels = append(rels, Relation{Src: et.Src, Dst: et.Dst, In: et.In})
			fan = append(fan, []int{10, 10})
		}
		s, err := NewHeteroSampler(n, rels, HeteroConfig{Fanouts: fan})
		if err != nil {
			b.Fatal(err)
		}
		var edges int64
		for i := 0; b.Loop(); i++ {
			mb, err := s.Sample(h.Target, seeds, Key{Seed: 1, Batch: i})
			if err != nil {
				b.Fatal(err)
			}
			for _, blk := range mb.Blocks {
				for _, r := range blk.Rels {
					edges += int64(r.NumEdges())
				}
			}
		}
		b.ReportMetric(float64(edges)/b.Elapsed().Seconds(), "edges/s")
	})
	b.Run("erased", func(b *testing.B) {
		e, err := h.Erased()
		if err != nil {
			b.Fatal(err)
		}
		s, err := NewNeighborSampler(e.EdgeTypes[0].In, Config{Fanouts: []int{10, 10}})
		if err != nil {
			b.Fatal(err)
		}
		var edges int64
		for i := 0; b.Loop(); i++ {
			mb, err := s.Sample(seeds, Key{Seed: 1, Batch: i})
			if err != nil {
				b.Fatal(err)
			}
			for _, blk := range mb.Blocks {
				edges += int64(blk.NumEdges())
			}
		}
		b.ReportMetric(float64(edges)/b.Elapsed().Seconds(), "edges/s")
	})
}
