package nn

import (
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Param is a trainable Rows x Cols float32 matrix and its gradient, both in
// back-end memory. Name is unique within a model ("layer0.weight") and keys
// checkpoints and optimizer state.
type Param struct {
	Name       string
	Value      backend.Buffer
	Grad       backend.Buffer
	Rows, Cols int

	// stackNext says a layer reads this parameter and the next, of the
	// same width, as one matrix (stackedVar): flatten keeps a view of
	// the two together.
	stackNext bool

	// flat, on the first parameter of a model laid out by flatten: the
	// buffers its parameters' values and gradients are views of; of, on
	// every parameter so laid out, the same (views are not freed).
	flat, of *flatParams
}

// flatParams are one contiguous value and one gradient buffer holding a
// model's parameters in order, so that an optimizer updates them all in
// one launch and zeroes the gradients in one fill (Flat).
type flatParams struct {
	value, grad backend.Buffer
	params      []*Param
	views       []backend.Buffer // params' Value and Grad views, in order
	// stacked[i] is a view of params i and i+1's values together where
	// params[i].stackNext, else nil.
	stacked []backend.Buffer
}

// flatten moves ps into one value and one gradient buffer (values
// copied, old buffers freed) and makes each Param's Value and Grad views
// of them. Back ends without views (backend.Slicer) keep ps as they are.
func flatten(b backend.Backend, ps []*Param) error {
	total := 0
	for _, p := range ps {
		total += p.Len()
	}
	if len(ps) < 2 || total == 0 {
		return nil
	}
	v, err := b.Alloc(backend.Float32, total)
	if err != nil {
		return fmt.Errorf("nn: flat parameters: %w", err)
	}
	g, err := b.Alloc(backend.Float32, total)
	if err != nil {
		b.Free(v)
		return fmt.Errorf("nn: flat parameters: %w", err)
	}
	if _, ok := v.(backend.Slicer); !ok {
		b.Free(v)
		b.Free(g)
		return nil
	}
	f := &flatParams{value: v, grad: g, params: append([]*Param(nil), ps...)}
	vals := make([]backend.Buffer, len(ps))
	grads := make([]backend.Buffer, len(ps))
	off := 0
	for i, p := range ps {
		if vals[i], err = backend.View(v, off, p.Len()); err == nil {
			grads[i], err = backend.View(g, off, p.Len())
		}
		if err == nil {
			err = b.Copy(vals[i], p.Value)
		}
		if err != nil {
			b.Free(v)
			b.Free(g)
			return fmt.Errorf("nn: flat parameters: %q: %w", p.Name, err)
		}
		off += p.Len()
	}
	f.stacked = make([]backend.Buffer, len(ps))
	off = 0
	for i, p := range ps {
		if p.stackNext && i+1 < len(ps) && ps[i+1].Cols == p.Cols {
			if f.stacked[i], err = backend.View(v, off, p.Len()+ps[i+1].Len()); err != nil {
				b.Free(v)
				b.Free(g)
				return fmt.Errorf("nn: flat parameters: %q: %w", p.Name, err)
			}
		}
		off += p.Len()
	}
	for i, p := range ps {
		b.Free(p.Value)
		b.Free(p.Grad)
		p.Value, p.Grad, p.of = vals[i], grads[i], f
		f.views = append(f.views, vals[i], grads[i])
	}
	ps[0].flat = f
	return nil
}

// Flat returns the contiguous value and gradient buffers behind ps, with
// ok set when ps are exactly a model's parameters as New laid them out,
// in order, and their Value and Grad are still the views of them (a
// caller may point Grad elsewhere, as the DSP engine does; then Flat
// reports what still holds: grad is nil when a Grad moved).
func Flat(ps []*Param) (value, grad backend.Buffer, ok bool) {
	if len(ps) == 0 || ps[0] == nil || ps[0].flat == nil {
		return nil, nil, false
	}
	f := ps[0].flat
	if len(f.params) != len(ps) {
		return nil, nil, false
	}
	gradOK := true
	for i, p := range ps {
		if p != f.params[i] || p.Value != f.views[2*i] {
			return nil, nil, false
		}
		if p.Grad != f.views[2*i+1] {
			gradOK = false
		}
	}
	if !gradOK {
		return f.value, nil, true
	}
	return f.value, f.grad, true
}

// ShareGrad makes the gradients of ps, a model's parameters as New laid
// them out (Flat reports ok with their gradient buffer), views of
// g[0:n), n their total length, in place of their own flat gradient
// buffer, which is freed. g is a float32 buffer of b with at least n
// elements; what follows them is the caller's (the DSP engine keeps the
// step's loss there, so the backward pass, the bucketed all-reduce, the
// zeroing and the optimizer's one launch all use one buffer). Flat then
// reports g[0:n) as the gradient buffer. g stays the caller's: free it
// after FreeParams. On error nothing has changed.
func ShareGrad(b backend.Backend, ps []*Param, g backend.Buffer) error {
	_, old, ok := Flat(ps)
	if !ok || old == nil {
		return fmt.Errorf("nn: share gradients: the parameters are not one model's flat parameters")
	}
	n := old.Len()
	if g == nil || g.DType() != backend.Float32 || g.Len() < n {
		return fmt.Errorf("nn: share gradients: need a float32 buffer of at least %d values", n)
	}
	f := ps[0].flat
	whole, err := backend.View(g, 0, n)
	if err != nil {
		return fmt.Errorf("nn: share gradients: %w", err)
	}
	grads := make([]backend.Buffer, len(ps))
	off := 0
	for i, p := range ps {
		if grads[i], err = backend.View(g, off, p.Len()); err != nil {
			return fmt.Errorf("nn: share gradients: %q: %w", p.Name, err)
		}
		off += p.Len()
	}
	b.Free(f.grad)
	f.grad = whole // a view: FreeParams' Free of it frees nothing
	for i, p := range ps {
		p.Grad = grads[i]
		f.views[2*i+1] = grads[i]
	}
	return nil
}

// HalfViews returns views of half, a bfloat16 buffer as long as the
// value buffer Flat reports for ps, laid out as ps' values are in it:
// view i is parameter i's. A trainer with bfloat16 activations converts
// the value buffer into half once a step (one Convert) and hands the
// views to the tape (autograd's Tape.ShareHalf) instead of a conversion
// per weight. It fails unless ps are one model's flat parameters.
func HalfViews(ps []*Param, half backend.Buffer) ([]backend.Buffer, error) {
	value, _, ok := Flat(ps)
	if !ok {
		return nil, fmt.Errorf("nn: half views: the parameters are not one model's flat parameters")
	}
	if half == nil || half.DType() != backend.BFloat16 || half.Len() != value.Len() {
		return nil, fmt.Errorf("nn: half views: need a bfloat16 buffer of %d values", value.Len())
	}
	views := make([]backend.Buffer, len(ps))
	off := 0
	for i, p := range ps {
		v, err := backend.View(half, off, p.Len())
		if err != nil {
			return nil, fmt.Errorf("nn: half views: %q: %w", p.Name, err)
		}
		views[i] = v
		off += p.Len()
	}
	return views, nil
}

// stackedVar returns a's rows then b's as one Var of tape t (Tape.
// StackRows): over the flat value buffer with no copy where flatten laid
// them out side by side (a.stackNext), else copied.
func stackedVar(t *autograd.Tape, a, b *Param) (*autograd.Var, error) {
	va, err := a.Var(t)
	if err != nil {
		return nil, err
	}
	vb, err := b.Var(t)
	if err != nil {
		return nil, err
	}
	var value backend.Buffer
	if f := a.of; f != nil && b.of == f {
		if i := slices.Index(f.params, a); i >= 0 && i+1 < len(f.params) && f.params[i+1] == b && f.views[2*i] == a.Value && f.views[2*i+2] == b.Value {
			value = f.stacked[i]
		}
	}
	return t.StackRows(va, vb, value)
}

// HalfShares returns, for a trainer that converts ps' flat value buffer
// into half once a step (see HalfViews), each buffer the tape may read
// as a product's operand paired with its bfloat16 copy in half: every
// parameter's value, and the stacked values of layers that read two
// parameters as one (Tape.ShareHalf takes each pair).
func HalfShares(ps []*Param, half backend.Buffer) ([][2]backend.Buffer, error) {
	views, err := HalfViews(ps, half)
	if err != nil {
		return nil, err
	}
	f := ps[0].flat
	pairs := make([][2]backend.Buffer, 0, len(ps)+1)
	off := 0
	for i, p := range ps {
		pairs = append(pairs, [2]backend.Buffer{p.Value, views[i]})
		if st := f.stacked[i]; st != nil {
			h, err := backend.View(half, off, st.Len())
			if err != nil {
				return nil, fmt.Errorf("nn: half views: %q: %w", p.Name, err)
			}
			pairs = append(pairs, [2]backend.Buffer{st, h})
		}
		off += p.Len()
	}
	return pairs, nil
}

// Len returns Rows*Cols.
func (p *Param) Len() int { return p.Rows * p.Cols }

// NewParam allocates a zero-filled parameter and gradient.
func NewParam(b backend.Backend, name string, rows, cols int) (*Param, error) {
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("nn: param %q: bad shape %dx%d", name, rows, cols)
	}
	v, err := b.Alloc(backend.Float32, rows*cols)
	if err != nil {
		return nil, fmt.Errorf("nn: param %q: %w", name, err)
	}
	g, err := b.Alloc(backend.Float32, rows*cols)
	if err != nil {
		b.Free(v)
		return nil, fmt.Errorf("nn: param %q: %w", name, err)
	}
	return &Param{Name: name, Value: v, Grad: g, Rows: rows, Cols: cols}, nil
}

