package nn

import (
	"fmt"

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
		b.Free(p.Value)
		b.Free(p.Grad)
		p.Value, p.Grad = nil, nil
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
