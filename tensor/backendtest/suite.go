package backendtest

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Options tune the suite for a back end.
type Options struct {
	// Tol is the relative-norm tolerance for float results (default:
	// Tolerances of the back end's precision, 1e-5).
	Tol float64
	// GemmTol is the tolerance for Gemm (default: Tolerances of the back
	// end's precision).
	GemmTol float64
	// VaryGOMAXPROCS also checks that results are bit-identical under
	// GOMAXPROCS = 1, 2, 3 and 8 (1 and 3 with -short), for host back
	// ends that use goroutines.
	VaryGOMAXPROCS bool
}

// Tolerances are the relative-norm tolerances the suite holds a back end
// of precision p to: tol for every primitive but Gemm, which computes in
// float32 at every precision (1e-5), and gemm for Gemm: 1e-5 at FP32,
// and at TF32 and BF16 four unit round-offs of the operands' format,
// 4*2^-11 (about 2e-3) and 4*2^-8 (about 1.6e-2). A product of two
// rounded operands is off by at most 2u (round to nearest) or 4u
// (hardware that truncates); sums of many terms average it down.
func Tolerances(p backend.Precision) (tol, gemm float64) {
	switch p {
	case backend.TF32:
		return 1e-5, 4 * 0x1p-11
	case backend.BF16:
		return 1e-5, 4 * 0x1p-8
	}
	return 1e-5, 1e-5
}

// Run checks b against the conformance suite with default options.
func Run(t *testing.T, b backend.Backend) { RunWith(t, b, Options{}) }

// RunWith checks b against the conformance suite, at the tolerances of its
// precision (Tolerances) unless opt sets them.
func RunWith(t *testing.T, b backend.Backend, opt Options) {
	tol, gemmTol := Tolerances(b.Precision())
	if opt.Tol <= 0 {
		opt.Tol = tol
	}
	if opt.GemmTol <= 0 {
		opt.GemmTol = max(gemmTol, opt.Tol)
	}
	t.Logf("%s: precision %s, tolerance %.3g (Gemm %.3g)", b.Name(), b.Precision(), opt.Tol, opt.GemmTol)
	tests := []struct {
		name string
		fn   func(*suite)
	}{
		{"Memory", testMemory},
		{"Gemm", testGemm},
		{"Precision", testPrecision},
		{"BFloat16", testBFloat16},
		{"BF16Activations", testBF16Activations},
		{"Elementwise", testElementwise},
		{"Unary", testUnary},
		{"Dropout", testDropout},
		{"Fused", testFused},
		{"Reductions", testReductions},
		{"LogSoftmax", testLogSoftmax},
		{"NLLLoss", testNLLLoss},
		{"GatherScatter", testGatherScatter},
		{"SpMM", testSpMM},
		{"SpMMConcat", testSpMMConcat},
		{"SDDMM", testSDDMM},
		{"EdgeSum", testEdgeSum},
		{"EdgeSoftmax", testEdgeSoftmax},
		{"RowDegreeInvExpand", testDegreeExpand},
		{"AdamStep", testAdam},
		{"Adjoints", testAdjoints},
		{"Errors", testErrors},
		{"Determinism", testDeterminism},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := fnv.New64a()
			h.Write([]byte(tc.name))
			s := &suite{t: t, b: b, opt: opt, r: rand.New(rand.NewPCG(h.Sum64(), 12345))}
			tc.fn(s)
			if err := b.Synchronize(); err != nil {
				t.Fatalf("Synchronize after %s: %v", tc.name, err)
			}
		})
	}
}

// suite carries one subtest's state.
type suite struct {
	t   *testing.T
	b   backend.Backend
	opt Options
	r   *rand.Rand
}

// protect runs fn and turns a panic into a test failure naming op.
func (s *suite) protect(op string, fn func() error) (err error) {
	s.t.Helper()
	defer func() {
		if p := recover(); p != nil {
			s.t.Fatalf("%s panicked: %v", op, p)
		}
	}()
	return fn()
}

// ok runs fn and fails the test on error or panic.
func (s *suite) ok(op string, fn func() error) {
	s.t.Helper()
	if err := s.protect(op, fn); err != nil {
		s.t.Fatalf("%s: %v", op, err)
	}
}

func (s *suite) alloc(dt backend.DType, n int) backend.Buffer {
	s.t.Helper()
	buf, err := s.b.Alloc(dt, n)
	if err != nil {
		s.t.Fatalf("Alloc(%v, %d): %v", dt, n, err)
	}
	s.t.Cleanup(func() { s.b.Free(buf) })
	return buf
}

// f32 uploads host values.
func (s *suite) f32(v []float32) backend.Buffer {
	s.t.Helper()
	buf := s.alloc(backend.Float32, len(v))
	s.ok("Upload", func() error { return s.b.Upload(buf, v) })
	return buf
}

