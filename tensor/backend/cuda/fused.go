package cuda

import (
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
)

// BiasAct computes dst = act((a + b) + bias) for rows x cols matrices a and
// b (b may be nil) and a bias of cols, where act is ReLU when relu is set
// and the identity otherwise: what Axpby(dst, 1, a, 1, b), AddRowVector
// and Unary(ReLU) compute, bit for bit, in one pass. dst may alias a or b.
// Package fullgraph uses it for a layer's output.
func (d *Device) BiasAct(dst, a, b, bias backend.Buffer, rows, cols int, relu bool) error {
	const op = "BiasAct"
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	dv, err := d.f32(op, "dst", dst, n)
	if err != nil {
		return err
	}
	av, err := d.f32(op, "a", a, n)
	if err != nil {
		return err
	}
	var bp cu.DevPtr
	if b != nil {
		bv, err := d.f32(op, "b", b, n)
		if err != nil {
			return err
		}
		bp = bv.ptr
	}
	biasv, err := d.f32(op, "bias", bias, cols)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	r := int32(0)
	if relu {
		r = 1
	}
	return d.run(func() error {
		return d.launchN("bias_act", int64(n), uint64(dv.ptr), uint64(av.ptr), uint64(bp), uint64(biasv.ptr),
			cu.I64(int64(n)), cu.I64(int64(cols)), cu.I32(r))
	})
}

// ReLUMaskScale computes dst = y > 0 ? dy*scale : 0 elementwise: the
// gradient through a ReLU whose output (or a dropped-out copy of it) is y,
// times a dropout keep scale; with scale 1 it equals UnaryBackward(ReLU)
// on y. dst may alias dy or y.
func (d *Device) ReLUMaskScale(dst, dy, y backend.Buffer, scale float32) error {
	const op = "ReLUMaskScale"
	dv, err := d.f32Any(op, "dst", dst)
	if err != nil {
		return err
	}
	gv, err := d.f32(op, "dy", dy, dv.n)
	if err != nil {
		return err
	}
	yv, err := d.f32(op, "y", y, dv.n)
	if err != nil {
		return err
	}
	if dv.n == 0 {
		return nil
	}
	return d.run(func() error {
		return d.launchN("relu_mask_scale", int64(dv.n), uint64(dv.ptr), uint64(gv.ptr), uint64(yv.ptr), cu.F32(scale), cu.I64(int64(dv.n)))
	})
}

var _ backend.Fused = (*Device)(nil)

// dropArgs returns Dropout's keep scale for p, after checking p.
func dropArgs(op string, p float32) (float32, error) {
	if err := backend.CheckDropoutRate(op, p); err != nil {
		return 0, err
	}
	return 1 / (1 - p), nil
}

// GatherRowsDropout is GatherRows with Dropout applied to each value as
// it is stored: no separate pass over dst and no mask.
func (d *Device) GatherRowsDropout(dst, x, idx backend.Buffer, xrows, cols int, p float32, seed uint64) error {
	const op = "GatherRowsDropout"
	keep, err := dropArgs(op, p)
	if err != nil {
		return err
	}
	xn, err := backend.Dims(op, xrows, cols)
	if err != nil {
		return err
	}
	iv, err := d.i32Any(op, "idx", idx)
	if err != nil {
		return err
	}
	dn, err := backend.Dims(op, iv.n, cols)
	if err != nil {
		return err
	}
	dv, err := d.f32(op, "dst", dst, dn)
	if err != nil {
		return err
	}
	xdt := backend.Float32
	if x != nil && x.DType() == backend.BFloat16 {
		xdt = backend.BFloat16
	}
	xv, err := d.asBuf(op, "x", x, xdt, xn)
	if err != nil {
		return err
	}
	if dn == 0 {
		return nil
	}
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	slot, err := d.checks.slot(d, op, "idx", iv, xrows)
	if err != nil {
		return err
	}
	n, c := int64(iv.n), int64(cols)
	args := func(ptrs ...uint64) []uint64 {
		return append(ptrs, cu.I64(n), cu.I64(int64(xrows)), 0, slot, cu.F32(p), cu.F32(keep), seed)
	}
	var name string
	var a []uint64
	switch {
	case xdt == backend.BFloat16 && c%4 == 0 && dv.ptr%16 == 0 && xv.ptr%8 == 0:
		name, a = "gather_rows_bf16x4_drop", args(uint64(dv.ptr), uint64(xv.ptr), uint64(iv.ptr))
		a[5] = cu.I64(c / 4)
	case xdt == backend.BFloat16:
		name, a = "gather_rows_bf16_drop", args(uint64(dv.ptr), uint64(xv.ptr), uint64(iv.ptr))
		a[5] = cu.I64(c)
	case c%4 == 0 && dv.ptr%16 == 0 && xv.ptr%16 == 0:
		name, a = "gather_rows4_drop", args(uint64(dv.ptr), uint64(xv.ptr), uint64(iv.ptr))
		a[5] = cu.I64(c / 4)
	default:
		name, a = "gather_rows_drop", args(uint64(dv.ptr), uint64(xv.ptr), uint64(iv.ptr))
		a[5] = cu.I64(c)
	}
	items := n * c
	if name == "gather_rows4_drop" || name == "gather_rows_bf16x4_drop" {
		items /= 4
	}
	return d.launchN(name, items, a...)
}

