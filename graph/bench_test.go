package graph_test

import (
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/graph/graphtest"
)

// Structural operations on real and products-sized graphs:
//
//	go test -run XXX -bench . -benchtime 3x ./graph
//
// The products-shaped graph (2.45M nodes, ~124M edges) is skipped with -short.

var (
	prodOnce sync.Once
	prod     *graph.CSR
)

func products(b *testing.B) *graph.CSR {
	if testing.Short() {
		b.Skip("products-shaped graph skipped with -short")
	}
	prodOnce.Do(func() { prod = graphtest.PowerLaw(2_449_029, 50.5, 1) })
	return prod
}

// reportEdges reports edges per second of wall time and per CPU-second
// (the second stays meaningful on a busy shared machine); cpu0 is
// cpuTime() before the loop.
func reportEdges(b *testing.B, edges int64, cpu0 time.Duration) {
	b.ReportMetric(float64(edges)*float64(b.N)/b.Elapsed().Seconds(), "edges/s")
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(edges)*float64(b.N)/cpu.Seconds(), "edges/cpu-s")
	}
}

func BenchmarkTranspose(b *testing.B) {
	for _, c := range []struct {
		name string
		g    func(*testing.B) *graph.CSR
	}{{"cnr-2000", func(b *testing.B) *graph.CSR { return graphtest.CNR2000(b) }}, {"products", products}} {
		b.Run(c.name, func(b *testing.B) {
			g := c.g(b)
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := graph.Transpose(g); err != nil {
					b.Fatal(err)
				}
			}
			reportEdges(b, g.NumEdges(), cpu0)
		})
	}
}

func BenchmarkFromEdges(b *testing.B) {
	g := graphtest.CNR2000(b)
	src := make([]graph.NodeID, 0, g.NumEdges())
	dst := make([]graph.NodeID, 0, g.NumEdges())
	// Feed the edges in transposed (dst-major) order so the sort has work.
	t, _ := graph.Transpose(g)
	for v := int64(0); v < t.NumRows; v++ {
		for _, u := range t.Neighbors(graph.NodeID(v)) {
			src, dst = append(src, u), append(dst, graph.NodeID(v))
		}
	}
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := graph.FromEdges(g.NumRows, src, dst, graph.WithDedup(graph.ReduceFirst)); err != nil {
			b.Fatal(err)
		}
	}
	reportEdges(b, g.NumEdges(), cpu0)
}

func BenchmarkSymmetrize(b *testing.B) {
	g := graphtest.CNR2000(b)
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := graph.Symmetrize(g, graph.ReduceFirst); err != nil {
			b.Fatal(err)
		}
	}
	reportEdges(b, g.NumEdges(), cpu0)
}

func BenchmarkValidate(b *testing.B) {
	g := products(b)
	cpu0 := cpuTime()
	for b.Loop() {
		if err := g.Validate(); err != nil {
			b.Fatal(err)
		}
	}
	reportEdges(b, g.NumEdges(), cpu0)
}
