package cpu

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Axpby computes dst = alpha*x + beta*y.
func (b *Backend) Axpby(dst backend.Buffer, alpha float32, x backend.Buffer, beta float32, y backend.Buffer) error {
	if isBF16(dst, x, y) {
		return b.axpbyBF16(dst, alpha, x, beta, y)
	}
	const op = "Axpby"
	d, err := f32Any(op, "dst", dst)
	if err != nil {
		return err
	}
	xv, err := f32(op, "x", x, len(d))
	if err != nil {
		return err
	}
	yv, err := f32(op, "y", y, len(d))
	if err != nil {
		return err
	}
	parFor(len(d), grainElem, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] = alpha*xv[i] + beta*yv[i]
		}
	})
	return nil
}

// Mul computes dst = x * y elementwise.
func (b *Backend) Mul(dst, x, y backend.Buffer) error {
	const op = "Mul"
	d, err := f32Any(op, "dst", dst)
	if err != nil {
		return err
	}
	xv, err := f32(op, "x", x, len(d))
	if err != nil {
		return err
	}
	yv, err := f32(op, "y", y, len(d))
	if err != nil {
		return err
	}
	parFor(len(d), grainElem, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] = xv[i] * yv[i]
		}
	})
	return nil
}

// AddRowVector computes dst[r,c] = x[r,c] + v[c].
func (b *Backend) AddRowVector(dst, x, v backend.Buffer, rows, cols int) error {
	const op = "AddRowVector"
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	d, err := f32(op, "dst", dst, n)
	if err != nil {
		return err
	}
	xv, err := f32(op, "x", x, n)
	if err != nil {
		return err
	}
	vv, err := f32(op, "v", v, cols)
	if err != nil {
		return err
	}
	parFor(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			dr, xr := d[r*cols:(r+1)*cols], xv[r*cols:(r+1)*cols]
			for c, vc := range vv {
				dr[c] = xr[c] + vc
			}
		}
	})
	return nil
}

func checkUnary(op string, u backend.UnaryOp) error {
	switch u {
	case backend.ReLU, backend.LeakyReLU, backend.ELU, backend.Exp, backend.Identity:
		return nil
	}
	return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("unknown unary op %v", u)}
}

func exp32(x float32) float32 { return float32(math.Exp(float64(x))) }

// Unary computes dst = op(x).
func (b *Backend) Unary(u backend.UnaryOp, alpha float32, dst, x backend.Buffer) error {
	const op = "Unary"
	if err := checkUnary(op, u); err != nil {
		return err
	}
	d, err := f32Any(op, "dst", dst)
	if err != nil {
		return err
	}
	xv, err := f32(op, "x", x, len(d))
	if err != nil {
		return err
	}
	parFor(len(d), grainElem, func(lo, hi int) {
		ds, xs := d[lo:hi], xv[lo:hi]
		switch u {
		case backend.ReLU:
			for i, v := range xs {
				ds[i] = max(v, 0)
			}
		case backend.LeakyReLU:
			for i, v := range xs {
				if v <= 0 {
					v *= alpha
				}
				ds[i] = v
			}
		case backend.ELU:
			for i, v := range xs {
				if v <= 0 {
					v = alpha * float32(math.Expm1(float64(v)))
				}
				ds[i] = v
			}
		case backend.Exp:
			for i, v := range xs {
				ds[i] = exp32(v)
			}
		case backend.Identity:
			copy(ds, xs)
		}
	})
	return nil
}

// UnaryBackward computes dx = dy * op'(x).
func (b *Backend) UnaryBackward(u backend.UnaryOp, alpha float32, dx, x, y, dy backend.Buffer) error {
	const op = "UnaryBackward"
	if err := checkUnary(op, u); err != nil {
		return err
	}
	d, err := f32Any(op, "dx", dx)
	if err != nil {
		return err
	}
	xv, err := f32(op, "x", x, len(d))
	if err != nil {
		return err
	}
	yv, err := f32(op, "y", y, len(d))
	if err != nil {
		return err
	}
	g, err := f32(op, "dy", dy, len(d))
	if err != nil {
		return err
	}
	parFor(len(d), grainElem, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			switch u {
			case backend.ReLU:
				if xv[i] > 0 {
					d[i] = g[i]
				} else {
					d[i] = 0
				}
			case backend.LeakyReLU:
				if xv[i] > 0 {
					d[i] = g[i]
				} else {
					d[i] = g[i] * alpha
				}
			case backend.ELU:
				if xv[i] > 0 {
					d[i] = g[i]
				} else {
					d[i] = g[i] * alpha * exp32(xv[i])
				}
			case backend.Exp:
				d[i] = g[i] * yv[i]
			case backend.Identity:
				d[i] = g[i]
			}
		}
	})
	return nil
}

// Dropout writes mask (keep/(1-p) or 0, from rng.DropUniform(seed, i)) and
// dst = x*mask.
func (b *Backend) Dropout(dst, mask, x backend.Buffer, p float32, seed uint64) error {
	const op = "Dropout"
	if err := backend.CheckDropoutRate(op, p); err != nil {
		return err
	}
	d, err := f32Any(op, "dst", dst)
	if err != nil {
		return err
	}
	mv, err := f32(op, "mask", mask, len(d))
	if err != nil {
		return err
	}
	xv, err := f32(op, "x", x, len(d))
	if err != nil {
		return err
	}
	keep := 1 / (1 - p)
	parFor(len(d), grainElem, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			m := float32(0)
			if rng.DropUniform(seed, uint64(i)) >= p {
				m = keep
			}
			mv[i] = m
			d[i] = xv[i] * m
		}
	})
	return nil
}

// AdamStep performs one Adam update in place (torch.optim.Adam semantics
// with L2 weight decay).
func (b *Backend) AdamStep(param, grad, m, v backend.Buffer, lr, beta1, beta2, eps, wd float32, t int) error {
	const op = "AdamStep"
	if !(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || t < 1 {
		return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("beta1 %v, beta2 %v, t %d: want betas in [0,1) and t >= 1", beta1, beta2, t)}
	}
	pv, err := f32Any(op, "param", param)
	if err != nil {
		return err
	}
	gv, err := f32(op, "grad", grad, len(pv))
	if err != nil {
		return err
	}
	mv, err := f32(op, "m", m, len(pv))
	if err != nil {
		return err
	}
	vv, err := f32(op, "v", v, len(pv))
	if err != nil {
		return err
	}
	bc1 := 1 - math.Pow(float64(beta1), float64(t))
	bc2 := 1 - math.Pow(float64(beta2), float64(t))
	// torch: param -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)
	step := float32(float64(lr) / bc1)
	rbc2 := float32(1 / math.Sqrt(bc2))
	parFor(len(pv), grainElem, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g := gv[i] + wd*pv[i]
			mi := beta1*mv[i] + (1-beta1)*g
			vi := beta2*vv[i] + (1-beta2)*g*g
			mv[i], vv[i] = mi, vi
			denom := float32(math.Sqrt(float64(vi)))*rbc2 + eps
			pv[i] -= step * mi / denom
		}
	})
	return nil
}
