package autograd

import (
	"github.com/strata-gnn/strata/tensor/backend"
)

// MatMul returns a*b for a (m x k) and b (k x n).
//
// When a or b is bfloat16 (an activation) the product reads both as
// bfloat16 (a float32 operand, a weight, through a copy made once per
// step) and its output is bfloat16; gradients have their Var's dtype
// (a float32 weight's accumulates in float32).
//
// Backward: da += dy b^T, db += a^T dy (Gemm with beta = 1 accumulates).
func (t *Tape) MatMul(a, b *Var) (*Var, error) {
	const op = "MatMul"
	if err := t.check(op, a, b); err != nil {
		return nil, err
	}
	if a.Cols != b.Rows {
		return nil, errf(op, "inner dimensions differ: %dx%d * %dx%d", a.Rows, a.Cols, b.Rows, b.Cols)
	}
	m, k, n := a.Rows, a.Cols, b.Cols
	av, bv, dt := a.Value, b.Value, backend.Float32
	if a.DType() == backend.BFloat16 || b.DType() == backend.BFloat16 {
		var err error
		if av, err = t.halfValue(op, a); err != nil {
			return nil, err
		}
		if bv, err = t.halfValue(op, b); err != nil {
			return nil, err
		}
		dt = backend.BFloat16
	}
	out, err := t.newVarT(op, dt, m, n, anyGrad(a, b))
	if err != nil {
		return nil, err
	}
	if m > 0 && n > 0 {
		if err := t.b.Gemm(false, false, m, n, k, 1, av, bv, 0, out.Value); err != nil {
			return nil, wrap(op, err)
		}
	}
	t.record(op, out, func() error {
		// With beta = 0 the Gemms overwrite: new gradients need no zeroing.
		if err := t.accumulateIntoZ(op, a, false, func(dst backend.Buffer, add bool) error {
			if m == 0 || k == 0 {
				return nil
			}
			return t.b.Gemm(false, true, m, k, n, 1, out.Grad, bv, beta(add), dst)
		}); err != nil {
			return err
		}
		return t.accumulateIntoZ(op, b, false, func(dst backend.Buffer, add bool) error {
			if k == 0 || n == 0 {
				return nil
			}
			return t.b.Gemm(true, false, k, n, m, 1, av, out.Grad, beta(add), dst)
		})
	})
	return out, nil
}

func beta(add bool) float32 {
	if add {
		return 1
	}
	return 0
}

// AddBias returns x + bias broadcast over rows; bias is 1 x x.Cols.
//
// Backward: dx += dy, dbias += column sums of dy.
func (t *Tape) AddBias(x, bias *Var) (*Var, error) {
	const op = "AddBias"
	if err := t.check(op, x, bias); err != nil {
		return nil, err
	}
	if bias.Len() != x.Cols {
		return nil, errf(op, "bias has %d elements, want %d (x is %dx%d)", bias.Len(), x.Cols, x.Rows, x.Cols)
	}
	out, err := t.newVar(op, x.Rows, x.Cols, anyGrad(x, bias))
	if err != nil {
		return nil, err
	}
	if err := t.b.AddRowVector(out.Value, x.Value, bias.Value, x.Rows, x.Cols); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error {
		// The bias sums first: x may take out's gradient buffer over.
		if err := t.accumulate(op, bias, func(dst backend.Buffer) error {
			return t.b.SumRows(dst, out.Grad, x.Rows, x.Cols)
		}); err != nil {
			return err
		}
		return t.takeGrad(op, x, out.Grad, false)
	})
	return out, nil
}

// Add returns a + b (same shape).
func (t *Tape) Add(a, b *Var) (*Var, error) {
	const op = "Add"
	if err := t.check(op, a, b); err != nil {
		return nil, err
	}
	if a.Rows != b.Rows || a.Cols != b.Cols {
		return nil, errf(op, "shapes differ: %dx%d + %dx%d", a.Rows, a.Cols, b.Rows, b.Cols)
	}
	out, err := t.newVar(op, a.Rows, a.Cols, anyGrad(a, b))
	if err != nil {
		return nil, err
	}
	if err := t.b.Axpby(out.Value, 1, a.Value, 1, b.Value); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error {
		if err := t.takeGrad(op, a, out.Grad, b.RequiresGrad); err != nil {
			return err
		}
		return t.takeGrad(op, b, out.Grad, a.RequiresGrad && a.Grad == out.Grad)
	})
	return out, nil
}

