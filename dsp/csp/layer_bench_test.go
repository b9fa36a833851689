package csp

import (
	"context"
	"fmt"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
)

// runEpochs runs b.N timed epochs (after one warm-up, then warm()) of
// steps collective calls per rank: call(r, it, i, seeds) does rank r's
// i-th call of epoch it and returns what it counts (edges or steps).
func runEpochs(b *testing.B, P, steps int, bt [][][]graph.NodeID, warm func(), call func(r, it, i int, seeds []graph.NodeID) (int64, error)) int64 {
	var total int64
	epoch := func(it int) {
		errs, counts := make([]error, P), make([]int64, P)
		var wg sync.WaitGroup
		for r := range P {
			wg.Go(func() {
				for i := 0; i < steps && errs[r] == nil; i++ {
					var seeds []graph.NodeID
					if i < len(bt[r]) {
						seeds = bt[r][i]
					}
					var c int64
					c, errs[r] = call(r, it, i, seeds)
					counts[r] += c
				}
			})
		}
		wg.Wait()
		for r := range P {
			if errs[r] != nil {
				b.Fatal(errs[r])
			}
			if it >= 0 {
				total += counts[r]
			}
		}
	}
	epoch(-1)
	if warm != nil {
		warm()
	}
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		epoch(it)
	}
	b.StopTimer()
	return total
}

// reportWaits adds the host waits per step and the time in them, and the
// bytes sent per epoch, from the ranks' stats (taken after the warm-up:
// before) to the benchmark.
func reportWaits(b *testing.B, before, after []Stats, steps int) {
	var sent, waits int64
	var waitT time.Duration
	for r := range after {
		sent += sum64(after[r].BytesSent) - sum64(before[r].BytesSent)
		waits += after[r].Waits - before[r].Waits
		waitT += after[r].WaitTime - before[r].WaitTime
	}
	stepsRun := float64(b.N * steps * len(after))
	b.ReportMetric(float64(sent)/float64(b.N)/1e6, "MB-sent/epoch")
	b.ReportMetric(float64(waits)/stepsRun, "waits/step")
	b.ReportMetric(float64(waitT.Microseconds())/stepsRun, "wait-us/step")
}

// BenchmarkLayerEpochProducts samples one epoch of the products shape
// layer-wise (batch 1024 per rank, 4096, 8192 and 8192 edges per layer,
// uniform without replacement) per iteration: "cpu" is LayerSampler
// alone on one rank of a CPU back end (the same batches), "P=n" LayerSampler on n GPUs
// over NCCL with the node IDs split into n equal ranges. Reports
// ms/epoch, sampled edges per second, bytes sent between GPUs per
// epoch, and the host's waits per step and rank and the time in them
// (the first warm-up epoch is not timed).
func BenchmarkLayerEpochProducts(b *testing.B) {
	all := gpus(b, numGPUs(b))
	g, train := productsData(b)
	cfg := Config{Fanouts: []int{4096, 8192, 8192}}
	b.Run("cpu", func(b *testing.B) {
		one := []int64{0, g.NumRows}
		bk, err := book.New(one)
		if err != nil {
			b.Fatal(err)
		}
		patch, err := layout.Build(g, bk, 0, layout.Options{DeviceBytes: layout.NoLimit})
		if err != nil {
			b.Fatal(err)
		}
		be, err := cpu.New(cpu.Options{})
		if err != nil {
			b.Fatal(err)
		}
		s, err := NewLayer(be, patch, one, nil, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		_, bt := epochPlan(train, one, 1024, 1)
		edges := runEpochs(b, 1, len(bt[0]), bt, nil, func(_, it, i int, seeds []graph.NodeID) (int64, error) {
			bt, err := s.Sample(context.Background(), seeds, sample.Key{Seed: 1, Epoch: it, Batch: i})
			if err != nil {
				return 0, err
			}
			var e int64
			for _, k := range bt.Host.Blocks {
				e += int64(k.NumEdges())
			}
			return e, nil
		})
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)*1e3, "ms/epoch")
		b.ReportMetric(float64(edges)/b.Elapsed().Seconds()/1e6, "Medges/s")
	})
	for _, P := range []int{1, 2, 4} {
		if P > len(all) {
			continue
		}
		b.Run(fmt.Sprintf("P=%d", P), func(b *testing.B) {
			off := make([]int64, P+1)
			for p := range off {
				off[p] = g.NumRows * int64(p) / int64(P)
			}
			ss, done := layerGroup(b, g, off, cfg)
			defer done()
			steps, bt := epochPlan(train, off, 1024, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			before := make([]Stats, P)
			warm := func() {
				for r := range P {
					before[r] = ss[r].Stats()
				}
			}
			edges := runEpochs(b, P, steps, bt, warm, func(r, it, i int, seeds []graph.NodeID) (int64, error) {
				batch, err := ss[r].Sample(ctx, seeds, sample.Key{Seed: 1, Epoch: it, Batch: i*P + r})
				if err != nil {
					return 0, err
				}
				defer batch.Free()
				var e int64
				for _, k := range batch.Device.Blocks {
					e += int64(k.NumEdges)
				}
				return e, nil
			})
			after := make([]Stats, P)
			for r := range P {
				after[r] = ss[r].Stats()
			}
			reportWaits(b, before, after, steps)
			sec := b.Elapsed().Seconds()
			b.ReportMetric(sec/float64(b.N)*1e3, "ms/epoch")
			b.ReportMetric(float64(edges)/sec/1e6, "Medges/s")
			b.ReportMetric(float64(steps), "steps")
		})
	}
}