func (s *suite) i32(v []int32) backend.Buffer {
	s.t.Helper()
	buf := s.alloc(backend.Int32, len(v))
	s.ok("Upload", func() error { return s.b.Upload(buf, v) })
	return buf
}

// out allocates an output poisoned with NaN.
func (s *suite) out(n int) backend.Buffer {
	s.t.Helper()
	p := make([]float32, n)
	for i := range p {
		p[i] = float32(math.NaN())
	}
	return s.f32(p)
}

// outI32 allocates an int32 output poisoned with -7.
func (s *suite) outI32(n int) backend.Buffer {
	s.t.Helper()
	p := make([]int32, n)
	for i := range p {
		p[i] = -7
	}
	return s.i32(p)
}

func (s *suite) get(buf backend.Buffer) []float32 {
	s.t.Helper()
	v := make([]float32, buf.Len())
	s.ok("Download", func() error { return s.b.Download(v, buf) })
	return v
}

func (s *suite) getI32(buf backend.Buffer) []int32 {
	s.t.Helper()
	v := make([]int32, buf.Len())
	s.ok("Download", func() error { return s.b.Download(v, buf) })
	return v
}

// randn returns n standard normal values, none of magnitude below 1e-3.
func (s *suite) randn(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		for {
			x := s.r.NormFloat64()
			if math.Abs(x) >= 1e-3 {
				v[i] = float32(x)
				break
			}
		}
	}
	return v
}

// uniform returns n values in [lo, hi) (never exactly zero unless lo = hi = 0).
func (s *suite) uniform(n int, lo, hi float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		for {
			x := float32(lo + (hi-lo)*s.r.Float64())
			if x != 0 {
				v[i] = x
				break
			}
		}
	}
	return v
}

// close compares got with a float64 reference (see the package doc).
func (s *suite) close(what string, got []float32, want []float64, tol float64) {
	s.t.Helper()
	if len(got) != len(want) {
		s.t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	var num, den float64
	for i, g := range got {
		w := want[i]
		if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
			if math.IsNaN(w) || float64(g) == w {
				continue
			}
			s.t.Fatalf("%s: element %d is %v (unwritten or wrongly read output?), want %v", what, i, g, w)
		}
		d := float64(g) - w
		num += d * d
		den += w * w
	}
	rms := math.Sqrt(den / float64(max(len(want), 1)))
	for i, g := range got {
		if d := math.Abs(float64(g) - want[i]); d > 100*tol*max(math.Abs(want[i]), rms) {
			s.t.Fatalf("%s: element %d = %v, want %v", what, i, g, want[i])
		}
	}
	err := math.Sqrt(num)
	if den > 0 {
		err /= math.Sqrt(den)
	}
	if err > tol {
		s.t.Fatalf("%s: relative error %.3g > %.3g", what, err, tol)
	}
}

// exact compares bit patterns (NaN == NaN).
func (s *suite) exact(what string, got, want []float32) {
	s.t.Helper()
	if len(got) != len(want) {
		s.t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			s.t.Fatalf("%s: element %d = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// expectShapeErr requires fn to fail with a *backend.ShapeError.
func (s *suite) expectShapeErr(what string, fn func() error) {
	s.t.Helper()
	err := s.protect(what, fn)
	var se *backend.ShapeError
	if !errors.As(err, &se) {
		s.t.Errorf("%s: got error %v, want a *backend.ShapeError", what, err)
	}
	s.syncClean(what)
}

// expectIndexErr requires fn, or the Synchronize after it, to fail with a
// *backend.IndexError.
func (s *suite) expectIndexErr(what string, fn func() error) {
	s.t.Helper()
	err := s.protect(what, fn)
	if err == nil {
		err = s.protect("Synchronize", s.b.Synchronize)
	}
	var ie *backend.IndexError
	if !errors.As(err, &ie) {
		s.t.Errorf("%s: got error %v, want a *backend.IndexError", what, err)
	}
	s.syncClean(what)
}

// syncClean requires the back end to be usable after a failed call.
func (s *suite) syncClean(what string) {
	s.t.Helper()
	if err := s.protect("Synchronize", s.b.Synchronize); err != nil {
		s.t.Errorf("Synchronize after failed %s: %v (error state not cleared)", what, err)
	}
}

// withProcs runs fn under each GOMAXPROCS value to compare (only the
// current one unless VaryGOMAXPROCS).
func (s *suite) withProcs(fn func(procs int)) {
	if !s.opt.VaryGOMAXPROCS {
		fn(runtime.GOMAXPROCS(0))
		return
	}
	old := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(old)
	procs := []int{1, 2, 3, 8}
	if testing.Short() {
		procs = []int{1, 3}
	}
	for _, p := range procs {
		runtime.GOMAXPROCS(p)
		fn(p)
	}
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func shape(dims ...int) string {
	s := ""
	for i, d := range dims {
		if i > 0 {
			s += "x"
		}
		s += fmt.Sprint(d)
	}
	return s
}