// Var wraps the parameter as a leaf of tape t; Backward accumulates its
// gradient into p.Grad.
func (p *Param) Var(t *autograd.Tape) (*autograd.Var, error) {
	return t.Leaf(p.Value, p.Grad, p.Rows, p.Cols)
}

// FreeParams returns the parameters' buffers to the back end.
func FreeParams(b backend.Backend, ps []*Param) {
	for _, p := range ps {
		if p == nil {
			continue
		}
		if f := p.of; f != nil {
			// Views own nothing: free only a Grad put in their place.
			if !slices.Contains(f.views, p.Grad) {
				b.Free(p.Grad)
			}
		} else {
			b.Free(p.Value)
			b.Free(p.Grad)
		}
		p.Value, p.Grad, p.of = nil, nil, nil
		if f := p.flat; f != nil {
			b.Free(f.value)
			b.Free(f.grad)
			p.flat = nil
		}
	}
}

// NamedTensor is a host copy of a named matrix (parameter values in
// checkpoints, optimizer moments).
type NamedTensor struct {
	Name       string
	Rows, Cols int
	Data       []float32
}

// SaveParams downloads the parameters' values, in order.
func SaveParams(b backend.Backend, ps []*Param) ([]NamedTensor, error) {
	out := make([]NamedTensor, len(ps))
	for i, p := range ps {
		data := make([]float32, p.Len())
		if err := b.Download(data, p.Value); err != nil {
			return nil, fmt.Errorf("nn: save %q: %w", p.Name, err)
		}
		out[i] = NamedTensor{Name: p.Name, Rows: p.Rows, Cols: p.Cols, Data: data}
	}
	return out, nil
}

