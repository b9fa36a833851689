package autograd

import (
	"errors"
	"fmt"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Var is a float32 (or, for activations on a tape with bfloat16
// activations, backend.BFloat16) matrix of Rows x Cols on the tape's back
// end, with its gradient, of the same dtype. Grad is nil until a gradient
// flows into it during Backward.
//
// Vars made by ops own their buffers through the tape: after Tape.Release
// their Value and Grad must not be used.
type Var struct {
	Value        backend.Buffer
	Grad         backend.Buffer
	Rows, Cols   int
	RequiresGrad bool

	tape *Tape
	// gradExternal marks a leaf whose Grad buffer belongs to the caller
	// (a parameter): it is never freed and always accumulated into.
	gradExternal bool
	// uses counts the ops that took the Var as an input; a Var used once
	// may take over its consumer's gradient buffer (takeGrad).
	uses int
	// gradShared marks a Grad buffer that another live Var's Grad
	// aliases: it is read, never written in place.
	gradShared bool
	// dropped records the input dropout already applied to a constant's
	// value (Tape.ConstDropped), which Dropout then does not repeat.
	dropped *dropMark
}

// dropMark is a dropout rate and seed.
type dropMark struct {
	p    float32
	seed uint64
}

// Len returns Rows*Cols.
func (v *Var) Len() int { return v.Rows * v.Cols }

// DType is the dtype of v's value and gradient: backend.Float32 or
// backend.BFloat16.
func (v *Var) DType() backend.DType {
	if v.Value == nil {
		return backend.Float32
	}
	return v.Value.DType()
}

// Error is a shape or usage error of an autograd op.
type Error struct {
	Op  string
	Msg string
}

func (e *Error) Error() string { return "autograd: " + e.Op + ": " + e.Msg }

func errf(op, format string, args ...any) error {
	return &Error{Op: op, Msg: fmt.Sprintf(format, args...)}
}

// wrap prefixes a back-end error with the autograd op that called it.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("autograd: %s: %w", op, err)
}

// ErrReleased is returned when a Var from a released tape is used.
var ErrReleased = errors.New("autograd: var belongs to a released or different tape")

type record struct {
	name     string
	out      *Var
	backward func() error
}

// Tape records ops in execution order and runs their backward closures in
// reverse. A Tape is not safe for concurrent use. After Release it is empty
// and may be reused for the next step.
type Tape struct {
	b     backend.Backend
	ops   []record
	owned []backend.Buffer
	gen   uint64 // bumped by Release so stale Vars are detected
	vars  map[*Var]uint64
	// act is the dtype of the activations the ops write
	// (SetActivations): 0 for float32.
	act backend.DType
	// half maps a float32 value (a weight) to its bfloat16 copy, made
	// once per step for products with bfloat16 activations.
	half map[backend.Buffer]backend.Buffer
}

// NewTape returns an empty tape recording ops on back end b.
func NewTape(b backend.Backend) *Tape {
	return &Tape{b: b, vars: map[*Var]uint64{}}
}

// Backend returns the tape's back end.
func (t *Tape) Backend() backend.Backend { return t.b }

// Len returns the number of recorded ops.
func (t *Tape) Len() int { return len(t.ops) }

// Release frees every buffer the tape allocated (op outputs, gradients of
// non-parameter Vars, dropout masks, temporaries) and clears the tape.
// Buffers passed in by the caller (Leaf values, parameter gradients) are not
// freed. Vars made before Release must not be used afterwards.
func (t *Tape) Release() {
	if t == nil || t.b == nil {
		return
	}
	for i := len(t.owned) - 1; i >= 0; i-- {
		t.b.Free(t.owned[i])
	}
	t.owned = t.owned[:0]
	t.ops = t.ops[:0]
	clear(t.vars)
	clear(t.half)
	t.gen++
}

// alloc returns a zeroed float32 buffer of n elements owned by the tape.
func (t *Tape) alloc(op string, n int) (backend.Buffer, error) {
	if n < 0 {
		return nil, errf(op, "negative size %d", n)
	}
	buf, err := t.b.Alloc(backend.Float32, n)
	if err != nil {
		return nil, wrap(op, err)
	}
	t.owned = append(t.owned, buf)
	return buf, nil
}

// rawAllocator is implemented by back ends that can hand out a buffer
// without zero-filling it (the CUDA back end, where the fill is a device
// memset per buffer). The tape uses it for buffers that the op filling
// them overwrites completely: op outputs, dropout masks, gradients and
// temporaries computed by overwriting primitives.
type rawAllocator interface {
	AllocRaw(dt backend.DType, n int) (backend.Buffer, error)
}

func (t *Tape) allocFloats(dt backend.DType, n int) (backend.Buffer, error) {
	if ra, ok := t.b.(rawAllocator); ok {
		return ra.AllocRaw(dt, n)
	}
	return t.b.Alloc(dt, n)
}

// allocOut is alloc for a buffer that is overwritten completely before
// it is read (contents undefined until then).
func (t *Tape) allocOut(op string, n int) (backend.Buffer, error) {
	return t.allocOutT(op, backend.Float32, n)
}

// allocOutT is allocOut of dtype dt.
func (t *Tape) allocOutT(op string, dt backend.DType, n int) (backend.Buffer, error) {
	if n < 0 {
		return nil, errf(op, "negative size %d", n)
	}
	buf, err := t.allocFloats(dt, n)
	if err != nil {
		return nil, wrap(op, err)
	}
	t.owned = append(t.owned, buf)
	return buf, nil
}

// allocZero is alloc (zero-filled, owned by the tape) of dtype dt.
func (t *Tape) allocZero(op string, dt backend.DType, n int) (backend.Buffer, error) {
	if n < 0 {
		return nil, errf(op, "negative size %d", n)
	}
	buf, err := t.b.Alloc(dt, n)
	if err != nil {
		return nil, wrap(op, err)
	}
	t.owned = append(t.owned, buf)
	return buf, nil
}

// temp returns a buffer of dtype dt the caller frees itself with
// t.b.Free (temporaries of a backward step, released at once to keep
// peak memory low); its contents are undefined: callers overwrite it.
func (t *Tape) temp(op string, dt backend.DType, n int) (backend.Buffer, error) {
	buf, err := t.allocFloats(dt, n)
	if err != nil {
		return nil, wrap(op, err)
	}
	return buf, nil
}

func (t *Tape) register(v *Var) *Var {
	v.tape = t
	t.vars[v] = t.gen
	return v
}

// check verifies that v is a live Var of this tape.
func (t *Tape) check(op string, vs ...*Var) error {
	if t == nil || t.b == nil {
		return errf(op, "nil tape")
	}
	for _, v := range vs {
		if v == nil {
			return errf(op, "nil input")
		}
		if v.tape != t {
			return fmt.Errorf("autograd: %s: %w", op, ErrReleased)
		}
		if g, ok := t.vars[v]; !ok || g != t.gen {
			return fmt.Errorf("autograd: %s: %w", op, ErrReleased)
		}
	}
	for _, v := range vs {
		v.uses++
	}
	return nil
}

// takeGrad makes g, a gradient buffer of the tape that its owner no
// longer needs, v's gradient: dv += g without a pass over memory when v
// has no gradient yet and no other op uses v (nobody else will add to
// it), else an Axpby. shared marks g as also being another Var's Grad.
func (t *Tape) takeGrad(op string, v *Var, g backend.Buffer, shared bool) error {
	if !v.RequiresGrad {
		return nil
	}
	if v.Grad == nil && !v.gradExternal && v.uses == 1 {
		v.Grad, v.gradShared = g, shared
		return nil
	}
	return t.addScaled(op, v, 1, g)
}

// newVar allocates a float32 output Var of rows x cols.
func (t *Tape) newVar(op string, rows, cols int, requiresGrad bool) (*Var, error) {
	return t.newVarT(op, backend.Float32, rows, cols, requiresGrad)
}

// newVarT is newVar of dtype dt.
func (t *Tape) newVarT(op string, dt backend.DType, rows, cols int, requiresGrad bool) (*Var, error) {
	if rows < 0 || cols < 0 {
		return nil, errf(op, "negative shape %dx%d", rows, cols)
	}
	buf, err := t.allocOutT(op, dt, rows*cols) // every op overwrites its output
	if err != nil {
		return nil, err
	}
	return t.register(&Var{Value: buf, Rows: rows, Cols: cols, RequiresGrad: requiresGrad}), nil
}

// record appends an op's backward closure when its output needs a gradient.
func (t *Tape) record(name string, out *Var, backward func() error) {
	if out.RequiresGrad {
		t.ops = append(t.ops, record{name: name, out: out, backward: backward})
	}
}

// Leaf wraps caller-owned buffers as a Var. With grad == nil the Var is a
// constant (no gradient). With a grad buffer (a parameter's), Backward
// accumulates into it; it is never freed or zeroed by the tape.
func (t *Tape) Leaf(value, grad backend.Buffer, rows, cols int) (*Var, error) {
	const op = "Leaf"
	if err := t.check(op); err != nil {
		return nil, err
	}
	if rows < 0 || cols < 0 {
		return nil, errf(op, "negative shape %dx%d", rows, cols)
	}
	dt := backend.Float32
	if value != nil && value.DType() == backend.BFloat16 && grad == nil {
		dt = backend.BFloat16 // a constant stored as bfloat16 (activations)
	}
	if err := backend.CheckLen(op, "value", value, dt, rows*cols); err != nil {
		return nil, err
	}
	v := &Var{Value: value, Rows: rows, Cols: cols}
	if grad != nil {
		if err := backend.CheckLen(op, "grad", grad, backend.Float32, rows*cols); err != nil {
			return nil, err
		}
		v.Grad, v.RequiresGrad, v.gradExternal = grad, true, true
	}
	return t.register(v), nil
}

// Const wraps a caller-owned buffer as a constant Var (no gradient).
func (t *Tape) Const(value backend.Buffer, rows, cols int) (*Var, error) {
	return t.Leaf(value, nil, rows, cols)
}

// Backward computes d(loss)/d(v) for every Var on the tape that requires a
// gradient. loss must be a 1x1 Var of this tape. Gradients of parameters
// accumulate into their buffers.
func (t *Tape) Backward(loss *Var) error {
	const op = "Backward"
	if err := t.check(op, loss); err != nil {
		return err
	}
	if loss.Len() != 1 {
		return errf(op, "loss must be 1x1, got %dx%d", loss.Rows, loss.Cols)
	}
	if !loss.RequiresGrad {
		return errf(op, "loss does not depend on any Var that requires a gradient")
	}
	if loss.Grad == nil {
		g, err := t.allocOut(op, 1) // the Fill below writes it
		if err != nil {
			return err
		}
		loss.Grad = g
	}
	if err := t.b.Fill(loss.Grad, 1); err != nil {
		return wrap(op, err)
	}
	for i := len(t.ops) - 1; i >= 0; i-- {
		r := t.ops[i]
		if r.out.Grad == nil {
			continue // no gradient reached this op
		}
		if err := r.backward(); err != nil {
			return fmt.Errorf("autograd: backward of %s: %w", r.name, err)
		}
	}
	return nil
}

// accumulate adds a gradient contribution into v.Grad. compute writes the
// contribution into dst, overwriting it. When v has no gradient yet the
// contribution is written straight into a new Grad buffer; otherwise into a
// temporary that is then added with Axpby.
func (t *Tape) accumulate(op string, v *Var, compute func(dst backend.Buffer) error) error {
	if !v.RequiresGrad {
		return nil
	}
	if v.Grad == nil {
		g, err := t.allocOutT(op, v.DType(), v.Len()) // compute overwrites
		if err != nil {
			return err
		}
		v.Grad = g
		return wrap(op, compute(g))
	}
	tmp, err := t.temp(op, v.DType(), v.Len())
	if err != nil {
		return err
	}
	defer t.b.Free(tmp)
	if err := compute(tmp); err != nil {
		return wrap(op, err)
	}
	return wrap(op, t.b.Axpby(v.Grad, 1, tmp, 1, v.Grad))
}

// accumulateInto is accumulate for primitives that accumulate natively
// (Gemm with beta, ScatterAddRows): compute gets the Grad buffer and whether
// it already holds a value to add to.
func (t *Tape) accumulateInto(op string, v *Var, compute func(dst backend.Buffer, add bool) error) error {
	return t.accumulateIntoZ(op, v, true, compute)
}

// accumulateIntoZ is accumulateInto where zero says whether a new Grad
// buffer must start zeroed: not for compute functions that overwrite
// when add is false (a Gemm with beta = 0), which saves a memset each.
func (t *Tape) accumulateIntoZ(op string, v *Var, zero bool, compute func(dst backend.Buffer, add bool) error) error {
	if !v.RequiresGrad {
		return nil
	}
	add := true
	if v.Grad == nil {
		var g backend.Buffer
		var err error
		if zero {
			g, err = t.allocZero(op, v.DType(), v.Len())
		} else {
			g, err = t.allocOutT(op, v.DType(), v.Len())
		}
		if err != nil {
			return err
		}
		v.Grad, add = g, false
	}
	return wrap(op, compute(v.Grad, add))
}

// addScaled accumulates alpha*src into v.Grad.
func (t *Tape) addScaled(op string, v *Var, alpha float32, src backend.Buffer) error {
	return t.accumulateInto(op, v, func(dst backend.Buffer, add bool) error {
		if !add {
			if alpha == 1 {
				return t.b.Copy(dst, src)
			}
			return t.b.Axpby(dst, alpha, src, 0, dst)
		}
		return t.b.Axpby(dst, alpha, src, 1, dst)
	})
}

func anyGrad(vs ...*Var) bool {
	for _, v := range vs {
		if v != nil && v.RequiresGrad {
			return true
		}
	}
	return false
}

// Scratch returns a new rows x cols constant Var owned by the tape (freed
// by Release) whose values are undefined until the caller writes every
// one of them on the back end: a constant computed on the device (a
// loss's mask) with no host upload.
func (t *Tape) Scratch(rows, cols int) (*Var, error) {
	const op = "Scratch"
	if err := t.check(op); err != nil {
		return nil, err
	}
	return t.newVar(op, rows, cols, false)
}

// Upload copies host data into a new rows x cols constant Var owned by the
// tape (freed by Release): per-step inputs such as a batch's features.
func (t *Tape) Upload(data []float32, rows, cols int) (*Var, error) {
	const op = "Upload"
	if err := t.check(op); err != nil {
		return nil, err
	}
	if rows < 0 || cols < 0 || len(data) != rows*cols {
		return nil, errf(op, "%d values for a %dx%d matrix", len(data), rows, cols)
	}
	v, err := t.newVar(op, rows, cols, false)
	if err != nil {
		return nil, err
	}
	if err := t.b.Upload(v.Value, data); err != nil {
		return nil, wrap(op, err)
	}
	return v, nil
}
