package backendtest

import (
	"math/rand/v2"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

func benchAlloc(b *testing.B, be backend.Backend, r *rand.Rand, n int) backend.Buffer {
	b.Helper()
	buf, err := be.Alloc(backend.Float32, n)
	if err != nil {
		b.Fatal(err)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	if err := be.Upload(buf, v); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Free(buf) })
	return buf
}

// BenchGemm measures C = op(A)·op(B) with C m x n and inner dimension k,
// reporting GFLOP/s (2mnk flops per product).
func BenchGemm(b *testing.B, be backend.Backend, transA, transB bool, m, n, k int) {
	r := rand.New(rand.NewPCG(1, 2))
	a, bb, c := benchAlloc(b, be, r, m*k), benchAlloc(b, be, r, k*n), benchAlloc(b, be, r, m*n)
	if err := be.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := be.Gemm(transA, transB, m, n, k, 1, a, bb, 0, c); err != nil {
			b.Fatal(err)
		}
	}
	if err := be.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchSpMM measures out = A x (or A^T x) for a random rows x cols matrix
// with deg entries per row and feature width width (one head, no weights),
// reporting GFLOP/s (2·nnz·width flops) and effective gathered GB/s.
func BenchSpMM(b *testing.B, be backend.Backend, rows, cols, deg, width int, transpose bool) {
	r := rand.New(rand.NewPCG(3, 4))
	ptr := make([]int64, rows+1)
	idx := make([]int32, rows*deg)
	for i := 0; i < rows; i++ {
		for d := 0; d < deg; d++ {
			idx[i*deg+d] = int32(r.IntN(cols))
		}
		ptr[i+1] = int64((i + 1) * deg)
	}
	sp, err := be.NewSparse(rows, cols, ptr, idx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.FreeSparse(sp) })
	inRows, outRows := cols, rows
	if transpose {
		inRows, outRows = rows, cols
	}
	x, out := benchAlloc(b, be, r, inRows*width), benchAlloc(b, be, r, outRows*width)
	// Warm up (builds a cached transpose, compiles kernels).
	if err := be.SpMM(out, sp, transpose, x, nil, 1, width); err != nil {
		b.Fatal(err)
	}
	if err := be.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := be.SpMM(out, sp, transpose, x, nil, 1, width); err != nil {
			b.Fatal(err)
		}
	}
	if err := be.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	sec := b.Elapsed().Seconds()
	nnz := float64(rows * deg)
	b.ReportMetric(2*nnz*float64(width)*float64(b.N)/sec/1e9, "GFLOP/s")
	b.ReportMetric(4*nnz*float64(width)*float64(b.N)/sec/1e9, "GB/s")
}
