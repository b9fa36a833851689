package csp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// EnvTypedBenchPapers sets the hetero preset's paper count for
// BenchmarkTypedSample (as `strata gen --preset hetero --nodes N`); 16,000
// when unset.
const EnvTypedBenchPapers = "STRATA_TYPED_BENCH_PAPERS"

// BenchmarkTypedSample: collective typed sampling of the hetero preset (3
// node types, 4 relations, fanout 10 per relation and hop, 2 hops) on
// 2 and 4 CPU ranks with in-process communicators: every rank samples a
// batch of 1,024 of its own papers per iteration; then on 1 and 2 GPUs
// where there are (gpus=P). It reports sampled edges per second over all
// ranks, and exchanges and host waits per batch and rank.
func BenchmarkTypedSample(b *testing.B) {
	c := gen.HeteroPreset()
	c.Papers = 16000
	if v := os.Getenv(EnvTypedBenchPapers); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("%s=%q: %v", EnvTypedBenchPapers, v, err)
		}
		c.Papers = n
	}
	h, err := gen.GenerateHetero(c)
	if err != nil {
		b.Fatal(err)
	}
	sizes := make([]int64, len(h.NodeTypes))
	for t, nt := range h.NodeTypes {
		sizes[t] = nt.NumNodes
	}
	var rels []sample.Relation
	var fan [][]int
	for _, et := range h.EdgeTypes {
		rels = append(rels, sample.Relation{Src: et.Src, Dst: et.Dst, In: et.In})
		fan = append(fan, []int{10, 10})
	}
	run := func(b *testing.B, bes []backend.Backend, cs []comm.Comm) {
		P := len(bes)
		off := typedOffsets(sizes, P, 0)
		ss := make([]*TypedSampler, P)
		for r := range P {
			var cm comm.Comm
			if cs != nil {
				cm = cs[r]
			}
			var err error
			if ss[r], err = NewTyped(bes[r], sizes, rels, off, cm, TypedConfig{Fanouts: fan}); err != nil {
				b.Fatal(err)
			}
			defer ss[r].Close()
		}
		seeds := make([][]graph.NodeID, P)
		for r := range P {
			lo, hi := off[h.Target][r], off[h.Target][r+1]
			seeds[r] = make([]graph.NodeID, min(1024, hi-lo))
			for i := range seeds[r] {
				seeds[r][i] = graph.NodeID(lo + int64(i)*7%(hi-lo))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var edges int64
		for i := 0; b.Loop(); i++ {
			mbs, errs := onEveryRank(P, func(r int) (*sample.HeteroMiniBatch, error) {
				return ss[r].Sample(ctx, h.Target, seeds[r], sample.Key{Seed: 1, Batch: i*P + r})
			})
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
			for _, mb := range mbs {
				for _, blk := range mb.Blocks {
					for _, rb := range blk.Rels {
						edges += int64(rb.NumEdges())
					}
				}
			}
		}
		st := ss[0].Stats()
		b.ReportMetric(float64(edges)/b.Elapsed().Seconds(), "edges/s")
		b.ReportMetric(float64(st.Exchanges)/float64(st.Batches), "exchanges/batch")
		b.ReportMetric(float64(st.Waits)/float64(st.Batches), "waits/batch")
	}
	for _, P := range []int{2, 4} {
		b.Run(fmt.Sprintf("P=%d", P), func(b *testing.B) {
			cb := cpuBackends(b, P)
			bes := make([]backend.Backend, P)
			for r := range P {
				bes[r] = cb[r]
			}
			run(b, bes, cpuComms(b, cb, nil))
		})
	}
	// GPUs (NCCL between them); skipped without enough of them.
	for _, P := range []int{1, 2} {
		b.Run(fmt.Sprintf("gpus=%d", P), func(b *testing.B) {
			if testing.Short() || numGPUs(b) < P {
				b.Skipf("needs %d GPUs", P)
			}
			run(b, gpus(b, P), commsFor(b, P))
		})
	}
}
