package cpu

import (
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
)

var _ backend.Fused = (*Backend)(nil)

// keepScale is Dropout's scale of a kept element, in float32.
func keepScale(p float32) float32 { return 1 / (1 - p) }

// dropAt is element i's dropout factor: Dropout's mask value (scale or 0;
// 1 when p == 0, where Dropout is not applied at all).
func dropAt(p, scale float32, seed uint64, i int) float32 {
	if p == 0 {
		return 1
	}
	if rng.DropUniform(seed, uint64(i)) >= p {
		return scale
	}
	return 0
}

// GatherRowsDropout is GatherRows then Dropout without a mask: each
// gathered value is multiplied by its mask value, as Dropout does.
func (b *Backend) GatherRowsDropout(dst, x, idx backend.Buffer, xrows, cols int, p float32, seed uint64) error {
	const op = "GatherRowsDropout"
	if err := backend.CheckDropoutRate(op, p); err != nil {
		return err
	}
	if isBF16(dst) {
		return b.gatherBF16(dst, x, idx, xrows, cols, p, seed)
	}
	if err := b.GatherRows(dst, x, idx, xrows, cols); err != nil {
		return err
	}
	if p == 0 {
		return nil
	}
	d, err := f32Any(op, "dst", dst)
	if err != nil {
		return err
	}
	scale := keepScale(p)
	parFor(len(d), grainElem, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] *= dropAt(p, scale, seed, i)
		}
	})
	return nil
}

// BiasActDropout computes dst = Dropout(act((a + b) + bias)) in one pass,
// in the order Axpby, AddRowVector, Unary and Dropout compute it.
func (b *Backend) BiasActDropout(dst, a, bb, bias backend.Buffer, rows, cols int, relu bool, p float32, seed uint64) error {
	const op = "BiasActDropout"
	if err := backend.CheckDropoutRate(op, p); err != nil {
		return err
	}
	if isBF16(dst, a, bb) {
		return b.biasActDropoutBF16(dst, a, bb, bias, rows, cols, relu, p, seed)
	}
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	d, err := f32(op, "dst", dst, n)
	if err != nil {
		return err
	}
	av, err := f32(op, "a", a, n)
	if err != nil {
		return err
	}
	var bv []float32
	if bb != nil {
		if bv, err = f32(op, "b", bb, n); err != nil {
			return err
		}
	}
	biasv, err := f32(op, "bias", bias, cols)
	if err != nil {
		return err
	}
	scale := keepScale(p)
	parFor(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			for c := 0; c < cols; c++ {
				i := r*cols + c
				v := av[i]
				if bv != nil {
					v = 1*v + 1*bv[i] // Axpby's arithmetic
				}
				v = v + biasv[c]
				if relu {
					v = max(v, 0) // Unary(ReLU)
				}
				if p != 0 {
					v *= dropAt(p, scale, seed, i)
				}
				d[i] = v
			}
		}
	})
	return nil
}

// BiasActDropoutBackward writes dx through the dropout and activation and,
// when dbias is set, the bias gradient with SumRows' summation order.
func (b *Backend) BiasActDropoutBackward(dx, dbias, y, dy backend.Buffer, rows, cols int, relu bool, p float32, seed uint64, accumulate bool) error {
	const op = "BiasActDropoutBackward"
	if err := backend.CheckDropoutRate(op, p); err != nil {
		return err
	}
	if isBF16(dx, y, dy) {
		return b.biasActDropoutBackwardBF16(dx, dbias, y, dy, rows, cols, relu, p, seed, accumulate)
	}
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	d, err := f32(op, "dx", dx, n)
	if err != nil {
		return err
	}
	yv, err := f32(op, "y", y, n)
	if err != nil {
		return err
	}
	g, err := f32(op, "dy", dy, n)
	if err != nil {
		return err
	}
	var db []float32
	if dbias != nil {
		if db, err = f32(op, "dbias", dbias, cols); err != nil {
			return err
		}
	}
	scale := keepScale(p)
	parFor(n, grainElem, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			switch {
			case relu && yv[i] > 0:
				d[i] = g[i] * scale
			case relu:
				d[i] = 0
			default:
				d[i] = g[i] * dropAt(p, scale, seed, i)
			}
		}
	})
	if db == nil {
		return nil
	}
	return b.biasSums(dbias, dx, rows, cols, accumulate)
}
