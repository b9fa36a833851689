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
	c, err := d.biasActArgs("BiasAct", dst, a, b, bias, rows, cols)
	if err != nil || c.n == 0 {
		return err
	}
	if c.suffix != "" {
		return &backend.ShapeError{Op: "BiasAct", Msg: "bfloat16 operands: float32 only"}
	}
	return d.run(func() error {
		return d.launchN("bias_act", int64(c.n), c.ptrs[0], c.ptrs[1], c.ptrs[2], c.ptrs[3],
			cu.I64(int64(c.n)), cu.I64(int64(cols)), cu.I32(b2i(relu)))
	})
}

// biasActCall is a checked BiasAct (or BiasActDropout) call: n elements
// and the pointers dst, a, b (0 when nil) and bias; suffix names the
// kernel variant for the operands' dtypes (dtypeSuffix of a and dst).
type biasActCall struct {
	n      int
	ptrs   [4]uint64
	suffix string
}

// wide8 reports whether an elementwise kernel may take its wide form (8
// values a thread, 16-byte accesses): cols % 8 == 0 and every pointer (0:
// an absent operand) 16-byte aligned. The wide kernels compute each value
// as the one-value ones do, so either gives the same bits.
func wide8(cols int, ptrs ...uint64) bool {
	if cols%8 != 0 {
		return false
	}
	for _, p := range ptrs {
		if p%16 != 0 {
			return false
		}
	}
	return true
}

// dtypeSuffix names a fused kernel's variant for an input (in) and an
// output (out) dtype: "" for float32 both, else "_" and one letter each,
// f (float32) or b (bfloat16): "_bb", "_bf", "_fb".
func dtypeSuffix(in, out backend.DType) string {
	if in == backend.Float32 && out == backend.Float32 {
		return ""
	}
	l := func(dt backend.DType) string {
		if dt == backend.BFloat16 {
			return "b"
		}
		return "f"
	}
	return "_" + l(in) + l(out)
}

// biasActArgs checks BiasAct's arguments, which BiasActDropout shares:
// dst, a and b (optional) float32 or bfloat16 of rows x cols (a and b of
// one dtype), bias float32 of cols.
func (d *Device) biasActArgs(op string, dst, a, b, bias backend.Buffer, rows, cols int) (biasActCall, error) {
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return biasActCall{}, err
	}
	dv, err := d.float(op, "dst", dst, n)
	if err != nil {
		return biasActCall{}, err
	}
	av, err := d.float(op, "a", a, n)
	if err != nil {
		return biasActCall{}, err
	}
	var bp cu.DevPtr
	if b != nil {
		bv, err := d.asBuf(op, "b", b, av.dt, n)
		if err != nil {
			return biasActCall{}, err
		}
		bp = bv.ptr
	}
	biasv, err := d.f32(op, "bias", bias, cols)
	if err != nil {
		return biasActCall{}, err
	}
	return biasActCall{n: n, ptrs: [4]uint64{uint64(dv.ptr), uint64(av.ptr), uint64(bp), uint64(biasv.ptr)}, suffix: dtypeSuffix(av.dt, dv.dt)}, nil
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

var _ backend.BF16Activations = (*Device)(nil)

// bf16Activations is the CUDA back end's claim of
// backend.BF16Activations: set it to false to keep trainers' activations
// in float32 (should a bfloat16 kernel fail its GPU check).
const bf16Activations = true

// BF16Activations reports whether trainers may store activations as
// bfloat16 here (the kernels' bfloat16 variants: spmm1_*_b8/_b4/_b1,
// bias_act_drop_*, act_drop_bwd*_* and their wide forms *8,
// gather_rows_*2b*, sum_rows_partial_bf16, axpby_bf16[x8], scale_bf16,
// and cuBLAS GemmEx on CUDA_R_16BF).
func (d *Device) BF16Activations() bool { return bf16Activations }

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
	g, err := d.gatherArgs(op, dst, x, idx, xrows, cols)
	if err != nil {
		return err
	}
	g.drop = []uint64{cu.F32(p), cu.F32(keep), seed}
	return d.gather(g)
}

// BiasActDropout computes dst = Dropout(act((a + b) + bias)) in one pass
// (BiasAct followed by the regenerated dropout mask).
func (d *Device) BiasActDropout(dst, a, b, bias backend.Buffer, rows, cols int, relu bool, p float32, seed uint64) error {
	const op = "BiasActDropout"
	keep, err := dropArgs(op, p)
	if err != nil {
		return err
	}
	c, err := d.biasActArgs(op, dst, a, b, bias, rows, cols)
	if err != nil || c.n == 0 {
		return err
	}
	name, items := "bias_act_drop"+c.suffix, int64(c.n)
	if wide8(cols, c.ptrs[0], c.ptrs[1], c.ptrs[2]) {
		name, items = name+"8", items/8
	}
	return d.run(func() error {
		return d.launchN(name, items, c.ptrs[0], c.ptrs[1], c.ptrs[2], c.ptrs[3],
			cu.I64(items), cu.I64(int64(cols)), cu.I32(b2i(relu)), cu.F32(p), cu.F32(keep), seed)
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
	dxv, err := d.float(op, "dx", dx, n)
	if err != nil {
		return err
	}
	yv, err := d.float(op, "y", y, n)
	if err != nil {
		return err
	}
	gv, err := d.asBuf(op, "dy", dy, yv.dt, n)
	if err != nil {
		return err
	}
	suffix := dtypeSuffix(yv.dt, dxv.dt)
	wide := wide8(cols, uint64(dxv.ptr), uint64(yv.ptr), uint64(gv.ptr))
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
		name, items := "act_drop_bwd"+suffix, int64(n)
		if wide {
			name, items = name+"8", items/8
		}
		return d.run(func() error {
			return d.launchN(name, items, uint64(dxv.ptr), uint64(yv.ptr), uint64(gv.ptr), cu.I64(items),
				cu.I32(b2i(relu)), cu.F32(p), cu.F32(keep), seed)
		})
	}
	if cols == 0 {
		return nil
	}
	chunk, nchunks, err := sumRowsChunks(op, rows, cols)
	if err != nil {
		return err
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
	// One column a thread, or 8 (the wide form: its columns argument
	// counts vectors of 8); the chunks, and so the sums, are the same.
	name, units := "act_drop_bwd_partial"+suffix, cols
	if wide {
		name, units = name+"8", cols/8
	}
	grid := cu.Dim3{X: uint32((units + 31) / 32), Y: uint32(nchunks), Z: 1}
	if err := d.launchGrid(name, grid, cu.Dim3{X: 32, Y: 8, Z: 1}, uint64(dxv.ptr), uint64(yv.ptr), uint64(gv.ptr),
		cu.I64(int64(rows)), cu.I64(int64(units)), cu.I64(int64(chunk)), cu.I32(b2i(relu)), cu.F32(p), cu.F32(keep), seed, uint64(part.ptr)); err != nil {
		return err
	}
	return d.launchWarps("sum_rows_final_acc", int64(cols), uint64(part.ptr), cu.I64(int64(nchunks)), cu.I64(int64(cols)), uint64(dbv.ptr), cu.I32(acc))
}
