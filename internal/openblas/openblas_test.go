package openblas

import (
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// naive is a float64 reference for row-major C = alpha*op(A)*op(B) + beta*C.
func naive(transA, transB bool, m, n, k int, alpha float32, a []float32, b []float32, beta float32, c []float32) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				av := a[i*k+p]
				if transA {
					av = a[p*m+i]
				}
				bv := b[p*n+j]
				if transB {
					bv = b[j*k+p]
				}
				s += float64(av) * float64(bv)
			}
			out[i*n+j] = float64(alpha)*s + float64(beta)*float64(c[i*n+j])
		}
	}
	return out
}

func TestSgemm(t *testing.T) {
	if !Available() {
		t.Skipf("OpenBLAS not installed (%v); install libopenblas0 to run this test", Err())
	}
	t.Logf("OpenBLAS from %s, %d threads, core %q", Path(), Threads(), CoreName())
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ m, n, k int }{{1, 1, 1}, {3, 5, 7}, {64, 33, 17}, {0, 4, 4}, {4, 0, 4}, {4, 4, 0}} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				a := make([]float32, tc.m*tc.k)
				b := make([]float32, tc.k*tc.n)
				c := make([]float32, tc.m*tc.n)
				for _, s := range [][]float32{a, b, c} {
					for i := range s {
						s[i] = float32(r.NormFloat64())
					}
				}
				want := naive(ta, tb, tc.m, tc.n, tc.k, 1.5, a, b, 0.5, c)
				lda, ldb := tc.k, tc.n
				if ta {
					lda = tc.m
				}
				if tb {
					ldb = tc.k
				}
				if err := Sgemm(ta, tb, tc.m, tc.n, tc.k, 1.5, a, max(lda, 1), b, max(ldb, 1), 0.5, c, max(tc.n, 1)); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if d := math.Abs(float64(c[i]) - want[i]); d > 1e-4*(1+math.Abs(want[i])) {
						t.Fatalf("%+v ta=%v tb=%v: c[%d] = %v, want %v", tc, ta, tb, i, c[i], want[i])
					}
				}
			}
		}
	}
}

func TestSgemmRejectsShortSlices(t *testing.T) {
	if !Available() {
		t.Skipf("OpenBLAS not installed (%v)", Err())
	}
	a := make([]float32, 5)
	b := make([]float32, 6)
	c := make([]float32, 6)
	if err := Sgemm(false, false, 2, 3, 3, 1, a, 3, b, 3, 0, c, 3); err == nil {
		t.Fatal("short a accepted")
	}
	if err := Sgemm(false, false, 2, 3, 2, 1, make([]float32, 4), 1, b, 3, 0, c, 3); err == nil {
		t.Fatal("lda < k accepted")
	}
}

func TestCheckArgsWithoutLibrary(t *testing.T) {
	if err := checkArgs(false, false, 2, 3, 4, 8, 4, 12, 3, 6, 3); err != nil {
		t.Fatalf("valid args rejected: %v", err)
	}
	if err := checkArgs(true, false, 2, 3, 4, 7, 2, 12, 3, 6, 3); err == nil {
		t.Fatal("short transposed a accepted")
	}
	if err := checkArgs(false, false, -1, 3, 4, 8, 4, 12, 3, 6, 3); err == nil {
		t.Fatal("negative m accepted")
	}
}

// TestSgemmRepeatable backs the package's determinism claim: for a fixed
// thread count, repeated products give identical bits. (Different thread
// counts may not: OpenBLAS adapts its blocking to the thread count, and a
// 517x263x1031 product differs in the last bit between 1 and 2 threads.)
func TestSgemmRepeatable(t *testing.T) {
	if !Available() {
		t.Skipf("OpenBLAS not installed (%v)", Err())
	}
	old := Threads()
	if old < 1 || !SetThreads(old) {
		t.Skip("library cannot report or set its thread count")
	}
	defer SetThreads(old)
	r := rand.New(rand.NewPCG(3, 4))
	const m, n, k = 517, 263, 1031
	a, b := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	for i := range b {
		b[i] = float32(r.NormFloat64())
	}
	first := map[int][]float32{}
	for rep := 0; rep < 3; rep++ {
		for _, th := range []int{1, 2, 4} {
			SetThreads(th)
			c := make([]float32, m*n)
			if err := Sgemm(false, true, m, n, k, 1, a, k, b[:n*k], k, 0, c, n); err != nil {
				t.Fatal(err)
			}
			ref, ok := first[th]
			if !ok {
				first[th] = c
				continue
			}
			for i := range c {
				if math.Float32bits(c[i]) != math.Float32bits(ref[i]) {
					t.Fatalf("%d threads, run %d: c[%d] = %v, first run gave %v", th, rep+1, i, c[i], ref[i])
				}
			}
		}
	}
	same := true
	for i := range first[1] {
		same = same && first[1][i] == first[2][i]
	}
	t.Logf("1 and 2 threads give identical bits: %v", same)
}

// coreTypePreset records whether the runner set OPENBLAS_CORETYPE before
// any test could load the library.
var coreTypePreset bool

func TestMain(m *testing.M) {
	_, coreTypePreset = os.LookupEnv("OPENBLAS_CORETYPE")
	os.Exit(m.Run())
}

// The loader's OPENBLAS_CORETYPE hint must not leak into the environment.
func TestCoreTypeHintRestored(t *testing.T) {
	if !Available() {
		t.Skipf("OpenBLAS not installed (%v)", Err())
	}
	if coreTypePreset {
		t.Skip("OPENBLAS_CORETYPE set by the runner")
	}
	if v, ok := os.LookupEnv("OPENBLAS_CORETYPE"); ok {
		t.Fatalf("OPENBLAS_CORETYPE=%q left in the environment after loading", v)
	}
	if hint := coreTypeHint(); hint != "" && !strings.EqualFold(CoreName(), hint) {
		t.Errorf("hinted core %q, OpenBLAS chose %q", hint, CoreName())
	}
}