// BiasActDropout computes dst = Dropout(act((a + b) + bias)) in one pass
// (BiasAct followed by the regenerated dropout mask).
func (d *Device) BiasActDropout(dst, a, b, bias backend.Buffer, rows, cols int, relu bool, p float32, seed uint64) error {
	const op = "BiasActDropout"
	keep, err := dropArgs(op, p)
	if err != nil {
		return err
	}
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	dv, err := d.f32(op, "dst", dst, n)
	if err != nil {
		return err
	}
	av, err := d.f32(op, "a", a, n)
	if err != nil {
		return err
	}
	var bp cu.DevPtr
	if b != nil {
		bv, err := d.f32(op, "b", b, n)
		if err != nil {
			return err
		}
		bp = bv.ptr
	}
	biasv, err := d.f32(op, "bias", bias, cols)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return d.run(func() error {
		return d.launchN("bias_act_drop", int64(n), uint64(dv.ptr), uint64(av.ptr), uint64(bp), uint64(biasv.ptr),
			cu.I64(int64(n)), cu.I64(int64(cols)), cu.I32(b2i(relu)), cu.F32(p), cu.F32(keep), seed)
	})
}

func b2i(v bool) int32 {
	if v {
		return 1
	}
	return 0
}

// BiasActDropoutBackward writes dx through the dropout and activation;
// with dbias, in the same pass as SumRows' partial sums (two launches in
// all, the second adding to dbias when accumulate is set).
func (d *Device) BiasActDropoutBackward(dx, dbias, y, dy backend.Buffer, rows, cols int, relu bool, p float32, seed uint64, accumulate bool) error {
	const op = "BiasActDropoutBackward"
	keep, err := dropArgs(op, p)
	if err != nil {
		return err
	}
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	dxv, err := d.f32(op, "dx", dx, n)
	if err != nil {
		return err
	}
	yv, err := d.f32(op, "y", y, n)
	if err != nil {
		return err
	}
	gv, err := d.f32(op, "dy", dy, n)
	if err != nil {
		return err
	}
	var dbv *Buffer
	if dbias != nil {
		if dbv, err = d.f32(op, "dbias", dbias, cols); err != nil {
			return err
		}
	}
	if dbv == nil {
		if n == 0 {
			return nil
		}
		return d.run(func() error {
			return d.launchN("act_drop_bwd", int64(n), uint64(dxv.ptr), uint64(yv.ptr), uint64(gv.ptr), cu.I64(int64(n)),
				cu.I32(b2i(relu)), cu.F32(p), cu.F32(keep), seed)
		})
	}
	if cols == 0 {
		return nil
	}
	// SumRows' chunking, so that the sums are SumRows' bit for bit.
	chunk := max(64, (rows+4095)/4096)
	nchunks := max(1, (rows+chunk-1)/chunk)
	if int64(nchunks)*int64(cols) > maxElems {
		return &backend.ShapeError{Op: op, Msg: "shape too large"}
	}
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	acc := int32(0)
	if accumulate {
		acc = 1
	}
	if rows == 0 {
		if accumulate {
			return nil // adds zeros
		}
		return d.launchN("fill_f32", int64(cols), uint64(dbv.ptr), cu.F32(0), cu.I64(int64(cols)))
	}
	part, err := d.allocLocked(backend.Int64, nchunks*cols) // doubles
	if err != nil {
		return err
	}
	defer d.freeLocked(part)
	grid := cu.Dim3{X: uint32((cols + 31) / 32), Y: uint32(nchunks), Z: 1}
	if err := d.launchGrid("act_drop_bwd_partial", grid, cu.Dim3{X: 32, Y: 8, Z: 1}, uint64(dxv.ptr), uint64(yv.ptr), uint64(gv.ptr),
		cu.I64(int64(rows)), cu.I64(int64(cols)), cu.I64(int64(chunk)), cu.I32(b2i(relu)), cu.F32(p), cu.F32(keep), seed, uint64(part.ptr)); err != nil {
		return err
	}
	return d.launchWarps("sum_rows_final_acc", int64(cols), uint64(part.ptr), cu.I64(int64(nchunks)), cu.I64(int64(cols)), uint64(dbv.ptr), cu.I32(acc))
}
