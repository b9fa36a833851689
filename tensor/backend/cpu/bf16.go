package cpu

import (
	"fmt"

	"github.com/strata-gnn/strata/tensor/backend"
)

// bfloat16 activations (backend.BF16Activations), emulated: every
// primitive that takes a BFloat16 operand widens it into a float32 copy
// (exact), runs its float32 code on the copies and rounds a BFloat16
// output to nearest even on store. The arithmetic is the float32 path's,
// so the CUDA kernels (which widen on read and round on store too) and
// this back end agree up to the order of float32 sums, as in FP32.

var _ backend.BF16Activations = (*Backend)(nil)

// BF16Activations reports that the back end accepts bfloat16 activations.
func (b *Backend) BF16Activations() bool { return true }

// isBF16 reports whether any of bs is a BFloat16 buffer.
func isBF16(bs ...backend.Buffer) bool {
	for _, x := range bs {
		if x != nil && x.DType() == backend.BFloat16 {
			return true
		}
	}
	return false
}

// float checks that x is a float32 or bfloat16 buffer of n elements.
func float(op, name string, x backend.Buffer, n int) (*Buffer, error) {
	if x == nil {
		return nil, &backend.ShapeError{Op: op, Msg: name + " is nil"}
	}
	dt := x.DType()
	if dt != backend.Float32 && dt != backend.BFloat16 {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%s has dtype %s, want float32 or bfloat16", name, dt)}
	}
	return asBuf(op, name, x, dt, n)
}

// sameFloat checks that x and y (y may be nil) are float buffers of n
// elements and of one dtype.
func sameFloat(op, xn, yn string, x, y backend.Buffer, n int) (*Buffer, *Buffer, error) {
	xb, err := float(op, xn, x, n)
	if err != nil {
		return nil, nil, err
	}
	if y == nil {
		return xb, nil, nil
	}
	yb, err := float(op, yn, y, n)
	if err != nil {
		return nil, nil, err
	}
	if xb.dt != yb.dt {
		return nil, nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%s is %s but %s is %s: want one dtype", xn, xb.dt, yn, yb.dt)}
	}
	return xb, yb, nil
}

// widen returns x's values as a float32 buffer: x itself when it is
// float32, else a widened copy (nil stays nil).
func widen(x *Buffer) *Buffer {
	if x == nil || x.dt == backend.Float32 {
		return x
	}
	w := make([]float32, len(x.u16))
	parFor(len(w), grainElem, func(lo, hi int) { backend.FromBF16(w[lo:hi], x.u16[lo:hi]) })
	return WrapF32(w)
}

// scratch returns a float32 buffer to compute dst's values in: dst itself
// when it is float32, else a new one holding dst's widened values when
// keep is set (outputs that are read, such as Gemm's C with beta != 0).
func scratch(dst *Buffer, keep bool) *Buffer {
	if dst.dt == backend.Float32 {
		return dst
	}
	if keep {
		return widen(dst)
	}
	return WrapF32(make([]float32, len(dst.u16)))
}

// store rounds v, dst's scratch, into dst when dst is bfloat16.
func store(dst, v *Buffer) {
	if dst.dt == backend.Float32 {
		return
	}
	parFor(len(v.f32), grainElem, func(lo, hi int) { backend.ToBF16(dst.u16[lo:hi], v.f32[lo:hi]) })
}

// gemmBF16 is Gemm with a bfloat16 operand or C.
func (b *Backend) gemmBF16(transA, transB bool, m, n, k int, alpha float32, a, bb backend.Buffer, beta float32, c backend.Buffer) error {
	const op = "Gemm"
	mk, kn, mn, err := backend.GemmShape(op, m, n, k)
	if err != nil {
		return err
	}
	av, err := float(op, "a", a, mk)
	if err != nil {
		return err
	}
	bv, err := float(op, "b", bb, kn)
	if err != nil {
		return err
	}
	if av.dt != bv.dt {
		return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("a is %s but b is %s: want both float32 or both bfloat16", av.dt, bv.dt)}
	}
	cv, err := float(op, "c", c, mn)
	if err != nil {
		return err
	}
	if cv.dt == backend.BFloat16 && av.dt != backend.BFloat16 {
		return &backend.ShapeError{Op: op, Msg: "a bfloat16 c needs bfloat16 a and b"}
	}
	cs := scratch(cv, beta != 0)
	if err := b.Gemm(transA, transB, m, n, k, alpha, widen(av), widen(bv), beta, cs); err != nil {
		return err
	}
	store(cv, cs)
	return nil
}

// axpbyBF16 is Axpby on bfloat16 buffers.
func (b *Backend) axpbyBF16(dst backend.Buffer, alpha float32, x backend.Buffer, beta float32, y backend.Buffer) error {
	const op = "Axpby"
	if dst == nil {
		return &backend.ShapeError{Op: op, Msg: "dst is nil"}
	}
	n := dst.Len()
	d, err := asBuf(op, "dst", dst, backend.BFloat16, n)
	if err != nil {
		return err
	}
	xv, err := asBuf(op, "x", x, backend.BFloat16, n)
	if err != nil {
		return err
	}
	yv, err := asBuf(op, "y", y, backend.BFloat16, n)
	if err != nil {
		return err
	}
	ds := scratch(d, false)
	if err := b.Axpby(ds, alpha, widen(xv), beta, widen(yv)); err != nil {
		return err
	}
	store(d, ds)
	return nil
}

