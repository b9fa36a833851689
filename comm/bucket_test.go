package comm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/shm"
)

func grad(rank, p, n int) []float32 {
	g := make([]float32, n)
	for i := range g {
		g[i] = float32((rank+1)*(p+3)) + float32(i%97)/128
	}
	return g
}

func TestBucketer(t *testing.T) {
	sizes := []int{5, 1000, 0, 3, 70000, 17, 250000, 8}
	groups := map[string]func(n int) ([]comm.Comm, error){
		"inproc": func(n int) ([]comm.Comm, error) { return inproc.New(n, comm.Options{Timeout: 20 * time.Second}) },
		"shm": func(n int) ([]comm.Comm, error) {
			return shm.NewLocal(n, shm.Options{Options: comm.Options{Timeout: 20 * time.Second}, HeapBytes: 8 << 20})
		},
	}
	for name, mk := range groups {
		for _, noOverlap := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/overlap=%v", name, !noOverlap), func(t *testing.T) {
				const n = 3
				cs, err := mk(n)
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					for _, c := range cs {
						c.Close()
					}
				}()
				bs := make([]*comm.Bucketer, n)
				for r, c := range cs {
					if bs[r], err = comm.NewBucketer(c, sizes, comm.BucketOptions{BucketBytes: 400 << 10, NoOverlap: noOverlap}); err != nil {
						t.Fatal(err)
					}
					defer bs[r].Close()
				}
				// Reverse order; the oversize parameter 6 gets a bucket of its own.
				if got := fmt.Sprint(bs[0].Buckets()); got != "[[7] [6] [5 4 3 2 1 0]]" {
					t.Fatalf("buckets %s", got)
				}
				for step := 0; step < 3; step++ {
					// Rank 1 never produces parameter 3 (unused there): it
					// counts as zero. Every rank hands gradients over in its
					// own random order, with pauses.
					grads := make([][][]float32, n)
					errs := make([]error, n)
					var wg sync.WaitGroup
					for r := range cs {
						grads[r] = make([][]float32, len(sizes))
						wg.Add(1)
						go func() {
							defer wg.Done()
							rng := rand.New(rand.NewPCG(uint64(r), uint64(step)))
							for _, p := range rng.Perm(len(sizes)) {
								if r == 1 && p == 3 {
									continue
								}
								grads[r][p] = grad(r, p, sizes[p])
								if err := bs[r].Ready(context.Background(), p, grads[r][p]); err != nil {
									errs[r] = err
									return
								}
								time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
							}
							errs[r] = bs[r].Wait(context.Background())
						}()
					}
					wg.Wait()
					for r, err := range errs {
						if err != nil {
							t.Fatalf("step %d rank %d: %v", step, r, err)
						}
					}
					for p, size := range sizes {
						in := make([][]float32, n)
						for r := range in {
							in[r] = grad(r, p, size)
						}
						for i := 0; i < size; i++ {
							var acc float32
							for r := 0; r < n; r++ {
								var v float32
								if !(r == 1 && p == 3) {
									v = in[r][i]
								}
								if r == 0 {
									acc = v
								} else {
									acc += v
								}
							}
							want := acc / n
							for r := 0; r < n; r++ {
								got := bs[r].Result(p)[i]
								if got != want {
									t.Fatalf("step %d rank %d param %d [%d] = %v, want %v", step, r, p, i, got, want)
								}
								if g := grads[r][p]; g != nil && g[i] != want {
									t.Fatalf("step %d rank %d param %d [%d] written back %v, want %v", step, r, p, i, g[i], want)
								}
							}
						}
					}
				}
			})
		}
	}
}

func TestBucketerErrors(t *testing.T) {
	cs, err := inproc.New(1, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := comm.NewBucketer(cs[0], []int{4, 2}, comm.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := b.Ready(ctx, 2, nil); err == nil {
		t.Error("out-of-range parameter accepted")
	}
	if err := b.Ready(ctx, 0, make([]float32, 3)); err == nil || !strings.Contains(err.Error(), "4 elements") {
		t.Errorf("wrong length: %v", err)
	}
	if err := b.Ready(ctx, 1, []float32{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := b.Ready(ctx, 1, []float32{1, 2}); err == nil {
		t.Error("a gradient given twice was accepted")
	}
	if err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := comm.NewBucketer(cs[0], []int{-1}, comm.BucketOptions{}); err == nil {
		t.Error("negative size accepted")
	}
	if _, err := comm.NewBucketer(cs[0], []int{1}, comm.BucketOptions{Op: comm.Max}); err == nil {
		t.Error("max reduction accepted")
	}
	b.Close()
	if err := b.Ready(ctx, 0, make([]float32, 4)); err == nil {
		t.Error("Ready after Close accepted")
	}
}
