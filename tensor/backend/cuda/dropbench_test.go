package cuda

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

// BenchmarkBiasActDropout times the training step's fused bias + ReLU +
// dropout (BiasActDropout) and its backward on a hidden layer's output
// ($STRATA_DROPBENCH_ROWS rows, default 100000, x 256), float32 and
// bfloat16, with and without dropout (p 0: the memory-bound floor). Run
// with -benchtime 1x -test.v on a GPU host.
func BenchmarkBiasActDropout(b *testing.B) {
	d := gpu(b)
	rows, cols := 100000, 256
	if v, err := strconv.Atoi(os.Getenv("STRATA_DROPBENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	n := rows * cols
	r := rand.New(rand.NewPCG(5, 1))
	xv := make([]float32, n)
	for i := range xv {
		xv[i] = float32(r.NormFloat64())
	}
	bv := make([]float32, cols)
	for i := range bv {
		bv[i] = float32(r.NormFloat64()) / 10
	}
	x32 := upload(b, d, backend.Float32, xv)
	bias := upload(b, d, backend.Float32, bv)
	dbias, err := d.Alloc(backend.Float32, cols)
	must(b, err)
	timeIt := func(fn func() error) float64 { return bestTime(b, d, 20, 2, fn) }
	for _, dt := range []backend.DType{backend.Float32, backend.BFloat16} {
		x := backend.Buffer(x32)
		if dt == backend.BFloat16 {
			xb, err := d.Alloc(dt, n)
			must(b, err)
			must(b, d.Convert(xb, x32))
			x = xb
		}
		y, err := d.Alloc(dt, n)
		must(b, err)
		dx, err := d.Alloc(dt, n)
		must(b, err)
		gb := float64(2*n*dt.Size()) / 1e9
		for _, p := range []float32{0, 0.5} {
			sec := timeIt(func() error { return d.BiasActDropout(y, x, nil, bias, rows, cols, true, p, 7) })
			b.Logf("%d x %d %-8s p %.1f  BiasActDropout           %7.1f us  %5.2f TB/s", rows, cols, dt, p, 1e6*sec, gb/sec/1e3)
			sec = timeIt(func() error {
				return d.BiasActDropoutBackward(dx, dbias, y, x, rows, cols, true, p, 7, false)
			})
			b.Logf("%d x %d %-8s p %.1f  BiasActDropoutBackward   %7.1f us  %5.2f TB/s", rows, cols, dt, p, 1e6*sec, 1.5*gb/sec/1e3)
		}
		if dt == backend.BFloat16 {
			d.Free(x)
		}
		d.Free(y)
		d.Free(dx)
	}
	d.Free(x32)
	d.Free(bias)
	d.Free(dbias)
}
