package cuda

import (
	"math/rand/v2"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backendtest"
)

func BenchmarkGemm1024x256x256(b *testing.B) {
	backendtest.BenchGemm(b, gpu(b), false, false, 1024, 256, 256)
}

func BenchmarkGemm65536x256x256(b *testing.B) {
	backendtest.BenchGemm(b, gpu(b), false, false, 65536, 256, 256)
}

func BenchmarkGemmTN256x256x65536(b *testing.B) {
	backendtest.BenchGemm(b, gpu(b), true, false, 256, 256, 65536)
}

func BenchmarkSpMM65536x10x256(b *testing.B) {
	backendtest.BenchSpMM(b, gpu(b), 65536, 65536, 10, 256, false)
}

func BenchmarkSpMMT65536x10x256(b *testing.B) {
	backendtest.BenchSpMM(b, gpu(b), 65536, 65536, 10, 256, true)
}

// BenchmarkGatherRows128 gathers 400k random rows of width 128 from a
// 2.4M-row table (the products feature shape), reporting TB/s of rows
// read plus written.
func BenchmarkGatherRows128(b *testing.B) {
	d := gpu(b)
	const rows, cols, n = 2_449_029, 128, 400_000
	r := rand.New(rand.NewPCG(1, 1))
	x, _ := d.Alloc(backend.Float32, rows*cols)
	dst, _ := d.Alloc(backend.Float32, n*cols)
	idx := make([]int32, n)
	for i := range idx {
		idx[i] = int32(r.IntN(rows))
	}
	ib := upload(b, d, backend.Int32, idx)
	defer func() { d.Free(x); d.Free(dst); d.Free(ib) }()
	if err := d.GatherRows(dst, x, ib, rows, cols); err != nil {
		b.Fatal(err)
	}
	d.Synchronize()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d.GatherRows(dst, x, ib, rows, cols)
	}
	if err := d.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(2*4*float64(n*cols)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TB/s")
}

// BenchmarkLaunch measures the host cost of one small kernel launch
// (Fill of 1024 floats), including the device lock and context binding.
func BenchmarkLaunch(b *testing.B) {
	d := gpu(b)
	x, _ := d.Alloc(backend.Float32, 1024)
	defer d.Free(x)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d.Axpby(x, 1, x, 0, x)
	}
	d.Synchronize()
}
