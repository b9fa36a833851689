package autograd

import "github.com/strata-gnn/strata/tensor/backend"

// Constants read from bfloat16 storage (backend.BFloat16): trainers at
// bf16 keep their input features as bfloat16 on the device, and with
// bfloat16 activations (SetActivations) keep them so.

// SetActivations sets the dtype of the activations the tape's ops write
// (MatMul and SpMM of a bfloat16 input, BiasActDropout, GatherConst,
// ToActivations): backend.Float32 (the default) or backend.BFloat16.
// BFloat16 takes effect only on back ends that report
// backend.BF16Activations and have backend.Fused (the chain a model
// writes through BiasActDropout); it reports whether the tape now writes
// bfloat16. Parameters, their gradients and logits stay float32.
// Release keeps the setting.
func (t *Tape) SetActivations(dt backend.DType) bool {
	if dt != backend.BFloat16 {
		t.act = 0
		return false
	}
	_, fused := t.b.(backend.Fused)
	if !fused || !backend.HasBF16Activations(t.b) {
		t.act = 0
		return false
	}
	t.act = backend.BFloat16
	return true
}

// Activations returns the dtype of the activations the tape writes.
func (t *Tape) Activations() backend.DType {
	if t.act == 0 {
		return backend.Float32
	}
	return t.act
}

// Widen returns a constant Var of rows x cols holding x (a BFloat16 or
// Float32 buffer of rows*cols elements) as float32, owned by the tape.
func (t *Tape) Widen(x backend.Buffer, rows, cols int) (*Var, error) {
	const op = "Widen"
	if err := t.check(op); err != nil {
		return nil, err
	}
	out, err := t.newVar(op, rows, cols, false)
	if err != nil {
		return nil, err
	}
	return out, wrap(op, t.b.Convert(out.Value, x))
}

// ToActivations returns the constant x in the tape's activation dtype:
// x itself when it has it, else a converted copy owned by the tape that
// keeps x's input-dropout mark (ConstDropped). x must not need a
// gradient.
func (t *Tape) ToActivations(x *Var) (*Var, error) {
	const op = "ToActivations"
	if err := t.check(op, x); err != nil {
		return nil, err
	}
	dt := t.Activations()
	if x.DType() == dt {
		return x, nil
	}
	if x.RequiresGrad {
		return nil, errf(op, "a %dx%d Var that needs a gradient", x.Rows, x.Cols)
	}
	out, err := t.newVarT(op, dt, x.Rows, x.Cols, false)
	if err != nil {
		return nil, err
	}
	out.dropped = x.dropped
	return out, wrap(op, t.b.Convert(out.Value, x.Value))
}

// halfValue returns v's value as bfloat16: itself, or a copy made once
// per step (a float32 weight read by products with bfloat16
// activations; Release drops the copies).
func (t *Tape) halfValue(op string, v *Var) (backend.Buffer, error) {
	if v.DType() == backend.BFloat16 {
		return v.Value, nil
	}
	if h, ok := t.half[v.Value]; ok {
		return h, nil
	}
	h, err := t.allocOutT(op, backend.BFloat16, v.Len())
	if err != nil {
		return nil, err
	}
	if err := t.b.Convert(h, v.Value); err != nil {
		return nil, wrap(op, err)
	}
	if t.half == nil {
		t.half = map[backend.Buffer]backend.Buffer{}
	}
	t.half[v.Value] = h
	return h, nil
}

// ShareHalf makes half the bfloat16 copy of value (a float32 weight's
// buffer) that products with bfloat16 activations read until Release,
// in place of the copy halfValue would make: a trainer converts all its
// weights at once (one Convert of its flat parameter buffer into a
// bfloat16 shadow) and shares the shadow's views. half must hold value's
// values rounded by backend.Convert, of value's length, and stay
// unchanged until Release, which forgets it.
func (t *Tape) ShareHalf(value, half backend.Buffer) error {
	const op = "ShareHalf"
	if err := t.check(op); err != nil {
		return err
	}
	switch {
	case value == nil || half == nil:
		return errf(op, "nil buffer")
	case value.DType() != backend.Float32 || half.DType() != backend.BFloat16:
		return errf(op, "value is %s and half %s, want float32 and bfloat16", value.DType(), half.DType())
	case value.Len() != half.Len():
		return errf(op, "value has %d elements and half %d", value.Len(), half.Len())
	}
	if t.half == nil {
		t.half = map[backend.Buffer]backend.Buffer{}
	}
	t.half[value] = half
	return nil
}

// GatherConst returns a constant Var of len(idx) x cols whose row i is
// row idx[i] of x (xrows x cols, BFloat16 or Float32) in the tape's
// activation dtype: a batch's input features gathered from a feature
// table, reading half the bytes when the table is bfloat16 (and writing
// half with bfloat16 activations).
func (t *Tape) GatherConst(x backend.Buffer, xrows, cols int, idx backend.Buffer) (*Var, error) {
	return t.GatherConstDropped(x, xrows, cols, idx, 0, 0)
}

// GatherConstDropped is GatherConst with Dropout(p, seed) applied while
// the rows are gathered (backend.Fused.GatherRowsDropout), marked as
// ConstDropped marks its value: the model's input dropout with that p
// and seed is not applied again. Back ends without Fused gather and then
// drop out.
func (t *Tape) GatherConstDropped(x backend.Buffer, xrows, cols int, idx backend.Buffer, p float32, seed uint64) (*Var, error) {
	const op = "GatherConst"
	if err := t.check(op); err != nil {
		return nil, err
	}
	if idx == nil {
		return nil, errf(op, "nil index buffer")
	}
	if !(p >= 0 && p < 1) {
		return nil, errf(op, "p = %v, want 0 <= p < 1", p)
	}
	out, err := t.newVarT(op, t.Activations(), idx.Len(), cols, false)
	if err != nil {
		return nil, err
	}
	if p == 0 {
		return out, wrap(op, t.b.GatherRows(out.Value, x, idx, xrows, cols))
	}
	f, ok := t.b.(backend.Fused)
	if !ok {
		if err := t.b.GatherRows(out.Value, x, idx, xrows, cols); err != nil {
			return nil, wrap(op, err)
		}
		return t.Dropout(out, p, seed)
	}
	if err := f.GatherRowsDropout(out.Value, x, idx, xrows, cols, p, seed); err != nil {
		return nil, wrap(op, err)
	}
	out.dropped = &dropMark{p: p, seed: seed}
	return out, nil
}
