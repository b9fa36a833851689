package commtest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// BenchmarkAllReduce times a float32 sum all-reduce of each size on a
// group of goroutine ranks (buffers from Comm.Alloc), reporting bytes per
// second of buffer. Run it from a back end's Benchmark function.
func BenchmarkAllReduce(b *testing.B, open NewGroup, n int, sizes ...int) {
	for _, size := range sizes {
		b.Run(fmt.Sprintf("n=%d/%dKiB", n, size>>10), func(b *testing.B) {
			comms, err := open(n, comm.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			bufs := make([]backend.Buffer, n)
			for r, c := range comms {
				if bufs[r], err = c.Alloc(backend.Float32, size/4); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			var wg sync.WaitGroup
			errs := make([]error, n)
			for r, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < b.N && errs[r] == nil; i++ {
						errs[r] = c.AllReduce(context.Background(), bufs[r], comm.Sum)
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			for r, c := range comms {
				c.Free(bufs[r])
			}
		})
	}
}
