package autograd

import "github.com/strata-gnn/strata/tensor/backend"

// Constants read from bfloat16 storage (backend.BFloat16): trainers at
// bf16 keep their input features as bfloat16 on the device and widen
// what a step reads into a float32 Var the tape owns.

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

// GatherConst returns a constant Var of len(idx) x cols whose row i is
// row idx[i] of x (xrows x cols, BFloat16 or Float32), widened to
// float32: a batch's input features gathered from a feature table,
// reading half the bytes when the table is bfloat16.
func (t *Tape) GatherConst(x backend.Buffer, xrows, cols int, idx backend.Buffer) (*Var, error) {
	const op = "GatherConst"
	if err := t.check(op); err != nil {
		return nil, err
	}
	if idx == nil {
		return nil, errf(op, "nil index buffer")
	}
	out, err := t.newVar(op, idx.Len(), cols, false)
	if err != nil {
		return nil, err
	}
	return out, wrap(op, t.b.GatherRows(out.Value, x, idx, xrows, cols))
}
