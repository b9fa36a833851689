package nn

import (
	"fmt"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/tensor/backend"
)

// NLLLoss returns the mean negative log-likelihood
// -(1/n) sum_i logp[rows[i], labels[i]] as a 1x1 Var computed on the back
// end alone. Tape.NLLLoss returns the value on the host, which makes a
// device wait for every queued op (and its backward pass waits again);
// this one never synchronizes, so a training loop can queue step after
// step and read the losses (the Vars' values) when it chooses.
//
// The loss is the dot product <M, logp> with M = -1/n at each (rows[i],
// labels[i]) and 0 elsewhere (NLLLossBackward with scale 1; a pair listed
// twice counts twice, as in Tape.NLLLoss), so its gradient flows through
// MatMul. It equals Tape.NLLLoss up to float32 rounding. rows and labels
// are int32 buffers of equal, non-zero length.
func NLLLoss(t *autograd.Tape, logp *autograd.Var, rows, labels backend.Buffer) (*autograd.Var, error) {
	if t == nil || logp == nil {
		return nil, fmt.Errorf("nn: NLLLoss: nil tape or input")
	}
	if rows == nil || labels == nil || rows.DType() != backend.Int32 || labels.DType() != backend.Int32 {
		return nil, fmt.Errorf("nn: NLLLoss: rows and labels must be non-nil int32 buffers")
	}
	if rows.Len() != labels.Len() || rows.Len() == 0 {
		return nil, fmt.Errorf("nn: NLLLoss: rows (%d) and labels (%d) must have the same non-zero length", rows.Len(), labels.Len())
	}
	n := logp.Len()
	// A tape-owned buffer for M; NLLLossBackward overwrites all of it.
	m, err := t.Upload(make([]float32, n), 1, n)
	if err != nil {
		return nil, err
	}
	if err := t.Backend().NLLLossBackward(m.Value, rows, labels, logp.Rows, logp.Cols, 1); err != nil {
		return nil, fmt.Errorf("nn: NLLLoss: %w", err)
	}
	flat, err := t.Reshape(logp, n, 1)
	if err != nil {
		return nil, err
	}
	return t.MatMul(m, flat)
}
