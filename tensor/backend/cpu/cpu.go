package cpu

import (
	"fmt"

	"github.com/strata-gnn/strata/internal/openblas"
	"github.com/strata-gnn/strata/tensor/backend"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

func init() {
	backend.Register("cpu", func(index int) (backend.Backend, error) {
		if index != 0 {
			return nil, fmt.Errorf("cpu: device index %d, the cpu back end has only device 0", index)
		}
		return New(Options{})
	})
}

// GemmKind selects the dense matrix product implementation.
type GemmKind uint8

const (
	// GemmAuto uses OpenBLAS when it loads, gonum otherwise.
	GemmAuto GemmKind = iota
	// GemmGo always uses gonum's pure-Go Sgemm.
	GemmGo
	// GemmOpenBLAS requires OpenBLAS; New fails when it cannot be loaded.
	GemmOpenBLAS
)

// Options configure a Backend. The zero value is the default.
type Options struct {
	Gemm GemmKind
	// MaxAllocBytes bounds a single Alloc (default 64 GiB) so that a
	// corrupt size fails with an error instead of exhausting memory.
	MaxAllocBytes int64
	// Precision is what Gemm rounds its inputs to (default FP32); TF32
	// and BF16 emulate the CUDA back end's tensor-core products.
	Precision backend.Precision
}

// Backend implements backend.Backend on the host.
type Backend struct {
	useBLAS  bool
	maxBytes int64
	prec     backend.Precision
}

var _ backend.Backend = (*Backend)(nil)

// New returns a CPU back end.
func New(opt Options) (*Backend, error) {
	if !opt.Precision.Valid() {
		return nil, fmt.Errorf("cpu: unknown precision %v", opt.Precision)
	}
	b := &Backend{maxBytes: opt.MaxAllocBytes, prec: opt.Precision}
	if b.maxBytes <= 0 {
		b.maxBytes = 64 << 30
	}
	switch opt.Gemm {
	case GemmAuto:
		b.useBLAS = openblas.Available()
	case GemmGo:
	case GemmOpenBLAS:
		if !openblas.Available() {
			return nil, fmt.Errorf("cpu: OpenBLAS requested but not available: %w", openblas.Err())
		}
		b.useBLAS = true
	default:
		return nil, fmt.Errorf("cpu: unknown GemmKind %d", opt.Gemm)
	}
	return b, nil
}

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// Precision is what Gemm rounds its inputs to (Options.Precision).
func (b *Backend) Precision() backend.Precision { return b.prec }

// GemmImpl names the GEMM in use: "openblas" or "gonum", followed by
// the precision when it is not fp32 ("gonum bf16").
func (b *Backend) GemmImpl() string {
	name := "gonum"
	if b.useBLAS {
		name = "openblas"
	}
	if b.prec != backend.FP32 {
		name += " " + b.prec.String()
	}
	return name
}

// Synchronize is a no-op: every CPU method completes before it returns.
func (b *Backend) Synchronize() error { return nil }

// --- memory ---

// Alloc returns a zero-filled buffer of n elements.
func (b *Backend) Alloc(dt backend.DType, n int) (backend.Buffer, error) {
	if dt.Size() == 0 {
		return nil, &backend.ShapeError{Op: "Alloc", Msg: fmt.Sprintf("unknown dtype %v", dt)}
	}
	if n < 0 || int64(n) > b.maxBytes/int64(dt.Size()) {
		return nil, &backend.ShapeError{Op: "Alloc", Msg: fmt.Sprintf("%d elements of %v: out of range (limit %d bytes)", n, dt, b.maxBytes)}
	}
	switch dt {
	case backend.Float32:
		return &Buffer{dt: dt, f32: make([]float32, n)}, nil
	case backend.Int32:
		return &Buffer{dt: dt, i32: make([]int32, n)}, nil
	case backend.BFloat16:
		return &Buffer{dt: dt, u16: make([]uint16, n)}, nil
	default:
		return &Buffer{dt: dt, i64: make([]int64, n)}, nil
	}
}

// Free drops the buffer's storage; the buffer then has length 0, so later
// use fails validation instead of touching stale memory. Buffers made by
// the Wrap functions may be freed too (the wrapped slice is untouched).
func (b *Backend) Free(buf backend.Buffer) {
	if cb, ok := buf.(*Buffer); ok && cb != nil {
		cb.f32, cb.i32, cb.i64, cb.u16 = nil, nil, nil, nil
	}
}

// Upload copies host data into dst.
func (b *Backend) Upload(dst backend.Buffer, src any) error {
	return copyHost("Upload", dst, src, true)
}

// Download copies src into host memory dst.
func (b *Backend) Download(dst any, src backend.Buffer) error {
	return copyHost("Download", src, dst, false)
}

func copyHost(op string, buf backend.Buffer, host any, upload bool) error {
	if buf == nil {
		return &backend.ShapeError{Op: op, Msg: "buffer is nil"}
	}
	var n int
	var dt backend.DType
	switch h := host.(type) {
	case []float32:
		n, dt = len(h), backend.Float32
	case []int32:
		n, dt = len(h), backend.Int32
	case []int64:
		n, dt = len(h), backend.Int64
	case []uint16:
		n, dt = len(h), backend.BFloat16
	default:
		return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("host slice is %T, want []float32, []int32, []int64 or []uint16", host)}
	}
	cb, err := asBuf(op, "buffer", buf, dt, n)
	if err != nil {
		return err
	}
	switch h := host.(type) {
	case []float32:
		if upload {
			copy(cb.f32, h)
		} else {
			copy(h, cb.f32)
		}
	case []int32:
		if upload {
			copy(cb.i32, h)
		} else {
			copy(h, cb.i32)
		}
	case []int64:
		if upload {
			copy(cb.i64, h)
		} else {
			copy(h, cb.i64)
		}
	case []uint16:
		if upload {
			copy(cb.u16, h)
		} else {
			copy(h, cb.u16)
		}
	}
	return nil
}

