package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-gnn/strata/internal/cublas"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backendtest"
)

// pinnedDevice opens cuda:0 at precision p, or skips when the pinned
// cuBLASLt products are off there.
func pinnedDevice(t *testing.T, p backend.Precision) *Device {
	t.Helper()
	gpu(t)
	d, err := Open(0, Options{Precision: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if _, ok := d.GemmStats(); !ok {
		t.Skipf("pinned products off on %s (no cuBLASLt, or %s=0): GemmImpl %q", d.Name(), EnvPinned, d.GemmImpl())
	}
	return d
}

// pinnedSizes returns n sizes in [1, hi], log-uniform, in random order,
// 1 and hi among them (not first).
func pinnedSizes(r *rand.Rand, n, hi int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = min(hi, max(1, int(math.Exp(r.Float64()*math.Log(float64(hi))))))
	}
	out[n/3], out[2*n/3] = 1, hi
	return out
}

// accumTol is the relative error float32 sums of k products may add
// (about 2^-24 sqrt(k) for random signs; 4x that): the suite's
// tolerances assume k <= 256.
func accumTol(k int) float64 { return 4 * 0x1p-24 * math.Sqrt(float64(k)) }

// closeEnough applies the conformance suite's measure (relative norm, and
// each element within 100*tol of max(|ref|, rms(ref))) to sampled
// elements.
func closeEnough(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	var num, den float64
	for i, g := range got {
		if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
			t.Fatalf("%s: sample %d is %v, want %v", what, i, g, want[i])
		}
		d := float64(g) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	rms := math.Sqrt(den / float64(max(len(want), 1)))
	for i, g := range got {
		if d := math.Abs(float64(g) - want[i]); d > 100*tol*max(math.Abs(want[i]), rms) {
			t.Fatalf("%s: sample %d = %v, want %v", what, i, g, want[i])
		}
	}
	if e := math.Sqrt(num / max(den, 1e-300)); e > tol {
		t.Fatalf("%s: relative error %.3g > %.3g", what, e, tol)
	}
}

// TestPinnedGemmVaryingRows runs products whose row count varies as a
// sampled batch's does, 40 sizes in 1..300000: the forward form
// X (m x 128) W (128 x 256) and the weight-gradient form X^T G with the
// inner dimension k varying (X k x 128, G k x 256), at fp32, tf32 and
// bf16 and with bfloat16 operands (float32 and bfloat16 outputs). Each
// product agrees with a float64 reference on sampled rows or elements at
// the suite's tolerance for its precision (Tolerances; plus accumTol for
// the long sums of the weight-gradient form). The pinned path must warm
// one family at a form's first product and choose no algorithm after it
// (every later size is in that family) and never fall back.
func TestPinnedGemmVaryingRows(t *testing.T) {
	gpu(t)
	const maxRows, n, kw = 300000, 256, 128
	r := rand.New(rand.NewPCG(14, 1))
	sizes := pinnedSizes(r, 40, maxRows)
	x := make([]float32, maxRows*kw)
	g := make([]float32, maxRows*n)
	w := make([]float32, kw*n)
	for _, v := range [][]float32{x, g, w} {
		for i := range v {
			v[i] = 2*r.Float32() - 1
		}
	}
	for _, c := range []struct {
		name  string
		prec  backend.Precision
		typed bool          // bfloat16 operands (GemmExTyped's path)
		out   backend.DType // of C
	}{
		{"fp32", backend.FP32, false, backend.Float32},
		{"tf32", backend.TF32, false, backend.Float32},
		{"bf16", backend.BF16, false, backend.Float32},
		{"bf16x", backend.BF16, true, backend.Float32},
		{"bf16x-out-bf16", backend.BF16, true, backend.BFloat16},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := pinnedDevice(t, c.prec)
			_, gemmTol := backendtest.Tolerances(c.prec)
			if c.typed {
				gemmTol = 1e-4 // backendtest: a float32 C from bfloat16 operands (exact products)
				if c.out == backend.BFloat16 {
					gemmTol = 1e-2 // backendtest: a bfloat16 C (rounded to 2^-8)
				}
			}
			// Operands on the device, and the values the device reads
			// (rounded to bfloat16 when typed) for the reference.
			ref := func(v []float32) []float32 { return v }
			in := func(v []float32) backend.Buffer { return upload(t, d, backend.Float32, v) }
			if c.typed {
				ref = func(v []float32) []float32 {
					out := make([]float32, len(v))
					for i, f := range v {
						out[i] = backend.RoundBF16(f)
					}
					return out
				}
				in = func(v []float32) backend.Buffer {
					h := make([]uint16, len(v))
					backend.ToBF16(h, v)
					b, err := d.Alloc(backend.BFloat16, len(h))
					if err != nil {
						t.Fatal(err)
					}
					if err := d.Upload(b, h); err != nil {
						t.Fatal(err)
					}
					return b
				}
			}
			xs, gs, ws := ref(x), ref(g), ref(w)
			xb, gb, wb := in(x), in(g), in(w)
			ob, err := d.Alloc(c.out, maxRows*n)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, b := range []backend.Buffer{xb, gb, wb, ob} {
					d.Free(b)
				}
			}()
			get := func(b *Buffer) []float32 {
				out := make([]float32, b.Len())
				if c.out == backend.Float32 {
					if err := d.Download(out, b); err != nil {
						t.Fatal(err)
					}
					return out
				}
				h := make([]uint16, b.Len())
				if err := d.Download(h, b); err != nil {
					t.Fatal(err)
				}
				backend.FromBF16(out, h)
				return out
			}
			view := func(b backend.Buffer, n int) *Buffer { return b.(*Buffer).View(0, n) }

			forms := []struct {
				name string
				run  func(size int, alpha float32) error
				// check compares the product of size against the
				// reference.
				check func(size int, alpha float32)
			}{
				{"forward", func(m int, alpha float32) error {
					return d.Gemm(false, false, m, n, kw, alpha, view(xb, m*kw), wb, 0, view(ob, m*n))
				}, func(m int, alpha float32) {
					rows := []int{0, m - 1}
					for range 46 {
						rows = append(rows, r.IntN(m))
					}
					var got []float32
					var want []float64
					for _, i := range rows {
						got = append(got, get(ob.(*Buffer).View(i*n, n))...)
						for j := range n {
							var s float64
							for p := range kw {
								s += float64(xs[i*kw+p]) * float64(ws[p*n+j])
							}
							want = append(want, float64(alpha)*s)
						}
					}
					closeEnough(t, fmt.Sprintf("forward m=%d", m), got, want, max(gemmTol, accumTol(kw)))
				}},
				{"weight-gradient", func(k int, alpha float32) error {
					return d.Gemm(true, false, kw, n, k, alpha, view(xb, k*kw), view(gb, k*n), 0, view(ob, kw*n))
				}, func(k int, alpha float32) {
					all := get(view(ob, kw*n))
					var got []float32
					var want []float64
					for range 128 {
						i, j := r.IntN(kw), r.IntN(n)
						var s float64
						for p := range k {
							s += float64(xs[p*kw+i]) * float64(gs[p*n+j])
						}
						got = append(got, all[i*n+j])
						want = append(want, float64(alpha)*s)
					}
					closeEnough(t, fmt.Sprintf("weight gradient k=%d", k), got, want, max(gemmTol, accumTol(k)))
				}},
			}
			for _, f := range forms {
				s0, _ := d.GemmStats()
				var s1 cublas.PinnedStats
				for i, size := range sizes {
					alpha := 1 + 0.25*float32(i%3) // each size's output differs from the last one's
					if err := f.run(size, alpha); err != nil {
						t.Fatalf("%s size %d: %v", f.name, size, err)
					}
					f.check(size, alpha)
					if i == 0 {
						s1, _ = d.GemmStats()
						if s1.Families != s0.Families+1 || s1.Keys-s0.Keys > cublas.FamilySize || s1.Keys == s0.Keys {
							t.Fatalf("%s: the first product (size %d) warmed %d families of %d keys, want 1 of at most %d",
								f.name, size, s1.Families-s0.Families, s1.Keys-s0.Keys, cublas.FamilySize)
						}
					}
				}
				s2, _ := d.GemmStats()
				t.Logf("%s: %d products, family of %d keys: %d launched, %d not launched, %d without algorithm; %d fallbacks",
					f.name, s2.Calls-s0.Calls, s1.Keys-s0.Keys, s2.WarmLaunches-s0.WarmLaunches, s2.WarmSkipped-s0.WarmSkipped,
					s2.NoAlgorithm-s0.NoAlgorithm, s2.Fallbacks-s0.Fallbacks)
				if s2.Keys != s1.Keys || s2.Families != s1.Families {
					t.Errorf("%s: products after the first chose %d more algorithms in %d more families", f.name, s2.Keys-s1.Keys, s2.Families-s1.Families)
				}
				if s2.Fallbacks != s0.Fallbacks {
					t.Errorf("%s: %d products fell back to the heuristic at their own shape", f.name, s2.Fallbacks-s0.Fallbacks)
				}
				if s2.Calls-s0.Calls != len(sizes) {
					t.Errorf("%s: %d pinned products, want %d", f.name, s2.Calls-s0.Calls, len(sizes))
				}
				if s2.WarmLaunches+s2.WarmSkipped+s2.NoAlgorithm != s2.Keys {
					t.Errorf("%s: %d keys, but %d launched + %d not launched + %d without algorithm", f.name, s2.Keys, s2.WarmLaunches, s2.WarmSkipped, s2.NoAlgorithm)
				}
			}
		})
	}
}

