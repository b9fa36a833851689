package fullgraph

import (
	"fmt"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Optional back-end methods the engine uses when a back end has them (the
// CUDA back end does): one pass over memory instead of two or three.
// Without them the same results come from the standard primitives.
type (
	biasActer interface {
		BiasAct(dst, a, b, bias backend.Buffer, rows, cols int, relu bool) error
	}
	reluMaskScaler interface {
		ReLUMaskScale(dst, dy, y backend.Buffer, scale float32) error
	}
)

// fusedOps computes a layer's output and the gradient through the
// previous layer's ReLU and this layer's dropout.
type fusedOps struct {
	b   backend.Backend // the metered back end, for the composed versions
	ba  biasActer
	rms reluMaskScaler
}

// newFusedOps looks for the optional methods on raw (the back end as the
// caller passed it; the meter hides them) and composes them on b
// otherwise.
func newFusedOps(raw, b backend.Backend) fusedOps {
	f := fusedOps{b: b}
	f.ba, _ = raw.(biasActer)
	f.rms, _ = raw.(reluMaskScaler)
	return f
}

// biasAct computes dst = act((a + b) + bias) for rows x cols matrices a
// and b (b may be nil) and a bias of cols; act is ReLU when relu is set.
// dst may alias a or b. The same arithmetic, in the same order, as nn's
// Add, AddBias and ReLU.
func (f fusedOps) biasAct(dst, a, b, bias backend.Buffer, rows, cols int, relu bool) error {
	if f.ba != nil {
		return f.ba.BiasAct(dst, a, b, bias, rows, cols, relu)
	}
	src := a
	if b != nil {
		if err := f.b.Axpby(dst, 1, a, 1, b); err != nil {
			return err
		}
		src = dst
	}
	if err := f.b.AddRowVector(dst, src, bias, rows, cols); err != nil {
		return err
	}
	if relu {
		return f.b.Unary(backend.ReLU, 0, dst, dst)
	}
	return nil
}

// reluMaskScale computes dst = y > 0 ? dy*scale : 0. With y a layer's
// dropped-out input (or its ReLU output without dropout) and scale the
// dropout's keep factor, this is the gradient of the previous layer's
// pre-activation: dy * mask * ReLU'(pre), since y > 0 exactly where the
// mask kept a positive ReLU output. dst may alias dy.
func (f fusedOps) reluMaskScale(dst, dy, y backend.Buffer, scale float32) error {
	if f.rms != nil {
		return f.rms.ReLUMaskScale(dst, dy, y, scale)
	}
	if err := f.b.UnaryBackward(backend.ReLU, 0, dst, y, y, dy); err != nil {
		return err
	}
	if scale == 1 {
		return nil
	}
	return f.b.Axpby(dst, scale, dst, 0, dst)
}

// view returns elements [off, off+n) of buf as a buffer of its back end
// without copying. It owns no memory: never free it.
func view(buf backend.Buffer, off, n int) (backend.Buffer, error) {
	if buf == nil {
		return nil, fmt.Errorf("fullgraph: view of a nil buffer")
	}
	if off < 0 || n < 0 || off+n > buf.Len() {
		return nil, fmt.Errorf("fullgraph: view [%d, %d) of a %d-element buffer", off, off+n, buf.Len())
	}
	v, err := backend.View(buf, off, n)
	if err != nil {
		return nil, fmt.Errorf("fullgraph: %w", err)
	}
	return v, nil
}
