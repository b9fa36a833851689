package sample_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/graph/graphtest"
	"github.com/strata-gnn/strata/sample"
)

// Sampled edges per second for [15,10,5] (seeds' hop first), batch 1024:
//
//	go test -run XXX -bench NeighborSampler -benchtime 3s ./sample
//
// products (the dataset/gen preset) needs ~2 GB and 30 s to generate; it is
// skipped with -short.

var (
	cnrInOnce sync.Once
	cnrIn     *graph.CSR
	prodOnce  sync.Once
	prodIn    *graph.CSR
	prodErr   error
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
	// The generator's products preset (2,449,029 nodes, ~124M stored
	// edges); it is undirected, so its graph is its own in-adjacency.
	prodOnce.Do(func() {
		cfg, err := gen.Preset("products")
		if err != nil {
			prodErr = err
			return
		}
		ds, err := gen.Generate(cfg, nil)
		if err != nil {
			prodErr = err
			return
		}
		prodIn = ds.Graph
	})
	if prodErr != nil {
		b.Fatal(prodErr)
	}
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
	cpu0 := cpuTime()
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
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(edges)/b.Elapsed().Seconds(), "edges/s")
	if cpu > 0 {
		// Throughput per CPU-second: comparable on a shared machine.
		b.ReportMetric(float64(edges)/cpu.Seconds(), "edges/cpu-s")
	}
	b.ReportMetric(float64(edges)/float64(i), "edges/batch")
	b.ReportMetric(float64(inputs)/float64(i), "inputs/batch")
}

// benchConcurrent samples whole batches on GOMAXPROCS goroutines at once,
// each call single-threaded (Workers 1): the throughput a loader gets when
// it prefetches several batches, as data loaders with several workers do.
func benchConcurrent(b *testing.B, g *graph.CSR, cfg sample.Config) {
	cfg.Workers = 1
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
	var edges, next atomic.Int64
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1) - 1)
			mb, err := s.Sample(batches[i%len(batches)], sample.Key{Seed: 1, Batch: i})
			if err != nil {
				b.Error(err)
				return
			}
			for _, blk := range mb.Blocks {
				edges.Add(int64(blk.NumEdges()))
			}
		}
	})
	b.StopTimer()
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(edges.Load())/b.Elapsed().Seconds(), "edges/s")
	if cpu > 0 {
		b.ReportMetric(float64(edges.Load())/cpu.Seconds(), "edges/cpu-s")
	}
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

func BenchmarkNeighborSamplerConcurrent(b *testing.B) {
	cfg := sample.Config{Fanouts: []int{15, 10, 5}}
	b.Run("cnr-2000/uniform", func(b *testing.B) { benchConcurrent(b, cnrInGraph(b), cfg) })
	b.Run("products/uniform", func(b *testing.B) { benchConcurrent(b, productsGraph(b), cfg) })
}
