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

// BenchmarkGemmSAGEShapes times the products of a 3-layer GraphSAGE step
// on the products shape (first layer 100 -> 256 over ~100k destination
// rows; the weight gradients' long inner dimension), and the same with
// the two products of a layer side by side (k or m doubled) or the inner
// dimension padded, to choose how the layers call Gemm.
func BenchmarkGemmSAGEShapes(b *testing.B) {
	d := gpu(b)
	const rows = 98304
	for _, s := range []struct {
		name    string
		ta, tb  bool
		m, n, k int
	}{
		{"NN_m98304_n256_k100", false, false, rows, 256, 100},
		{"NN_m98304_n256_k104", false, false, rows, 256, 104},
		{"NN_m98304_n256_k128", false, false, rows, 256, 128},
		{"NN_m98304_n256_k200", false, false, rows, 256, 200},
		{"TN_m100_n256_k98304", true, false, 100, 256, rows},
		{"TN_m128_n256_k98304", true, false, 128, 256, rows},
		{"TN_m200_n256_k98304", true, false, 200, 256, rows},
		{"NN_m12288_n256_k256", false, false, 12288, 256, 256},
		{"NN_m12288_n256_k512", false, false, 12288, 256, 512},
		{"NT_m12288_n256_k256", false, true, 12288, 256, 256},
		{"NT_m12288_n512_k256", false, true, 12288, 512, 256},
		{"TN_m256_n256_k12288", true, false, 256, 256, 12288},
		{"TN_m512_n256_k12288", true, false, 512, 256, 12288},
	} {
		b.Run(s.name, func(b *testing.B) { backendtest.BenchGemm(b, d, s.ta, s.tb, s.m, s.n, s.k) })
	}
}

// BenchmarkGemmHost measures the host cost of one small bfloat16 product
// (64 x 256 x 256 and up: the device keeps up, so the host's enqueue
// sets the pace) through the pinned cuBLASLt path, with the same shape
// every call ("fixed") and with m changing every call as a sampled
// step's block sizes do ("varying": the layouts reset, the algorithm
// re-checked). Compare with BenchmarkLaunch's plain kernel launch.
func BenchmarkGemmHost(b *testing.B) {
	d := gpu(b)
	const maxM, n, k = 127, 256, 256
	bufs := make([]backend.Buffer, 3)
	for i, size := range []int{maxM * k, k * n, maxM * n} {
		buf, err := d.Alloc(backend.BFloat16, size)
		if err != nil {
			b.Fatal(err)
		}
		bufs[i] = buf
	}
	defer func() {
		for _, x := range bufs {
			d.Free(x)
		}
	}()
	// Views of a and c for each m in 64 .. maxM (Gemm takes exact lengths).
	var as, cs [maxM + 1]backend.Buffer
	for m := 64; m <= maxM; m++ {
		var err error
		if as[m], err = backend.View(bufs[0], 0, m*k); err != nil {
			b.Fatal(err)
		}
		if cs[m], err = backend.View(bufs[2], 0, m*n); err != nil {
			b.Fatal(err)
		}
	}
	for _, varying := range []bool{false, true} {
		name := "fixed"
		if varying {
			name = "varying"
		}
		b.Run(name, func(b *testing.B) {
			m := 64
			for i := 0; i < b.N; i++ {
				if varying {
					m = 64 + i%64
				}
				if err := d.Gemm(false, false, m, n, k, 1, as[m], bufs[1], 0, cs[m]); err != nil {
					b.Fatal(err)
				}
			}
			if err := d.Synchronize(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
