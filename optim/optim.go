package optim

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Optimizer updates parameters from their gradients.
type Optimizer interface {
	// Step applies one update from the current gradients and increments
	// the step count.
	Step() error
	// ZeroGrad sets every parameter's gradient to zero (gradients
	// accumulate across Backward calls until then).
	ZeroGrad() error
	// State downloads the optimizer state: the step count and one tensor
	// per (buffer kind, parameter), named "<kind>/<param name>".
	State() (State, error)
	// LoadState restores a state exported by State of an optimizer of the
	// same kind over parameters with the same names and shapes.
	LoadState(State) error
	// Params returns the parameters being optimized.
	Params() []*nn.Param
	// StepCount returns the number of steps taken (restored by LoadState).
	StepCount() int
	// LR returns the learning rate; SetLR changes it (schedules).
	LR() float32
	SetLR(lr float32)
	// Free releases the state buffers.
	Free()
}

// State is an optimizer's host-side state for checkpoints.
type State struct {
	Kind    string // "adam" or "sgd"
	Step    int
	Buffers []nn.NamedTensor
}

// Error reports invalid optimizer arguments or state.
type Error struct{ Msg string }

func (e *Error) Error() string { return "optim: " + e.Msg }

func errf(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// base holds what Adam and SGD share: parameters, per-parameter state
// buffers, the step count and the learning rate.
type base struct {
	b      backend.Backend
	kind   string
	params []*nn.Param
	names  []string           // state buffer kinds, e.g. "m", "v"
	bufs   [][]backend.Buffer // bufs[k][i]: buffer kind k of param i
	step   int
	lr     float32
	err    error // construction error, reported by Step
	// flat[k], for parameters laid out in one buffer (nn.Flat): the
	// buffer behind bufs[k]'s views.
	flat []backend.Buffer
}

func newBase(b backend.Backend, kind string, params []*nn.Param, lr float32, names ...string) base {
	o := base{b: b, kind: kind, params: params, names: names, lr: lr}
	if b == nil {
		o.err = errf("%s: nil backend", kind)
		return o
	}
	seen := map[string]bool{}
	for i, p := range params {
		if p == nil || p.Value == nil || p.Grad == nil {
			o.err = errf("%s: parameter %d is nil or freed", kind, i)
			return o
		}
		if seen[p.Name] {
			o.err = errf("%s: duplicate parameter name %q", kind, p.Name)
			return o
		}
		seen[p.Name] = true
	}
	if !(lr >= 0) || math.IsInf(float64(lr), 0) {
		o.err = errf("%s: learning rate %v", kind, lr)
		return o
	}
	o.bufs = make([][]backend.Buffer, len(names))
	if _, _, flat := nn.Flat(params); flat && len(names) > 0 {
		// State laid out as the parameters are: buffer kind k is one
		// flat buffer, each parameter's state a view of it.
		total := 0
		for _, p := range params {
			total += p.Len()
		}
		for k := range names {
			buf, err := b.Alloc(backend.Float32, total)
			if err != nil {
				o.err = fmt.Errorf("optim: %s: state %s: %w", kind, names[k], err)
				o.Free()
				return o
			}
			o.flat = append(o.flat, buf)
			o.bufs[k] = make([]backend.Buffer, len(params))
			off := 0
			for i, p := range params {
				if o.bufs[k][i], err = backend.View(buf, off, p.Len()); err != nil {
					o.err = fmt.Errorf("optim: %s: state for %q: %w", kind, p.Name, err)
					o.Free()
					return o
				}
				off += p.Len()
			}
		}
		return o
	}
	for k := range names {
		o.bufs[k] = make([]backend.Buffer, len(params))
		for i, p := range params {
			buf, err := b.Alloc(backend.Float32, p.Len())
			if err != nil {
				o.err = fmt.Errorf("optim: %s: state for %q: %w", kind, p.Name, err)
				o.Free()
				return o
			}
			o.bufs[k][i] = buf
		}
	}
	return o
}

func (o *base) Params() []*nn.Param { return o.params }
func (o *base) StepCount() int      { return o.step }
func (o *base) LR() float32         { return o.lr }
func (o *base) SetLR(lr float32)    { o.lr = lr }

func (o *base) ready() error {
	if o.err != nil {
		return o.err
	}
	if o.bufs == nil && len(o.names) > 0 {
		return errf("%s: optimizer was freed", o.kind)
	}
	return nil
}

func (o *base) ZeroGrad() error {
	if o.err != nil {
		return o.err
	}
	if _, g, ok := nn.Flat(o.params); ok && g != nil {
		// One fill for all gradients.
		if err := o.b.Fill(g, 0); err != nil {
			return fmt.Errorf("optim: zero grads: %w", err)
		}
		return nil
	}
	for _, p := range o.params {
		if err := o.b.Fill(p.Grad, 0); err != nil {
			return fmt.Errorf("optim: zero grad of %q: %w", p.Name, err)
		}
	}
	return nil
}

func (o *base) Free() {
	if o.flat != nil {
		o.bufs = nil // views of o.flat, which own nothing
	}
	for _, bs := range o.bufs {
		for _, buf := range bs {
			if buf != nil {
				o.b.Free(buf)
			}
		}
	}
	o.bufs = nil
	for _, buf := range o.flat {
		o.b.Free(buf)
	}
	o.flat = nil
}

func (o *base) State() (State, error) {
	if err := o.ready(); err != nil {
		return State{}, err
	}
	st := State{Kind: o.kind, Step: o.step}
	for k, name := range o.names {
		for i, p := range o.params {
			data := make([]float32, p.Len())
			if err := o.b.Download(data, o.bufs[k][i]); err != nil {
				return State{}, fmt.Errorf("optim: %s: download %s/%s: %w", o.kind, name, p.Name, err)
			}
			st.Buffers = append(st.Buffers, nn.NamedTensor{Name: name + "/" + p.Name, Rows: p.Rows, Cols: p.Cols, Data: data})
		}
	}
	return st, nil
}

func (o *base) LoadState(st State) error {
	if err := o.ready(); err != nil {
		return err
	}
	if st.Kind != o.kind {
		return errf("load state: state is for %q, optimizer is %q", st.Kind, o.kind)
	}
	if st.Step < 0 {
		return errf("load state: negative step %d", st.Step)
	}
	want := len(o.names) * len(o.params)
	if len(st.Buffers) != want {
		return errf("load state: %d buffers, want %d", len(st.Buffers), want)
	}
	byName := make(map[string]*nn.NamedTensor, len(st.Buffers))
	for i := range st.Buffers {
		t := &st.Buffers[i]
		if _, dup := byName[t.Name]; dup {
			return errf("load state: duplicate buffer %q", t.Name)
		}
		byName[t.Name] = t
	}
	// Validate everything before writing anything.
	for _, name := range o.names {
		for _, p := range o.params {
			t, ok := byName[name+"/"+p.Name]
			if !ok {
				return errf("load state: missing buffer %q", name+"/"+p.Name)
			}
			if t.Rows != p.Rows || t.Cols != p.Cols || len(t.Data) != p.Len() {
				return errf("load state: %q is %dx%d with %d values, want %dx%d", t.Name, t.Rows, t.Cols, len(t.Data), p.Rows, p.Cols)
			}
		}
	}
	for k, name := range o.names {
		for i, p := range o.params {
			if err := o.b.Upload(o.bufs[k][i], byName[name+"/"+p.Name].Data); err != nil {
				return fmt.Errorf("optim: load %s/%s: %w", name, p.Name, err)
			}
		}
	}
	o.step = st.Step
	return nil
}

// Adam is torch.optim.Adam (L2 weight decay added to the gradient, bias
// corrected moments), one fused back-end kernel per parameter.
type Adam struct {
	base
	Beta1, Beta2, Eps, WeightDecay float32
}

// NewAdam makes an Adam optimizer with zero moments. Invalid arguments are
// reported by the first Step (and by State/LoadState).
func NewAdam(b backend.Backend, params []*nn.Param, lr, beta1, beta2, eps, weightDecay float32) *Adam {
	a := &Adam{base: newBase(b, "adam", params, lr, "m", "v"), Beta1: beta1, Beta2: beta2, Eps: eps, WeightDecay: weightDecay}
	if a.err == nil {
		switch {
		case !(beta1 >= 0 && beta1 < 1), !(beta2 >= 0 && beta2 < 1):
			a.err = errf("adam: betas (%v, %v) must be in [0, 1)", beta1, beta2)
		case !(eps >= 0), !(weightDecay >= 0):
			a.err = errf("adam: eps %v and weight decay %v must be >= 0", eps, weightDecay)
		}
	}
	return a
}

// Step applies one Adam update to every parameter.
func (a *Adam) Step() error {
	if err := a.ready(); err != nil {
		return err
	}
	t := a.step + 1
	if v, g, ok := nn.Flat(a.params); ok && g != nil && len(a.flat) == 2 {
		// One launch over every parameter: AdamStep is elementwise with
		// the same hyperparameters, so this is the per-tensor loop's
		// result exactly.
		if err := a.b.AdamStep(v, g, a.flat[0], a.flat[1], a.lr, a.Beta1, a.Beta2, a.Eps, a.WeightDecay, t); err != nil {
			return fmt.Errorf("optim: adam step: %w", err)
		}
		a.step = t
		return nil
	}
	for i, p := range a.params {
		if err := a.b.AdamStep(p.Value, p.Grad, a.bufs[0][i], a.bufs[1][i], a.lr, a.Beta1, a.Beta2, a.Eps, a.WeightDecay, t); err != nil {
			return fmt.Errorf("optim: adam step of %q: %w", p.Name, err)
		}
	}
	a.step = t
	return nil
}

// SGD is torch.optim.SGD with momentum (dampening 0, no Nesterov) and L2
// weight decay: g = grad + wd*p; buf = momentum*buf + g; p -= lr*buf. With
// momentum 0 it is plain SGD and keeps no state buffers.
type SGD struct {
	base
	Momentum, WeightDecay float32
}

// NewSGD makes an SGD optimizer. Invalid arguments are reported by Step.
func NewSGD(b backend.Backend, params []*nn.Param, lr, momentum, weightDecay float32) *SGD {
	var names []string
	if momentum != 0 {
		names = []string{"momentum"}
	}
	s := &SGD{base: newBase(b, "sgd", params, lr, names...), Momentum: momentum, WeightDecay: weightDecay}
	if s.err == nil && (!(momentum >= 0) || !(weightDecay >= 0)) {
		s.err = errf("sgd: momentum %v and weight decay %v must be >= 0", momentum, weightDecay)
	}
	return s
}

// Step applies one SGD update to every parameter.
func (s *SGD) Step() error {
	if err := s.ready(); err != nil {
		return err
	}
	for i, p := range s.params {
		g := p.Grad
		var tmp backend.Buffer
		if s.WeightDecay != 0 {
			var err error
			if tmp, err = s.b.Alloc(backend.Float32, p.Len()); err != nil {
				return fmt.Errorf("optim: sgd step of %q: %w", p.Name, err)
			}
			if err := s.b.Axpby(tmp, 1, p.Grad, s.WeightDecay, p.Value); err != nil {
				s.b.Free(tmp)
				return fmt.Errorf("optim: sgd step of %q: %w", p.Name, err)
			}
			g = tmp
		}
		err := s.update(i, p, g)
		s.b.Free(tmp)
		if err != nil {
			return fmt.Errorf("optim: sgd step of %q: %w", p.Name, err)
		}
	}
	s.step++
	return nil
}

func (s *SGD) update(i int, p *nn.Param, g backend.Buffer) error {
	if s.Momentum != 0 {
		// torch starts the buffer at g on the first step, which equals
		// momentum*0 + g since the buffer starts at zero.
		buf := s.bufs[0][i]
		if err := s.b.Axpby(buf, s.Momentum, buf, 1, g); err != nil {
			return err
		}
		g = buf
	}
	return s.b.Axpby(p.Value, 1, p.Value, -s.lr, g)
}
