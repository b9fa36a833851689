package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-gnn/strata/internal/openblas"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backendtest"
)

// TestConformanceGo runs the suite on the pure-Go GEMM in every
// precision, at each precision's tolerances.
func TestConformanceGo(t *testing.T) {
	for _, p := range backend.Precisions {
		t.Run(p.String(), func(t *testing.T) {
			b, err := New(Options{Gemm: GemmGo, Precision: p})
			if err != nil {
				t.Fatal(err)
			}
			backendtest.RunWith(t, b, backendtest.Options{VaryGOMAXPROCS: true})
		})
	}
}

func TestConformanceOpenBLAS(t *testing.T) {
	if !openblas.Available() {
		t.Skipf("OpenBLAS not available (%v); install libopenblas0 to test that path", openblas.Err())
	}
	for _, p := range backend.Precisions {
		t.Run(p.String(), func(t *testing.T) {
			b, err := New(Options{Gemm: GemmOpenBLAS, Precision: p})
			if err != nil {
				t.Fatal(err)
			}
			want := "openblas"
			if p != backend.FP32 {
				want += " " + p.String()
			}
			if b.GemmImpl() != want {
				t.Fatalf("GemmImpl = %q, want %q", b.GemmImpl(), want)
			}
			t.Logf("OpenBLAS: %s, %d threads", openblas.Path(), openblas.Threads())
			backendtest.RunWith(t, b, backendtest.Options{VaryGOMAXPROCS: true})
		})
	}
}

func TestCapabilities(t *testing.T) {
	backendtest.Capabilities(t, mustNew(t, GemmGo), "Slicer", "Siblings", "Fences", "PinnedMemory", "SparseBuilder", "SparseAdopter", "Fused")
}

// TestGemmEmulation: at TF32 and BF16 Gemm is, bit for bit, the float32
// Gemm of the operands rounded to nearest even (what CI's numerics
// stand for), leaves its inputs alone, and siblings keep the precision.
func TestGemmEmulation(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const m, n, k = 37, 29, 70
	a, bm := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	for i := range bm {
		bm[i] = float32(r.NormFloat64())
	}
	ref := mustNew(t, GemmGo)
	fp32 := make([]float32, m*n)
	if err := ref.Gemm(false, true, m, n, k, 1.5, WrapF32(a), WrapF32(bm), 0, WrapF32(fp32)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []backend.Precision{backend.TF32, backend.BF16} {
		b, err := New(Options{Gemm: GemmGo, Precision: p})
		if err != nil {
			t.Fatal(err)
		}
		ra, rb := append([]float32(nil), a...), append([]float32(nil), bm...)
		p.RoundSlice(ra)
		p.RoundSlice(rb)
		want := make([]float32, m*n)
		if err := ref.Gemm(false, true, m, n, k, 1.5, WrapF32(ra), WrapF32(rb), 0, WrapF32(want)); err != nil {
			t.Fatal(err)
		}
		ac, bc := append([]float32(nil), a...), append([]float32(nil), bm...)
		got := make([]float32, m*n)
		if err := b.Gemm(false, true, m, n, k, 1.5, WrapF32(ac), WrapF32(bc), 0, WrapF32(got)); err != nil {
			t.Fatal(err)
		}
		eq(t, p.String()+" Gemm", got, want)
		eq(t, p.String()+" Gemm input a", ac, a)
		eq(t, p.String()+" Gemm input b", bc, bm)
		differs := false
		for i := range got {
			differs = differs || math.Float32bits(got[i]) != math.Float32bits(fp32[i])
		}
		if !differs {
			t.Errorf("%s Gemm equals the float32 product", p)
		}
		s, err := b.Sibling(backend.SiblingOptions{})
		if err != nil || s.Precision() != p {
			t.Errorf("%s: sibling precision %v (%v)", p, s.Precision(), err)
		}
	}
	if _, err := New(Options{Precision: backend.Precision(9)}); err == nil {
		t.Error("New accepted precision 9")
	}
}
