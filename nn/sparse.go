package nn

import (
	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
)

// ForwardSparseAsDense is m.ForwardSparse with Forward's input dropout: xs
// must have been uploaded from the host matrix h (same shape, same
// non-zeros in the same order, e.g. autograd.NewSparseInput of h's
// arrays), and the non-zero at (i, j) is kept exactly when Forward on the
// dense matrix would keep element (i, j). So the result equals Forward's
// on h made dense, up to float32 summation order, whichever way the
// features are stored: a mini-batch trainer that keeps bag-of-words
// features sparse gets the losses of one that keeps them dense (as
// the DSP engine, dsp/engine, does). ForwardSparse instead draws its mask
// over the non-zeros: the same distribution, other masks.
//
// The mask is drawn on the host (one hash per non-zero, as the back end's
// Dropout would for that element) and the kept values are uploaded; m must
// be a model made by New.
func ForwardSparseAsDense(m Model, t *autograd.Tape, xs *autograd.SparseInput, h *autograd.HostSparse, blocks []*Block, train bool, seed uint64) (*autograd.Var, error) {
	s, ok := m.(*stack)
	if !ok || s == nil {
		return nil, layerErr("model", "ForwardSparseAsDense needs a model made by nn.New, got %T", m)
	}
	if xs == nil || xs.A == nil || xs.Values == nil {
		return nil, layerErr(s.cfg.Kind, "nil sparse input")
	}
	if msg := checkHostSparse(h, xs); msg != "" {
		return nil, layerErr(s.cfg.Kind, "host sparse input: %s", msg)
	}
	return s.run(t, nil, xs, h, blocks, train, seed)
}

// checkHostSparse verifies that h is a well-formed CSR matrix with xs's
// shape and number of non-zeros, so that denseMaskDropout's positions are
// in range (the order of the non-zeros is the caller's promise). It
// returns what is wrong, or "".
func checkHostSparse(h *autograd.HostSparse, xs *autograd.SparseInput) string {
	switch {
	case h == nil:
		return "nil"
	case h.Rows != xs.Rows || h.Cols != xs.Cols || xs.A.NumRows() != h.Rows || xs.A.NumCols() != h.Cols:
		return "shape differs from the uploaded matrix"
	case len(h.Indptr) != h.Rows+1 || len(h.Indices) != len(h.Values) || len(h.Values) != xs.A.NNZ() || xs.Values.Len() != len(h.Values):
		return "row pointers, indices or values do not match the uploaded matrix"
	case h.Indptr[0] != 0 || h.Indptr[h.Rows] != int64(len(h.Values)):
		return "row pointers do not span the non-zeros"
	}
	for i := 0; i < h.Rows; i++ {
		if h.Indptr[i+1] < h.Indptr[i] {
			return "row pointers decrease"
		}
	}
	for _, c := range h.Indices {
		if c < 0 || int(c) >= h.Cols {
			return "column index out of range"
		}
	}
	return ""
}

// denseMaskDropout applies inverted dropout to xs's non-zeros with the
// mask the back end's Dropout draws for the dense h.Rows x h.Cols matrix
// (element r*Cols+c kept iff rng.DropUniform(seed, r*Cols+c) >= p, then
// scaled by 1/(1-p) in float32, see backend.Backend.Dropout). The zeros
// stay zero either way, so only the non-zeros' draws are needed. The new
// values are owned by the tape; the structure is xs's.
func denseMaskDropout(t *autograd.Tape, xs *autograd.SparseInput, h *autograd.HostSparse, p float32, seed uint64) (*autograd.SparseInput, error) {
	if len(h.Values) == 0 {
		return xs, nil // nothing to drop
	}
	keep := 1 / (1 - p)
	vals := make([]float32, len(h.Values))
	cols := uint64(h.Cols)
	for r := 0; r < h.Rows; r++ {
		base := uint64(r) * cols
		for e := h.Indptr[r]; e < h.Indptr[r+1]; e++ {
			m := float32(0)
			if rng.DropUniform(seed, base+uint64(h.Indices[e])) >= p {
				m = keep
			}
			vals[e] = h.Values[e] * m
		}
	}
	v, err := t.Upload(vals, len(vals), 1)
	if err != nil {
		return nil, err
	}
	return &autograd.SparseInput{A: xs.A, Values: v.Value, Rows: xs.Rows, Cols: xs.Cols}, nil
}
