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