// Scale returns alpha * x.
func (t *Tape) Scale(x *Var, alpha float32) (*Var, error) {
	const op = "Scale"
	if err := t.check(op, x); err != nil {
		return nil, err
	}
	out, err := t.newVar(op, x.Rows, x.Cols, x.RequiresGrad)
	if err != nil {
		return nil, err
	}
	if err := t.b.Axpby(out.Value, alpha, x.Value, 0, x.Value); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error { return t.addScaled(op, x, alpha, out.Grad) })
	return out, nil
}

// Reshape returns x viewed as rows x cols (same number of elements). The
// value buffer is shared, not copied.
func (t *Tape) Reshape(x *Var, rows, cols int) (*Var, error) {
	const op = "Reshape"
	if err := t.check(op, x); err != nil {
		return nil, err
	}
	if rows < 0 || cols < 0 || rows*cols != x.Len() {
		return nil, errf(op, "cannot view %dx%d as %dx%d", x.Rows, x.Cols, rows, cols)
	}
	out := t.register(&Var{Value: x.Value, Rows: rows, Cols: cols, RequiresGrad: x.RequiresGrad})
	t.record(op, out, func() error { return t.addScaled(op, x, 1, out.Grad) })
	return out, nil
}

// Activation returns op(x) elementwise with parameter alpha (the negative
// slope of LeakyReLU, the alpha of ELU).
//
// Backward: dx += dy * op'(x) (backend.UnaryBackward).
func (t *Tape) Activation(fn backend.UnaryOp, alpha float32, x *Var) (*Var, error) {
	op := "Activation(" + fn.String() + ")"
	if err := t.check(op, x); err != nil {
		return nil, err
	}
	out, err := t.newVar(op, x.Rows, x.Cols, x.RequiresGrad)
	if err != nil {
		return nil, err
	}
	if err := t.b.Unary(fn, alpha, out.Value, x.Value); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error {
		return t.accumulate(op, x, func(dst backend.Buffer) error {
			return t.b.UnaryBackward(fn, alpha, dst, x.Value, out.Value, out.Grad)
		})
	})
	return out, nil
}

// ReLU returns max(x, 0).
func (t *Tape) ReLU(x *Var) (*Var, error) { return t.Activation(backend.ReLU, 0, x) }

// LeakyReLU returns x for x > 0 and slope*x otherwise.
func (t *Tape) LeakyReLU(x *Var, slope float32) (*Var, error) {
	return t.Activation(backend.LeakyReLU, slope, x)
}

// ELU returns x for x > 0 and alpha*(exp(x)-1) otherwise.
func (t *Tape) ELU(x *Var, alpha float32) (*Var, error) { return t.Activation(backend.ELU, alpha, x) }

// Dropout zeroes each element with probability p and scales the others by
// 1/(1-p) (inverted dropout). The mask is a pure function of seed and the
// element index (backend.Dropout), so it is reproducible on any back end.
// p == 0 returns x itself; p must be in [0, 1).
//
// Backward: dx += dy * mask.
func (t *Tape) Dropout(x *Var, p float32, seed uint64) (*Var, error) {
	const op = "Dropout"
	if err := t.check(op, x); err != nil {
		return nil, err
	}
	if !(p >= 0 && p < 1) {
		return nil, errf(op, "p = %v, want 0 <= p < 1", p)
	}
	if p == 0 {
		return x, nil
	}
	if d := x.dropped; d != nil && d.p == p && d.seed == seed && !x.RequiresGrad {
		return x, nil // dropped out while gathered (ConstDropped)
	}
	if x.DType() != backend.Float32 {
		return nil, errf(op, "a %s input: dropout of bfloat16 activations is fused (BiasActDropout, GatherConstDropped, ConstDropped)", x.DType())
	}
	out, err := t.newVar(op, x.Rows, x.Cols, x.RequiresGrad)
	if err != nil {
		return nil, err
	}
	mask, err := t.allocOut(op, x.Len()) // Dropout writes every mask element
	if err != nil {
		return nil, err
	}
	if err := t.b.Dropout(out.Value, mask, x.Value, p, seed); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error {
		return t.accumulate(op, x, func(dst backend.Buffer) error {
			return t.b.Mul(dst, out.Grad, mask)
		})
	})
	return out, nil
}

