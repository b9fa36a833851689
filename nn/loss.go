package nn

import (
	"fmt"
	"math"

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
	// A tape-owned buffer for M, filled on the back end:
	// NLLLossBackward overwrites all of it.
	m, err := t.Scratch(1, n)
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

// Classify returns the class of each of the n rows of the n x c logits on
// b (the argmax, ties to the lower class; ArgmaxRows on the back end) and
// the logits of the listed rows, row after row (for a loss): n int32s and
// len(rows) x c values cross to the host instead of all n x c logits.
func Classify(b backend.Backend, logits backend.Buffer, n, c int, rows []int32) (class []int32, listed []float32, err error) {
	if b == nil || logits == nil {
		return nil, nil, fmt.Errorf("nn: Classify: nil back end or logits")
	}
	if n < 0 || c < 1 || logits.DType() != backend.Float32 || logits.Len() != n*c {
		return nil, nil, fmt.Errorf("nn: Classify: %d x %d logits in a buffer of %d %v", n, c, logits.Len(), logits.DType())
	}
	for i, r := range rows {
		if r < 0 || int(r) >= n {
			return nil, nil, fmt.Errorf("nn: Classify: listed row %d is %d, not in [0, %d)", i, r, n)
		}
	}
	var cb, idx, lb backend.Buffer
	defer func() {
		for _, x := range []backend.Buffer{cb, idx, lb} {
			if x != nil {
				b.Free(x)
			}
		}
	}()
	class = make([]int32, n)
	if n > 0 {
		if cb, err = b.Alloc(backend.Int32, n); err != nil {
			return nil, nil, err
		}
		if err := b.ArgmaxRows(cb, logits, n, c); err != nil {
			return nil, nil, err
		}
		if err := b.Download(class, cb); err != nil {
			return nil, nil, err
		}
	}
	if len(rows) == 0 {
		return class, nil, nil
	}
	if idx, err = b.Alloc(backend.Int32, len(rows)); err != nil {
		return nil, nil, err
	}
	if err := b.Upload(idx, rows); err != nil {
		return nil, nil, err
	}
	if lb, err = b.Alloc(backend.Float32, len(rows)*c); err != nil {
		return nil, nil, err
	}
	if err := b.GatherRows(lb, logits, idx, n, c); err != nil {
		return nil, nil, err
	}
	listed = make([]float32, len(rows)*c)
	if err := b.Download(listed, lb); err != nil {
		return nil, nil, err
	}
	return class, listed, nil
}

// Argmax is the column of row's largest value, ties to the lowest (as
// ArgmaxRows); 0 for an empty or all-NaN row.
func Argmax(row []float32) int {
	best, mx := 0, float32(math.Inf(-1))
	for j, x := range row {
		if x > mx {
			best, mx = j, x
		}
	}
	return best
}

// CrossEntropy is -log softmax(row)[label], in float64 (the log-sum-exp
// shifted by the row's largest value). label must index row.
func CrossEntropy(row []float32, label int32) float64 {
	mx := float64(row[Argmax(row)])
	var z float64
	for _, x := range row {
		z += math.Exp(float64(x) - mx)
	}
	return mx + math.Log(z) - float64(row[label])
}
