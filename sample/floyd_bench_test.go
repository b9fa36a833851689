package sample

import (
	"fmt"
	"testing"
)

// BenchmarkFloyd times uniform sampling without replacement of k of n
// positions (the per-node core of the uniform sampler).
func BenchmarkFloyd(b *testing.B) {
	for _, c := range []struct{ n, k uint64 }{{50, 15}, {50, 10}, {200, 5}, {30, 25}} {
		b.Run(fmt.Sprintf("n%d_k%d", c.n, c.k), func(b *testing.B) {
			var p picker
			i := uint64(0)
			for b.Loop() {
				p.floydSorted(i*0x9e37, c.n, c.k)
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(c.k), "ns/draw")
		})
	}
}