// GatherRows returns the rows of x listed in idx (an int32 buffer of any
// length, entries in [0, x.Rows)): out[i,:] = x[idx[i],:].
//
// Backward: dx[idx[i],:] += dy[i,:] (backend.ScatterAddRows).
func (t *Tape) GatherRows(x *Var, idx backend.Buffer) (*Var, error) {
	const op = "GatherRows"
	if err := t.check(op, x); err != nil {
		return nil, err
	}
	if idx == nil || idx.DType() != backend.Int32 {
		return nil, errf(op, "idx must be a non-nil int32 buffer")
	}
	n := idx.Len()
	out, err := t.newVar(op, n, x.Cols, x.RequiresGrad)
	if err != nil {
		return nil, err
	}
	if err := t.b.GatherRows(out.Value, x.Value, idx, x.Rows, x.Cols); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error {
		return t.accumulateInto(op, x, func(dst backend.Buffer, _ bool) error {
			return t.b.ScatterAddRows(dst, out.Grad, idx, x.Rows, x.Cols)
		})
	})
	return out, nil
}

// FirstRows returns the first n rows of x as a view of x's memory, with
// no copy: a sampled block lists its destination nodes first among its
// sources, so a layer's destination rows are this prefix. x itself when n
// is all of its rows.
//
// Backward: the first n rows of dx += dy; the other rows get nothing.
func (t *Tape) FirstRows(x *Var, n int) (*Var, error) {
	const op = "FirstRows"
	if err := t.check(op, x); err != nil {
		return nil, err
	}
	if n < 0 || n > x.Rows {
		return nil, errf(op, "the first %d rows of a %dx%d matrix", n, x.Rows, x.Cols)
	}
	if n == x.Rows {
		return x, nil
	}
	val, err := backend.View(x.Value, 0, n*x.Cols)
	if err != nil {
		return nil, wrap(op, err)
	}
	out := t.register(&Var{Value: val, Rows: n, Cols: x.Cols, RequiresGrad: x.RequiresGrad})
	t.record(op, out, func() error {
		return t.accumulateInto(op, x, func(dst backend.Buffer, add bool) error {
			head, err := backend.View(dst, 0, n*x.Cols)
			if err != nil {
				return err
			}
			if add {
				return t.b.Axpby(head, 1, out.Grad, 1, head)
			}
			return t.b.Copy(head, out.Grad)
		})
	})
	return out, nil
}

// StackRows returns a's rows, then b's (same width): [W_self; W_neigh]
// for AggregateConcat's one product. value, when not nil, already holds
// them (a view of a flat parameter buffer where a's values lie just
// before b's): it is the output's value, with no copy, and keeps its
// identity across steps (ShareHalf's bfloat16 copy of it applies);
// otherwise they are copied.
//
// Backward: da += the first a.Rows rows of dy, db += the others.
func (t *Tape) StackRows(a, b *Var, value backend.Buffer) (*Var, error) {
	const op = "StackRows"
	if err := t.check(op, a, b); err != nil {
		return nil, err
	}
	if a.Cols != b.Cols || a.DType() != b.DType() {
		return nil, errf(op, "%dx%d %s on %dx%d %s: want one width and dtype", a.Rows, a.Cols, a.DType(), b.Rows, b.Cols, b.DType())
	}
	rows, na := a.Rows+b.Rows, a.Len()
	var out *Var
	if value != nil {
		if err := backend.CheckLen(op, "value", value, a.DType(), rows*a.Cols); err != nil {
			return nil, err
		}
		out = t.register(&Var{Value: value, Rows: rows, Cols: a.Cols, RequiresGrad: anyGrad(a, b)})
	} else {
		var err error
		if out, err = t.newVarT(op, a.DType(), rows, a.Cols, anyGrad(a, b)); err != nil {
			return nil, err
		}
		head, err := backend.View(out.Value, 0, na)
		if err != nil {
			return nil, wrap(op, err)
		}
		tail, err := backend.View(out.Value, na, b.Len())
		if err != nil {
			return nil, wrap(op, err)
		}
		if err := t.b.Copy(head, a.Value); err != nil {
			return nil, wrap(op, err)
		}
		if err := t.b.Copy(tail, b.Value); err != nil {
			return nil, wrap(op, err)
		}
	}
	t.record(op, out, func() error {
		head, err := backend.View(out.Grad, 0, na)
		if err != nil {
			return wrap(op, err)
		}
		tail, err := backend.View(out.Grad, na, b.Len())
		if err != nil {
			return wrap(op, err)
		}
		if err := t.takeGrad(op, a, head, true); err != nil {
			return err
		}
		return t.takeGrad(op, b, tail, true)
	})
	return out, nil
}

