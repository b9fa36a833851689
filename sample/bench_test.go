package sample_test

import (
	"sync"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/graph/graphtest"
	"github.com/strata-gnn/strata/sample"
)

// Sampled edges per second for [15,10,5] (seeds' hop first), batch 1024:
//
//	go test -run XXX -bench NeighborSampler -benchtime 3s ./sample
//
// products needs ~1 GB and 30 s to build its graph; it is skipped with -short.

var (
	cnrInOnce sync.Once
	cnrIn     *graph.CSR
	prodOnce  sync.Once
	prodIn    *graph.CSR
)

func cnrInGraph(b *testing.B) *graph.CSR {
	g := graphtest.CNR2000(b)
	cnrInOnce.Do(func() {
		var err error
		if cnrIn, err = graph.Transpose(g); err != nil {
			b.Fatal(err)
		}
		// Weights for the weighted modes: 1 + (u+v) mod 7.
		cnrIn.Weights = make([]float32, cnrIn.NumEdges())
		for v := int64(0); v < cnrIn.NumRows; v++ {
			for e := cnrIn.Indptr[v]; e < cnrIn.Indptr[v+1]; e++ {
				cnrIn.Weights[e] = float32(1 + (int64(cnrIn.Indices[e])+v)%7)
			}
		}
	})
	return cnrIn
}

func productsGraph(b *testing.B) *graph.CSR {
	if testing.Short() {
		b.Skip("products-shaped graph (124M edges) skipped with -short")
	}
	prodOnce.Do(func() { prodIn = graphtest.PowerLaw(2_449_029, 50.5, 1) })
	return prodIn
}

func benchSample(b *testing.B, g *graph.CSR, cfg sample.Config) {
	s, err := sample.NewNeighborSampler(g, cfg)
	if err != nil {
		b.Fatal(err)
	}
	nodes := make([]graph.NodeID, g.NumRows)
	for i := range nodes {
		nodes[i] = graph.NodeID(i)
	}
	batches, err := sample.SeedBatches(nodes, 1024, sample.Key{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	var edges, inputs int64
	i := 0
	for b.Loop() {
		mb, err := s.Sample(batches[i%len(batches)], sample.Key{Seed: 1, Batch: i})
		if err != nil {
			b.Fatal(err)
		}
		for _, blk := range mb.Blocks {
			edges += int64(blk.NumEdges())
		}
		inputs += int64(len(mb.InputNodes()))
		i++
	}
	b.ReportMetric(float64(edges)/b.Elapsed().Seconds(), "edges/s")
	b.ReportMetric(float64(edges)/float64(i), "edges/batch")
	b.ReportMetric(float64(inputs)/float64(i), "inputs/batch")
}

var benchModes = []struct {
	name string
	cfg  sample.Config
}{
	{"uniform", sample.Config{}},
	{"uniform-replace", sample.Config{Replace: true}},
	{"weighted", sample.Config{Weighted: true}},
	{"weighted-replace", sample.Config{Weighted: true, Replace: true}},
}

func BenchmarkNeighborSampler(b *testing.B) {
	for _, m := range benchModes {
		b.Run("cnr-2000/"+m.name, func(b *testing.B) {
			cfg := m.cfg
			cfg.Fanouts = []int{15, 10, 5}
			benchSample(b, cnrInGraph(b), cfg)
		})
	}
	for _, m := range benchModes[:2] {
		b.Run("products/"+m.name, func(b *testing.B) {
			cfg := m.cfg
			cfg.Fanouts = []int{15, 10, 5}
			benchSample(b, productsGraph(b), cfg)
		})
	}
}
