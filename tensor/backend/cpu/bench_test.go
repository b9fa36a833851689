package cpu

import (
	"testing"

	"github.com/strata-gnn/strata/internal/openblas"
	"github.com/strata-gnn/strata/tensor/backendtest"
)

// Dense products at the sizes of go-dependencies.md section 4 (a GNN layer
// on 1024 and 65536 nodes with 256 features), for both GEMM paths:
//
//	go test -run NONE -bench Gemm ./tensor/backend/cpu/
func benchGemm(b *testing.B, k GemmKind, ta, tb bool, m, n, kk int) {
	if k == GemmOpenBLAS && !openblas.Available() {
		b.Skipf("OpenBLAS not available: %v", openblas.Err())
	}
	be, err := New(Options{Gemm: k})
	if err != nil {
		b.Fatal(err)
	}
	backendtest.BenchGemm(b, be, ta, tb, m, n, kk)
}

func BenchmarkGemmGo1024x256x256(b *testing.B)  { benchGemm(b, GemmGo, false, false, 1024, 256, 256) }
func BenchmarkGemmGo65536x256x256(b *testing.B) { benchGemm(b, GemmGo, false, false, 65536, 256, 256) }
func BenchmarkGemmGoTN256x256x65536(b *testing.B) {
	benchGemm(b, GemmGo, true, false, 256, 256, 65536) // weight gradient X^T dY
}
func BenchmarkGemmOpenBLAS1024x256x256(b *testing.B) {
	benchGemm(b, GemmOpenBLAS, false, false, 1024, 256, 256)
}
func BenchmarkGemmOpenBLAS65536x256x256(b *testing.B) {
	benchGemm(b, GemmOpenBLAS, false, false, 65536, 256, 256)
}
func BenchmarkGemmOpenBLASTN256x256x65536(b *testing.B) {
	benchGemm(b, GemmOpenBLAS, true, false, 256, 256, 65536)
}

// SpMM on a random block: 65536 destinations, 262144 sources, 10 edges per
// row, 256 features (a sampled layer's message passing), forward and
// transposed (backward).
func BenchmarkSpMM65536x10x256(b *testing.B) {
	be, _ := New(Options{Gemm: GemmGo})
	backendtest.BenchSpMM(b, be, 65536, 262144, 10, 256, false)
}

func BenchmarkSpMMT65536x10x256(b *testing.B) {
	be, _ := New(Options{Gemm: GemmGo})
	backendtest.BenchSpMM(b, be, 65536, 262144, 10, 256, true)
}