// LogSoftmax returns the row-wise log-softmax of x.
//
// Backward: dx += dy - exp(y) * rowsum(dy).
func (t *Tape) LogSoftmax(x *Var) (*Var, error) {
	const op = "LogSoftmax"
	if err := t.check(op, x); err != nil {
		return nil, err
	}
	if x.Cols == 0 {
		return nil, errf(op, "x has no columns")
	}
	out, err := t.newVar(op, x.Rows, x.Cols, x.RequiresGrad)
	if err != nil {
		return nil, err
	}
	if err := t.b.LogSoftmax(out.Value, x.Value, x.Rows, x.Cols); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error {
		return t.accumulate(op, x, func(dst backend.Buffer) error {
			return t.b.LogSoftmaxBackward(dst, out.Value, out.Grad, x.Rows, x.Cols)
		})
	})
	return out, nil
}

// NLLLoss returns the mean negative log-likelihood
// -(1/n) sum_i logp[rows[i], labels[i]] as a 1x1 Var, and its value on the
// host. rows and labels are int32 buffers of equal, non-zero length n.
//
// Backward: dlogp[rows[i], labels[i]] += -g/n where g is the loss gradient.
func (t *Tape) NLLLoss(logp *Var, rows, labels backend.Buffer) (*Var, float64, error) {
	const op = "NLLLoss"
	if err := t.check(op, logp); err != nil {
		return nil, 0, err
	}
	if rows == nil || labels == nil || rows.DType() != backend.Int32 || labels.DType() != backend.Int32 {
		return nil, 0, errf(op, "rows and labels must be non-nil int32 buffers")
	}
	if rows.Len() != labels.Len() || rows.Len() == 0 {
		return nil, 0, errf(op, "rows (%d) and labels (%d) must have the same non-zero length", rows.Len(), labels.Len())
	}
	loss, err := t.b.NLLLoss(logp.Value, rows, labels, logp.Rows, logp.Cols)
	if err != nil {
		return nil, 0, wrap(op, err)
	}
	out, err := t.newVar(op, 1, 1, logp.RequiresGrad)
	if err != nil {
		return nil, 0, err
	}
	if err := t.b.Fill(out.Value, float32(loss)); err != nil {
		return nil, 0, wrap(op, err)
	}
	t.record(op, out, func() error {
		g := []float32{0}
		if err := t.b.Download(g, out.Grad); err != nil {
			return wrap(op, err)
		}
		if !logp.RequiresGrad {
			return nil
		}
		// NLLLossBackward overwrites, so it always goes through accumulate.
		return t.accumulate(op, logp, func(dst backend.Buffer) error {
			return t.b.NLLLossBackward(dst, rows, labels, logp.Rows, logp.Cols, g[0])
		})
	})
	return out, loss, nil
}

// ConstDropped wraps a caller-owned buffer as a constant whose values
// already had Dropout(p, seed) applied (a feature gather that dropped
// them out, backend.Fused.GatherRowsDropout): Dropout with the same p and
// seed on it returns it unchanged instead of dropping twice.
func (t *Tape) ConstDropped(value backend.Buffer, rows, cols int, p float32, seed uint64) (*Var, error) {
	v, err := t.Const(value, rows, cols)
	if err != nil {
		return nil, err
	}
	if p != 0 {
		v.dropped = &dropMark{p: p, seed: seed}
	}
	return v, nil
}

