package train

import (
	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Inputs are prepared features (NewFeatures) on a back end, uploaded when
// first needed, and the forward passes of an nn model that read them, as
// Run's trainer feeds them: other tasks' trainers (package link) run the
// node models through it and so get the same sparse first layer and the
// same dropout masks. Free releases what was uploaded.
type Inputs struct{ in inputs }

// NewInputs wraps f for back end b.
func NewInputs(b backend.Backend, f *Features) *Inputs {
	return &Inputs{in: inputs{b: b, f: f}}
}

// ForwardFull runs model over the whole graph: blocks holds the whole
// graph's block once per layer; the output's rows are the nodes.
func (x *Inputs) ForwardFull(t *autograd.Tape, model nn.Model, blocks []*nn.Block, train bool, seed uint64) (*autograd.Var, error) {
	return x.in.forwardFull(t, model, blocks, train, seed)
}

// ForwardBatch uploads a mini-batch's blocks and its input nodes'
// features and runs model; the output's rows are mb's seeds in order.
// cleanup frees what was uploaded: call it after the tape is released.
func (x *Inputs) ForwardBatch(t *autograd.Tape, model nn.Model, mb *sample.MiniBatch, train bool, seed uint64) (*autograd.Var, func(), error) {
	return x.in.forwardBatch(t, model, mb, train, seed)
}

// Free releases the uploaded features.
func (x *Inputs) Free() { x.in.free() }