// LoadParams uploads tensors into the parameters with the same names. Every
// parameter must be present with its exact shape; unknown names are errors.
func LoadParams(b backend.Backend, ps []*Param, ts []NamedTensor) error {
	byName := make(map[string]*NamedTensor, len(ts))
	for i := range ts {
		if _, dup := byName[ts[i].Name]; dup {
			return fmt.Errorf("nn: load params: duplicate tensor %q", ts[i].Name)
		}
		byName[ts[i].Name] = &ts[i]
	}
	if len(ts) != len(ps) {
		return fmt.Errorf("nn: load params: %d tensors for %d parameters", len(ts), len(ps))
	}
	for _, p := range ps {
		t, ok := byName[p.Name]
		if !ok {
			return fmt.Errorf("nn: load params: missing %q", p.Name)
		}
		if t.Rows != p.Rows || t.Cols != p.Cols || len(t.Data) != p.Len() {
			return fmt.Errorf("nn: load params: %q is %dx%d with %d values, want %dx%d",
				p.Name, t.Rows, t.Cols, len(t.Data), p.Rows, p.Cols)
		}
	}
	for _, p := range ps {
		if err := b.Upload(p.Value, byName[p.Name].Data); err != nil {
			return fmt.Errorf("nn: load %q: %w", p.Name, err)
		}
	}
	return nil
}