// BenchmarkWalkProducts walks 40 steps from every training node of the
// products shape per iteration (starts in batches of 1024 per rank):
// "cpu" is sample.RandomWalk (the same walks), "P=n" Walker on n GPUs
// over NCCL with the node IDs split into n equal ranges. Reports
// ms/epoch, walk steps per second (starts times length: a walk that
// reaches a dead end counts its missing steps too), bytes sent between
// GPUs per epoch, and the host's waits per walk call and rank and the
// time in them.
func BenchmarkWalkProducts(b *testing.B) {
	all := gpus(b, numGPUs(b))
	g, train := productsData(b)
	const L = 40
	b.Run("cpu", func(b *testing.B) {
		_, bt := epochPlan(train, []int64{0, g.NumRows}, 1024, 1)
		steps := runEpochs(b, 1, len(bt[0]), bt, nil, func(_, it, i int, starts []graph.NodeID) (int64, error) {
			if _, err := sample.RandomWalk(g, starts, L, sample.Key{Seed: 1, Epoch: it, Batch: i}); err != nil {
				return 0, err
			}
			return int64(len(starts)) * L, nil
		})
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)*1e3, "ms/epoch")
		b.ReportMetric(float64(steps)/b.Elapsed().Seconds()/1e6, "Msteps/s")
	})
	for _, P := range []int{1, 2, 4} {
		if P > len(all) {
			continue
		}
		b.Run(fmt.Sprintf("P=%d", P), func(b *testing.B) {
			off := make([]int64, P+1)
			for p := range off {
				off[p] = g.NumRows * int64(p) / int64(P)
			}
			ws, done := walkGroup(b, g, off, L, gpusample.OnDevice)
			defer done()
			calls, bt := epochPlan(train, off, 1024, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			before := make([]Stats, P)
			warm := func() {
				for r := range P {
					before[r] = ws[r].Stats()
				}
			}
			steps := runEpochs(b, P, calls, bt, warm, func(r, it, i int, starts []graph.NodeID) (int64, error) {
				w, err := ws[r].Walk(ctx, starts, sample.Key{Seed: 1, Epoch: it, Batch: i*P + r})
				if err != nil {
					return 0, err
				}
				defer w.Free()
				return int64(len(starts)) * L, nil
			})
			after := make([]Stats, P)
			for r := range P {
				after[r] = ws[r].Stats()
			}
			reportWaits(b, before, after, calls)
			sec := b.Elapsed().Seconds()
			b.ReportMetric(sec/float64(b.N)*1e3, "ms/epoch")
			b.ReportMetric(float64(steps)/sec/1e6, "Msteps/s")
		})
	}
}
