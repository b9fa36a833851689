package gpusample

import (
	"os"
	"strconv"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
)

// EnvBenchHetero names a typed dataset directory (`strata gen --preset
// hetero`) for BenchmarkHeteroSample; EnvBenchBatches caps the batches
// of one iteration (default 100).
const (
	EnvBenchHetero  = "STRATA_BENCH_HETERO"
	EnvBenchBatches = "STRATA_BENCH_BATCHES"
)

// BenchmarkHeteroSample is issue 18's typed sampling throughput: batches
// of 1024 training nodes of the target type (at most
// $STRATA_BENCH_BATCHES a iteration), fanouts 10,10 per relation of the
// graph with its reverse relations (PyG's ToUndirected: every type
// receives messages), sampled by the CPU machine (sample.HeteroSampler)
// and the CUDA machine (HeteroSampler), against the homogeneous samplers
// (sample.NeighborSampler, Sampler on the GPU) on the same graph with its
// types erased (fanouts 10,10). Each reports sampled edges per second
// ("edges/s") and milliseconds per batch.
func BenchmarkHeteroSample(b *testing.B) {
	dir := os.Getenv(EnvBenchHetero)
	if dir == "" {
		b.Skipf("set %s to a typed dataset directory", EnvBenchHetero)
	}
	h0, err := dataset.OpenHetero(dir, dataset.OpenOptions{Quiet: true, SkipChecksums: true})
	if err != nil {
		b.Fatal(err)
	}
	defer h0.Close()
	h, err := h0.AddReverse()
	if err != nil {
		b.Fatal(err)
	}
	nb := 100
	if v := os.Getenv(EnvBenchBatches); v != "" {
		if nb, err = strconv.Atoi(v); err != nil || nb < 1 {
			b.Fatalf("%s=%q: want a positive count", EnvBenchBatches, v)
		}
	}
	batches := epochBatches(h.Train, 1024, 1)
	batches = batches[:min(nb, len(batches))]
	n := make([]int64, len(h.NodeTypes))
	for t, nt := range h.NodeTypes {
		n[t] = nt.NumNodes
	}
	var rels []sample.Relation
	var fan [][]int
	for _, et := range h.EdgeTypes {
		rels = append(rels, sample.Relation{Src: et.Src, Dst: et.Dst, In: et.In})
		fan = append(fan, []int{10, 10})
	}
	b.Logf("%s with reverse relations: %d nodes, %d edges, %d relations; %d batches of 1024 a iteration", dir, h.NumNodes(), h.NumEdges(), len(rels), len(batches))
	typed := func(b *testing.B, s sample.TypedSampler) {
		var edges int64
		for i := 0; b.Loop(); i++ {
			for j, seeds := range batches {
				mb, err := s.Sample(h.Target, seeds, sample.Key{Seed: 1, Epoch: i, Batch: j})
				if err != nil {
					b.Fatal(err)
				}
				for _, blk := range mb.Blocks {
					for _, r := range blk.Rels {
						edges += int64(r.NumEdges())
					}
				}
			}
		}
		report(b, edges, len(batches))
	}
	b.Run("typed-cpu", func(b *testing.B) {
		s, err := sample.NewHeteroSampler(n, rels, sample.HeteroConfig{Fanouts: fan})
		if err != nil {
			b.Fatal(err)
		}
		typed(b, s)
	})
	b.Run("typed-gpu", func(b *testing.B) {
		s, err := NewHetero(gpu(b), n, rels, sample.HeteroConfig{Fanouts: fan}, OnDevice)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		typed(b, s)
	})
	e, err := h.Erased()
	if err != nil {
		b.Fatal(err)
	}
	g, off := e.EdgeTypes[0].In, h.Offsets()[h.Target]
	erased := make([][]graph.NodeID, len(batches)) // the same seeds, global IDs
	for j, seeds := range batches {
		erased[j] = make([]graph.NodeID, len(seeds))
		for i, v := range seeds {
			erased[j][i] = graph.NodeID(off + int64(v))
		}
	}
	homo := func(b *testing.B, s sample.Sampler) {
		var edges int64
		for i := 0; b.Loop(); i++ {
			for j, seeds := range erased {
				mb, err := s.Sample(seeds, sample.Key{Seed: 1, Epoch: i, Batch: j})
				if err != nil {
					b.Fatal(err)
				}
				for _, blk := range mb.Blocks {
					edges += int64(blk.NumEdges())
				}
			}
		}
		report(b, edges, len(batches))
	}
	b.Run("erased-cpu", func(b *testing.B) {
		s, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: []int{10, 10}})
		if err != nil {
			b.Fatal(err)
		}
		homo(b, s)
	})
	b.Run("erased-gpu", func(b *testing.B) {
		s, err := New(gpu(b), g, Config{Fanouts: []int{10, 10}})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		homo(b, s)
	})
}

func report(b *testing.B, edges int64, batches int) {
	b.ReportMetric(float64(edges)/b.Elapsed().Seconds(), "edges/s")
	b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N*batches), "ms/batch")
	b.ReportMetric(float64(edges)/float64(b.N*batches), "edges/batch")
}
