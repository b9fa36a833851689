package autograd

import (
	"github.com/strata-gnn/strata/tensor/backend"
)

// Mul returns the elementwise product a ⊙ b (same shape): the Hadamard
// product that link-prediction decoders apply to the embeddings of an
// edge's two endpoints.
//
// Backward: da += dy ⊙ b, db += dy ⊙ a (a Var passed as both gets both).
func (t *Tape) Mul(a, b *Var) (*Var, error) {
	const op = "Mul"
	if err := t.check(op, a, b); err != nil {
		return nil, err
	}
	if a.Rows != b.Rows || a.Cols != b.Cols {
		return nil, errf(op, "shapes differ: %dx%d * %dx%d", a.Rows, a.Cols, b.Rows, b.Cols)
	}
	out, err := t.newVar(op, a.Rows, a.Cols, anyGrad(a, b))
	if err != nil {
		return nil, err
	}
	if err := t.b.Mul(out.Value, a.Value, b.Value); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error {
		if err := t.accumulate(op, a, func(dst backend.Buffer) error {
			return t.b.Mul(dst, out.Grad, b.Value)
		}); err != nil {
			return err
		}
		return t.accumulate(op, b, func(dst backend.Buffer) error {
			return t.b.Mul(dst, out.Grad, a.Value)
		})
	})
	return out, nil
}

// BCEWithLogits returns the mean binary cross-entropy of the n logits x
// (any shape of n elements) against labels y (an int32 buffer of n
// entries, each 0 or 1), as a 1x1 Var, and its value on the host:
//
//	loss = (1/n) sum_i [ softplus(x_i) - y_i x_i ]
//	     = -(1/n) sum_i [ y_i log σ(x_i) + (1-y_i) log(1-σ(x_i)) ]
//
// (torch.nn.functional.binary_cross_entropy_with_logits). It is the
// two-class cross-entropy of the logit pair [0, x_i]: log-softmax of that
// pair is [log(1-σ(x_i)), log σ(x_i)], computed stably (the row maximum is
// subtracted first), so it is built from MatMul, LogSoftmax and NLLLoss
// and runs on every back end with their kernels. A label outside {0, 1}
// is NLLLoss's index error.
//
// Backward: dx_i += g (σ(x_i) - y_i) / n, g the loss gradient.
func (t *Tape) BCEWithLogits(x *Var, labels backend.Buffer) (*Var, float64, error) {
	const op = "BCEWithLogits"
	if err := t.check(op, x); err != nil {
		return nil, 0, err
	}
	n := x.Len()
	if labels == nil || labels.DType() != backend.Int32 {
		return nil, 0, errf(op, "labels must be a non-nil int32 buffer")
	}
	if n == 0 || labels.Len() != n {
		return nil, 0, errf(op, "%d labels for %d logits (want the same non-zero number)", labels.Len(), n)
	}
	col, err := t.Reshape(x, n, 1)
	if err != nil {
		return nil, 0, err
	}
	sel, err := t.Upload([]float32{0, 1}, 1, 2)
	if err != nil {
		return nil, 0, err
	}
	pair, err := t.MatMul(col, sel) // n x 2: [0, x_i]
	if err != nil {
		return nil, 0, err
	}
	logp, err := t.LogSoftmax(pair)
	if err != nil {
		return nil, 0, err
	}
	rows := make([]int32, n)
	for i := range rows {
		rows[i] = int32(i)
	}
	rb, err := t.ownedInt32(op, rows)
	if err != nil {
		return nil, 0, err
	}
	return t.NLLLoss(logp, rb, labels)
}

// ownedInt32 uploads v into an int32 buffer the tape frees on Release.
func (t *Tape) ownedInt32(op string, v []int32) (backend.Buffer, error) {
	buf, err := t.b.Alloc(backend.Int32, len(v))
	if err != nil {
		return nil, wrap(op, err)
	}
	t.owned = append(t.owned, buf)
	if err := t.b.Upload(buf, v); err != nil {
		return nil, wrap(op, err)
	}
	return buf, nil
}