// BiasActDropout returns Dropout(act((a + b) + bias), p, seed), with act
// ReLU when relu is set and the identity otherwise; b may be nil and
// p == 0 is no dropout. It is Add, AddBias, ReLU and Dropout in one op:
// on back ends with backend.Fused one forward pass and no mask, and a
// backward of one or two passes (the mask is regenerated from the seed,
// the ReLU gradient read from the output) whose result is handed to a
// and b without copies when they have no other use. The output has the
// tape's activation dtype (SetActivations).
func (t *Tape) BiasActDropout(a, b, bias *Var, relu bool, p float32, seed uint64) (*Var, error) {
	return t.BiasActDropoutAs(t.Activations(), a, b, bias, relu, p, seed)
}

// BiasActDropoutAs is BiasActDropout writing dtype dt: a model's last
// layer writes its logits as float32 whatever the activations' dtype.
func (t *Tape) BiasActDropoutAs(dt backend.DType, a, b, bias *Var, relu bool, p float32, seed uint64) (*Var, error) {
	const op = "BiasActDropout"
	ins := []*Var{a, bias}
	if b != nil {
		ins = append(ins, b)
	}
	if err := t.check(op, ins...); err != nil {
		return nil, err
	}
	if !(p >= 0 && p < 1) {
		return nil, errf(op, "p = %v, want 0 <= p < 1", p)
	}
	if b != nil && (b.Rows != a.Rows || b.Cols != a.Cols) {
		return nil, errf(op, "shapes differ: %dx%d + %dx%d", a.Rows, a.Cols, b.Rows, b.Cols)
	}
	if bias.Len() != a.Cols {
		return nil, errf(op, "bias has %d elements, want %d (a is %dx%d)", bias.Len(), a.Cols, a.Rows, a.Cols)
	}
	if b != nil && b.DType() != a.DType() {
		return nil, errf(op, "a is %s but b is %s", a.DType(), b.DType())
	}
	if dt != backend.Float32 && dt != backend.BFloat16 {
		return nil, errf(op, "output dtype %s", dt)
	}
	f, ok := t.b.(backend.Fused)
	if !ok {
		if dt != backend.Float32 || a.DType() != backend.Float32 {
			return nil, errf(op, "bfloat16 activations need a back end with backend.Fused")
		}
		return t.biasActDropoutUnfused(a, b, bias, relu, p, seed)
	}
	rows, cols := a.Rows, a.Cols
	out, err := t.newVarT(op, dt, rows, cols, anyGrad(a, b, bias))
	if err != nil {
		return nil, err
	}
	var bv backend.Buffer
	if b != nil {
		bv = b.Value
	}
	if err := f.BiasActDropout(out.Value, a.Value, bv, bias.Value, rows, cols, relu, p, seed); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error {
		// The gradient of the pre-activation, in place over out's
		// gradient (which nothing reads after this op) unless that
		// buffer is shared or of another dtype than a's.
		g := out.Grad
		if out.gradShared || a.DType() != out.DType() {
			var err error
			if g, err = t.allocOutT(op, a.DType(), out.Len()); err != nil {
				return err
			}
		}
		var dbias backend.Buffer
		accumulate := true
		if bias.RequiresGrad {
			if bias.Grad == nil {
				buf, err := t.allocOut(op, bias.Len())
				if err != nil {
					return err
				}
				bias.Grad, accumulate = buf, false
			}
			dbias = bias.Grad
		}
		if err := f.BiasActDropoutBackward(g, dbias, out.Value, out.Grad, rows, cols, relu, p, seed, accumulate); err != nil {
			return wrap(op, err)
		}
		if err := t.takeGrad(op, a, g, b != nil && b.RequiresGrad); err != nil {
			return err
		}
		if b == nil {
			return nil
		}
		shared := a.RequiresGrad && a.Grad == g
		return t.takeGrad(op, b, g, shared)
	})
	return out, nil
}

// biasActDropoutUnfused is BiasActDropout from the plain ops.
func (t *Tape) biasActDropoutUnfused(a, b, bias *Var, relu bool, p float32, seed uint64) (*Var, error) {
	h := a
	var err error
	if b != nil {
		if h, err = t.Add(a, b); err != nil {
			return nil, err
		}
	}
	if h, err = t.AddBias(h, bias); err != nil {
		return nil, err
	}
	if relu {
		if h, err = t.ReLU(h); err != nil {
			return nil, err
		}
	}
	return t.Dropout(h, p, seed)
}
