//go:build linux

package infer

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"unsafe"
)

// BenchmarkOutputFill fills a fresh 4 GiB host output the way a layer's
// chunks fill it (two devices, each its half: consecutive chunk ranges
// by copy, as Download does, or scattered rows) with and without
// pre-faulting its pages in parallel first and MADV_HUGEPAGE, and with
// prepareOutput (run.output's: both, in the background): the cost
// of first touching a huge output (27M 4-KiB faults at papers100M's
// 113 GB). Each iteration maps fresh pages (as a first make of that
// size gets), and its time includes any pre-fault.
func BenchmarkOutputFill(b *testing.B) {
	const (
		size    = 4 << 30 // bytes
		width   = 256
		devices = 2
		chunk   = 1 << 16 // rows
	)
	n := size / 4
	rows := n / width
	src := make([]float32, chunk*width) // a chunk's rows on the host
	for i := range src {
		src[i] = float32(i)
	}
	perm := rand.New(rand.NewPCG(1, 2)).Perm(rows)
	fill := map[string]func(out []float32){
		"chunks": func(out []float32) {
			var wg sync.WaitGroup
			for d := range devices {
				lo, hi := rows*d/devices, rows*(d+1)/devices
				wg.Go(func() {
					for a := lo; a < hi; a += chunk {
						e := min(a+chunk, hi)
						copy(out[a*width:e*width], src[:(e-a)*width])
					}
				})
			}
			wg.Wait()
		},
		"rows": func(out []float32) {
			var wg sync.WaitGroup
			for d := range devices {
				part := perm[len(perm)*d/devices : len(perm)*(d+1)/devices]
				wg.Go(func() {
					for i, v := range part {
						k := i % chunk
						copy(out[v*width:(v+1)*width], src[k*width:(k+1)*width])
					}
				})
			}
			wg.Wait()
		},
	}
	for _, pattern := range []string{"chunks", "rows"} {
		for _, c := range []struct {
			name                         string
			prefault, prepare, thp, warm bool
		}{{name: "plain"}, {name: "prefault", prefault: true}, {name: "hugepage", thp: true}, {name: "prefault+hugepage", prefault: true, thp: true},
			{name: "prepareOutput", prepare: true}, // run.output's: huge pages populated in the background
			{name: "warm", warm: true}} {           // warm: pages faulted before the timer, the fill alone
			b.Run(pattern+"/"+c.name, func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					b.StopTimer()
					mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
					if err != nil {
						b.Fatal(err)
					}
					out := unsafe.Slice((*float32)(unsafe.Pointer(&mem[0])), n)
					if c.warm {
						touchPages(out, runtime.GOMAXPROCS(0))
					}
					b.StartTimer()
					if c.thp {
						_ = syscall.Madvise(mem, 14) // MADV_HUGEPAGE
					}
					if c.prefault {
						touchPages(out, runtime.GOMAXPROCS(0))
					}
					stop := func() {}
					if c.prepare {
						stop = prepareOutput(out, devices, runtime.GOMAXPROCS(0))
					}
					fill[pattern](out)
					stop()
					b.StopTimer()
					if err := syscall.Munmap(mem); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
	}
}

// touchPages writes one word of every 4 KiB page of x from workers
// goroutines.
func touchPages(x []float32, workers int) {
	const step = 4096 / 4
	var wg sync.WaitGroup
	for p := range workers {
		a, e := len(x)*p/workers, len(x)*(p+1)/workers
		wg.Go(func() {
			for i := a &^ (step - 1); i < e; i += step {
				if i >= a {
					x[i] = 0
				}
			}
		})
	}
	wg.Wait()
}
