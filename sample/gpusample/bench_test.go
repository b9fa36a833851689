package gpusample

import (
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
)

// EnvBenchDataset names a Strata dataset directory for the benchmarks
// (e.g. one written by `strata gen DIR --preset products`).
const EnvBenchDataset = "STRATA_BENCH_DATASET"

// EnvBenchProfile names the BenchmarkTrainEpochGPU variants to profile.
const EnvBenchProfile = "STRATA_BENCH_PROFILE"

func benchProfile() string { return os.Getenv(EnvBenchProfile) }

var (
	benchOnce sync.Once
	benchDS   *dataset.Dataset
	benchErr  error
)

func benchData(b *testing.B) (*dataset.Dataset, *graph.CSR) {
	dir := os.Getenv(EnvBenchDataset)
	if dir == "" {
		b.Skipf("set %s to a dataset directory", EnvBenchDataset)
	}
	benchOnce.Do(func() { benchDS, benchErr = dataset.Open(dir, dataset.OpenOptions{Quiet: true, SkipChecksums: true}) })
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchDS, benchDS.InGraph()
}

// epochBatches shuffles the training nodes into batches of size bs.
func epochBatches(train []int32, bs int, seed uint64) [][]graph.NodeID {
	r := rand.New(rand.NewPCG(seed, 0))
	ids := append([]graph.NodeID(nil), train...)
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	var out [][]graph.NodeID
	for i := 0; i < len(ids); i += bs {
		out = append(out, ids[i:min(i+bs, len(ids))])
	}
	return out
}

// benchSample samples one epoch per iteration (batch 1024, fanouts
// [15, 10, 5]) and reports sampled edges per second and ms per epoch.
func benchSample(b *testing.B, place Placement) {
	d := gpu(b)
	ds, g := benchData(b)
	s, err := New(d, g, Config{Fanouts: []int{15, 10, 5}, Placement: place})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	batches := epochBatches(ds.Train, 1024, 1)
	var edges int64
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for i, seeds := range batches {
			bt, err := s.SampleDevice(seeds, sample.Key{Seed: 1, Epoch: it, Batch: i})
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range bt.Blocks {
				edges += int64(k.NumEdges)
			}
			bt.Free()
		}
	}
	b.StopTimer()
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(edges)/sec/1e6, "Medges/s")
	b.ReportMetric(sec/float64(b.N)*1e3, "ms/epoch")
	b.ReportMetric(float64(len(batches)), "batches")
}

func BenchmarkSampleEpochDevice(b *testing.B) { benchSample(b, OnDevice) }
func BenchmarkSampleEpochMapped(b *testing.B) { benchSample(b, Mapped) }

// BenchmarkSampleEpochCPU is the CPU sampler on the same batches, for
// comparison (all host cores).
func BenchmarkSampleEpochCPU(b *testing.B) {
	ds, g := benchData(b)
	s, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: []int{15, 10, 5}})
	if err != nil {
		b.Fatal(err)
	}
	batches := epochBatches(ds.Train, 1024, 1)
	var edges int64
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for i, seeds := range batches {
			mb, err := s.Sample(seeds, sample.Key{Seed: 1, Epoch: it, Batch: i})
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range mb.Blocks {
				edges += int64(k.NumEdges())
			}
		}
	}
	b.StopTimer()
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(edges)/sec/1e6, "Medges/s")
	b.ReportMetric(sec/float64(b.N)*1e3, "ms/epoch")
}
