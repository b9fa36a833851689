package csp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// EnvBenchDataset names a Strata dataset directory for the benchmark;
// when unset the products preset is generated in process (~2 GB, a few
// seconds on a many-core host).
const EnvBenchDataset = "STRATA_BENCH_DATASET"

var (
	prodOnce  sync.Once
	prodG     *graph.CSR
	prodTrain []int32
	prodErr   error
)

func productsData(b *testing.B) (*graph.CSR, []int32) {
	if testing.Short() {
		b.Skip("products shape skipped with -short")
	}
	prodOnce.Do(func() {
		if dir := os.Getenv(EnvBenchDataset); dir != "" {
			ds, err := dataset.Open(dir, dataset.OpenOptions{Quiet: true, SkipChecksums: true})
			if err != nil {
				prodErr = err
				return
			}
			prodG, prodTrain = ds.InGraph(), ds.Train
			return
		}
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
		prodG, prodTrain = ds.Graph, ds.Train // undirected: its own in-adjacency
	})
	if prodErr != nil {
		b.Fatal(prodErr)
	}
	return prodG, prodTrain
}

// epochPlan shuffles the training nodes and splits them among P ranks by
// owner (DSP: each rank draws seeds it owns) into batches of bs; every
// rank takes steps batches (empty ones at the end where it has fewer).
func epochPlan(train []int32, off []int64, bs int, seed uint64) (steps int, batches [][][]graph.NodeID) {
	r := rand.New(rand.NewPCG(seed, 0))
	ids := append([]graph.NodeID(nil), train...)
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	P := len(off) - 1
	own := make([][]graph.NodeID, P)
	for _, v := range ids {
		p := ownerOf(off, int64(v))
		own[p] = append(own[p], v)
	}
	batches = make([][][]graph.NodeID, P)
	for p := range P {
		for i := 0; i < len(own[p]); i += bs {
			batches[p] = append(batches[p], own[p][i:min(i+bs, len(own[p]))])
		}
		steps = max(steps, len(batches[p]))
	}
	return steps, batches
}

// BenchmarkEpochProducts samples one epoch of the products shape (batch
// 1024 per rank, fanouts 15,10,5, uniform without replacement) per
// iteration: "single" is gpusample on one GPU over the whole graph (the
// same training nodes in batches of 1024), "P=n" the collective sampler
// on n GPUs over NCCL with the node IDs split into n equal contiguous
// ranges (the generator's IDs carry no locality: a random partition,
// the most traffic). Reports ms/epoch, sampled edges per second, bytes
// sent between GPUs per epoch, the host's waits per step and rank
// (Stats.Waits) and the time in them (Stats.WaitTime), and the device
// allocator's cuMemAlloc calls per step and rank after a warm-up epoch
// (0: the caching allocator serves every buffer).
func BenchmarkEpochProducts(b *testing.B) {
	all := gpus(b, numGPUs(b))
	g, train := productsData(b)
	fan := []int{15, 10, 5}
	b.Run("single", func(b *testing.B) {
		s, err := gpusample.New(all[0], g, gpusample.Config{Fanouts: fan})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		_, bt := epochPlan(train, []int64{0, g.NumRows}, 1024, 1)
		var edges int64
		b.ResetTimer()
		for it := 0; it < b.N; it++ {
			for i, seeds := range bt[0] {
				batch, err := s.SampleDevice(seeds, sample.Key{Seed: 1, Epoch: it, Batch: i})
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range batch.Blocks {
					edges += int64(k.NumEdges)
				}
				batch.Free()
			}
		}
		b.StopTimer()
		sec := b.Elapsed().Seconds()
		b.ReportMetric(sec/float64(b.N)*1e3, "ms/epoch")
		b.ReportMetric(float64(edges)/sec/1e6, "Medges/s")
		b.ReportMetric(float64(len(bt[0])), "batches")
	})
	for _, P := range []int{1, 2, 4} {
		if P > len(all) {
			continue
		}
		// P=1 runs the protocol with local exchanges (its overhead over
		// "single"); New itself samples one rank directly.
		b.Run(fmt.Sprintf("P=%d", P), func(b *testing.B) {
			off := make([]int64, P+1)
			for p := range off {
				off[p] = g.NumRows * int64(p) / int64(P)
			}
			ss, done := groupWith(b, g, off, Config{Fanouts: fan}, true)
			defer done()
			steps, bt := epochPlan(train, off, 1024, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			// One warm-up epoch outside the timing fills the allocator's
			// cache, so mallocs/step measures steady state.
			errs := make([]error, P)
			epoch := func(it int, edges []int64) {
				var wg sync.WaitGroup
				for r := range P {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < steps && errs[r] == nil; i++ {
							var seeds []graph.NodeID
							if i < len(bt[r]) {
								seeds = bt[r][i]
							}
							batch, err := ss[r].Sample(ctx, seeds, sample.Key{Seed: 1, Epoch: it, Batch: i*P + r})
							if err != nil {
								errs[r] = err
								return
							}
							for _, k := range batch.Device.Blocks {
								edges[r] += int64(k.NumEdges)
							}
							batch.Free()
						}
					}()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			epoch(-1, make([]int64, P))
			before := make([]Stats, P)
			mallocs := int64(0)
			for r := range P {
				before[r] = ss[r].Stats()
				mallocs -= all[r].(backend.Memory).Stats().Mallocs
			}
			edges := make([]int64, P)
			b.ResetTimer()
			for it := 0; it < b.N; it++ {
				epoch(it, edges)
			}
			b.StopTimer()
			sec := b.Elapsed().Seconds()
			var sent, total, waits int64
			var waitT time.Duration
			for r := range P {
				st := ss[r].Stats()
				sent += sum64(st.BytesSent) - sum64(before[r].BytesSent)
				waits += st.Waits - before[r].Waits
				waitT += st.WaitTime - before[r].WaitTime
				total += edges[r]
				mallocs += all[r].(backend.Memory).Stats().Mallocs
			}
			stepsRun := float64(b.N * steps * P)
			b.ReportMetric(sec/float64(b.N)*1e3, "ms/epoch")
			b.ReportMetric(float64(total)/sec/1e6, "Medges/s")
			b.ReportMetric(float64(sent)/float64(b.N)/1e6, "MB-sent/epoch")
			b.ReportMetric(float64(steps), "steps")
			b.ReportMetric(float64(waits)/stepsRun, "waits/step")
			b.ReportMetric(float64(waitT.Microseconds())/stepsRun, "wait-us/step")
			b.ReportMetric(float64(mallocs)/stepsRun, "mallocs/step")
		})
	}
}