// Copy copies src into dst (same dtype and length).
func (b *Backend) Copy(dst, src backend.Buffer) error {
	if src == nil {
		return &backend.ShapeError{Op: "Copy", Msg: "src is nil"}
	}
	s, err := asBuf("Copy", "src", src, src.DType(), src.Len())
	if err != nil {
		return err
	}
	d, err := asBuf("Copy", "dst", dst, s.dt, s.Len())
	if err != nil {
		return err
	}
	copy(d.f32, s.f32)
	copy(d.i32, s.i32)
	copy(d.i64, s.i64)
	copy(d.u16, s.u16)
	return nil
}

// Convert casts src into dst: float32 to bfloat16 rounds to nearest even,
// bfloat16 to float32 is exact; same dtypes copy.
func (b *Backend) Convert(dst, src backend.Buffer) error {
	const op = "Convert"
	if src == nil || dst == nil {
		return &backend.ShapeError{Op: op, Msg: "nil buffer"}
	}
	for _, x := range []struct {
		name string
		buf  backend.Buffer
	}{{"src", src}, {"dst", dst}} {
		if dt := x.buf.DType(); dt != backend.Float32 && dt != backend.BFloat16 {
			return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%s has dtype %s, want float32 or bfloat16", x.name, dt)}
		}
	}
	s, err := asBuf(op, "src", src, src.DType(), src.Len())
	if err != nil {
		return err
	}
	d, err := asBuf(op, "dst", dst, dst.DType(), s.Len())
	if err != nil {
		return err
	}
	switch {
	case s.dt == d.dt:
		copy(d.f32, s.f32)
		copy(d.u16, s.u16)
	case s.dt == backend.Float32:
		parFor(len(s.f32), grainElem, func(lo, hi int) { backend.ToBF16(d.u16[lo:hi], s.f32[lo:hi]) })
	default:
		parFor(len(s.u16), grainElem, func(lo, hi int) { backend.FromBF16(d.f32[lo:hi], s.u16[lo:hi]) })
	}
	return nil
}

// Fill sets every element of the float32 buffer dst to v.
func (b *Backend) Fill(dst backend.Buffer, v float32) error {
	d, err := f32Any("Fill", "dst", dst)
	if err != nil {
		return err
	}
	parFor(len(d), grainElem, func(lo, hi int) {
		s := d[lo:hi]
		for i := range s {
			s[i] = v
		}
	})
	return nil
}

// --- dense ---

// Gemm computes C = alpha*op(A)*op(B) + beta*C (row-major).
func (b *Backend) Gemm(transA, transB bool, m, n, k int, alpha float32, a, bb backend.Buffer, beta float32, c backend.Buffer) error {
	const op = "Gemm"
	if isBF16(a, bb, c) {
		return b.gemmBF16(transA, transB, m, n, k, alpha, a, bb, beta, c)
	}
	mk, kn, mn, err := backend.GemmShape(op, m, n, k)
	if err != nil {
		return err
	}
	av, err := f32(op, "a", a, mk)
	if err != nil {
		return err
	}
	bv, err := f32(op, "b", bb, kn)
	if err != nil {
		return err
	}
	cv, err := f32(op, "c", c, mn)
	if err != nil {
		return err
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 || alpha == 0 {
		scale(cv, beta)
		return nil
	}
	if b.prec != backend.FP32 {
		// Emulate the tensor cores: the same float32 product of rounded
		// copies of the inputs.
		av, bv = b.rounded(av), b.rounded(bv)
	}
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	if b.useBLAS && m <= 1<<31-1 && n <= 1<<31-1 && k <= 1<<31-1 {
		return openblas.Sgemm(transA, transB, m, n, k, alpha, av, lda, bv, ldb, beta, cv, n)
	}
	ta, tb := blas.NoTrans, blas.NoTrans
	if transA {
		ta = blas.Trans
	}
	if transB {
		tb = blas.Trans
	}
	gonum.Implementation{}.Sgemm(ta, tb, m, n, k, alpha, av, lda, bv, ldb, beta, cv, n)
	return nil
}

// rounded returns a copy of x rounded to the back end's precision.
func (b *Backend) rounded(x []float32) []float32 {
	r := make([]float32, len(x))
	p := b.prec
	parFor(len(x), grainElem, func(lo, hi int) {
		for i, v := range x[lo:hi] {
			r[lo+i] = p.Round(v)
		}
	})
	return r
}

// scale sets c = beta*c, with beta == 0 meaning "set to zero" (c not read).
func scale(c []float32, beta float32) {
	parFor(len(c), grainElem, func(lo, hi int) {
		s := c[lo:hi]
		if beta == 0 {
			clear(s)
			return
		}
		for i := range s {
			s[i] *= beta
		}
	})
}
