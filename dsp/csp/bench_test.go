package csp

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/graph/graphtest"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
)

// Collective node-wise sampling, [15,10,5] with batch 1024 per device, on
// a 200k-node power-law graph, every device sampling its own batch:
//
//	go test -run XXX -bench NodeSampler -benchtime 20x ./dsp/csp
//
// Reports sampled edges per second summed over devices (and the single
// NeighborSampler on the whole graph as the baseline). On CPU virtual
// devices the devices share the host's cores: the numbers measure the
// protocol's overhead, not a multi-GPU speedup.

var (
	benchOnce sync.Once
	benchG    *graph.CSR
)

func benchGraph() *graph.CSR {
	benchOnce.Do(func() { benchG = graphtest.PowerLaw(200_000, 30, 1) })
	return benchG
}

func BenchmarkNodeSamplerSingle(b *testing.B) {
	g := benchGraph()
	s, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: []int{15, 10, 5}})
	if err != nil {
		b.Fatal(err)
	}
	var edges int64
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		mb, err := s.Sample(randomSeeds(uint64(i), g.NumRows, 1024), sample.Key{Seed: 1, Batch: i})
		if err != nil {
			b.Fatal(err)
		}
		for _, blk := range mb.Blocks {
			edges += int64(blk.NumEdges())
		}
	}
	b.ReportMetric(float64(edges)/time.Since(start).Seconds(), "edges/s")
}

func BenchmarkNodeSampler(b *testing.B) {
	g := benchGraph()
	for _, k := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("devices=%d", k), func(b *testing.B) {
			counts := make([]int64, k)
			for i := range counts {
				counts[i] = g.NumRows / int64(k)
			}
			counts[k-1] += g.NumRows % int64(k)
			bk, _ := book.FromCounts(counts)
			cs, _ := inproc.New(k, comm.Options{})
			defer func() {
				for _, c := range cs {
					c.Close()
				}
			}()
			ss := make([]*NodeSampler, k)
			for r := range k {
				p, err := layout.Build(g, bk, r, layout.Options{DeviceBytes: layout.NoLimit})
				if err != nil {
					b.Fatal(err)
				}
				if ss[r], err = NewNodeSampler(cs[r], bk, p, Config{Fanouts: []int{15, 10, 5}}, nil); err != nil {
					b.Fatal(err)
				}
			}
			var edges int64
			var mu sync.Mutex
			start := time.Now()
			for i := 0; b.Loop(); i++ {
				var wg sync.WaitGroup
				for r := range k {
					wg.Go(func() {
						mb, err := ss[r].Sample(randomSeeds(uint64(i*k+r), g.NumRows, 1024), sample.Key{Seed: 1, Batch: i*k + r})
						if err != nil {
							b.Error(err)
							return
						}
						var n int64
						for _, blk := range mb.Blocks {
							n += int64(blk.NumEdges())
						}
						mu.Lock()
						edges += n
						mu.Unlock()
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(edges)/time.Since(start).Seconds(), "edges/s")
		})
	}
}