// sumRowsBF16 is SumRows over a bfloat16 x.
func (b *Backend) sumRowsBF16(dst, x backend.Buffer, rows, cols int) error {
	const op = "SumRows"
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	xv, err := asBuf(op, "x", x, backend.BFloat16, n)
	if err != nil {
		return err
	}
	return b.SumRows(dst, widen(xv), rows, cols)
}

// gatherBF16 is GatherRows (and GatherRowsDropout's gather) into a
// bfloat16 dst: rows of a bfloat16 x are copied (widening and rounding
// back is the identity), a float32 x's rows rounded. With p > 0 the rows
// are gathered into float32, dropped out and rounded.
func (b *Backend) gatherBF16(dst, x, idx backend.Buffer, xrows, cols int, p float32, seed uint64) error {
	const op = "GatherRows"
	xn, err := backend.Dims(op, xrows, cols)
	if err != nil {
		return err
	}
	iv, err := i32Any(op, "idx", idx)
	if err != nil {
		return err
	}
	dn, err := backend.Dims(op, len(iv), cols)
	if err != nil {
		return err
	}
	d, err := asBuf(op, "dst", dst, backend.BFloat16, dn)
	if err != nil {
		return err
	}
	xv, err := float(op, "x", x, xn)
	if err != nil {
		return err
	}
	if xv.dt == backend.BFloat16 && p == 0 {
		if err := checkIdx(op, "idx", iv, xrows); err != nil {
			return err
		}
		parFor(len(iv), rowGrain(cols), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				j := int(iv[i])
				copy(d.u16[i*cols:(i+1)*cols], xv.u16[j*cols:(j+1)*cols])
			}
		})
		return nil
	}
	ds := scratch(d, false)
	if err := b.GatherRowsDropout(ds, xv, idx, xrows, cols, p, seed); err != nil {
		return err
	}
	store(d, ds)
	return nil
}

// spmmBF16 is SpMM with bfloat16 x and out.
func (b *Backend) spmmBF16(out backend.Buffer, a backend.Sparse, transpose bool, x backend.Buffer, w backend.Buffer, heads, width int) error {
	const op = "SpMM"
	s, err := asSparse(op, a)
	if err != nil {
		return err
	}
	rows, cols := s.rows, s.cols
	if transpose {
		rows, cols = cols, rows
	}
	on, xn, err := backend.SpMMShape(op, rows, cols, heads, width, w != nil)
	if err != nil {
		return err
	}
	if heads != 1 {
		return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("bfloat16 operands with %d heads: want one", heads)}
	}
	ov, err := asBuf(op, "out", out, backend.BFloat16, on)
	if err != nil {
		return err
	}
	xv, err := asBuf(op, "x", x, backend.BFloat16, xn)
	if err != nil {
		return err
	}
	os := scratch(ov, false)
	if err := b.SpMM(os, a, transpose, widen(xv), w, heads, width); err != nil {
		return err
	}
	store(ov, os)
	return nil
}

// biasActDropoutBF16 is BiasActDropout with a bfloat16 operand or dst.
func (b *Backend) biasActDropoutBF16(dst, a, bb, bias backend.Buffer, rows, cols int, relu bool, p float32, seed uint64) error {
	const op = "BiasActDropout"
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	d, err := float(op, "dst", dst, n)
	if err != nil {
		return err
	}
	av, bv, err := sameFloat(op, "a", "b", a, bb, n)
	if err != nil {
		return err
	}
	var bw backend.Buffer
	if bv != nil {
		bw = widen(bv)
	}
	aw := widen(av)
	ds := scratch(d, false)
	if err := b.BiasActDropout(ds, aw, bw, bias, rows, cols, relu, p, seed); err != nil {
		return err
	}
	store(d, ds)
	return nil
}

// biasActDropoutBackwardBF16 is BiasActDropoutBackward with a bfloat16
// operand: dx is computed in float32, rounded into a bfloat16 dx, and
// dbias summed from what dx holds.
func (b *Backend) biasActDropoutBackwardBF16(dx, dbias, y, dy backend.Buffer, rows, cols int, relu bool, p float32, seed uint64, accumulate bool) error {
	const op = "BiasActDropoutBackward"
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	d, err := float(op, "dx", dx, n)
	if err != nil {
		return err
	}
	yv, gv, err := sameFloat(op, "y", "dy", y, dy, n)
	if err != nil {
		return err
	}
	if dbias != nil {
		if _, err := f32(op, "dbias", dbias, cols); err != nil {
			return err
		}
	}
	if d.dt == backend.Float32 {
		return b.BiasActDropoutBackward(d, dbias, widen(yv), widen(gv), rows, cols, relu, p, seed, accumulate)
	}
	ds := scratch(d, false)
	if err := b.BiasActDropoutBackward(ds, nil, widen(yv), widen(gv), rows, cols, relu, p, seed, false); err != nil {
		return err
	}
	store(d, ds)
	if dbias == nil {
		return nil
	}
	return b.biasSums(dbias, d, rows, cols, accumulate)
}

// biasSums writes (or with accumulate adds) SumRows(dx) to dbias: the
// bias gradient in SumRows' summation order, added as Axpby adds.
func (b *Backend) biasSums(dbias, dx backend.Buffer, rows, cols int, accumulate bool) error {
	if !accumulate {
		return b.SumRows(dbias, dx, rows, cols)
	}
	sums := make([]float32, cols)
	if err := b.SumRows(WrapF32(sums), dx, rows, cols); err != nil {
		return err
	}
	db := F32(dbias)
	for c, s := range sums {
		db[c] = 1*s + 1*db[c]
	}
	return nil
}