// TestConformanceUnpinned runs the suite with the pinned products off
// (EnvPinned=0): Gemm calls cublasSgemm/cublasGemmEx, as before them.
func TestConformanceUnpinned(t *testing.T) {
	gpu(t)
	t.Setenv(EnvPinned, "0")
	d, err := Open(0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, ok := d.GemmStats(); ok || d.GemmImpl() != "cublas fp32" {
		t.Fatalf("%s=0: GemmImpl %q, pinned stats on", EnvPinned, d.GemmImpl())
	}
	backendtest.Run(t, d)
}

// TestPinnedWarming: with WarmProducts on, a product whose key lies in an
// earlier family (the classifier's 256 x 47 after a hidden layer's
// 256 x 256: one bucket apart at 8 rows) warms its own family too, so the
// same products at a batch's row counts afterwards warm nothing; with it
// off, the classifier's product at a large row count would have started a
// family of its own.
func TestPinnedWarming(t *testing.T) {
	d := pinnedDevice(t, backend.FP32)
	alloc := func(n int) backend.Buffer {
		b, err := d.Alloc(backend.Float32, n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Free(b) })
		return b
	}
	const big = 100000
	// Gemm wants buffers of exactly the product's sizes.
	gemm := func(m, n int) {
		t.Helper()
		x, w, out := alloc(m*256), alloc(256*n), alloc(m*n)
		if err := d.Gemm(false, false, m, n, 256, 1, x, w, 0, out); err != nil {
			t.Fatal(err)
		}
	}
	d.WarmProducts(true)
	gemm(8, 256)
	gemm(8, 47)
	d.WarmProducts(false)
	warmed, _ := d.GemmStats()
	if warmed.Families != 2 {
		t.Fatalf("%d families warmed, want 2 (one a product while warming): %+v", warmed.Families, warmed)
	}
	for _, m := range []int{big, 3000, 777} {
		gemm(m, 256)
		gemm(m, 47)
	}
	after, _ := d.GemmStats()
	if after.Families != warmed.Families || after.Fallbacks != 0 {
		t.Fatalf("after the warm-up: %+v, want %d families and no fallbacks", after, warmed.Families)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
}
