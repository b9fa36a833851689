package train

import (
	"fmt"

	"github.com/strata-gnn/strata/autograd"
)

// sparseThreshold is the density below which features are kept sparse:
// bag-of-words features (Cora 1.3%, CiteSeer 0.9%) make the first layer's
// X*W an SpMM that is tens of times cheaper than a dense product.
const sparseThreshold = 0.25

// features is the host copy of the (possibly row-normalized) feature
// matrix, in CSR form when sparse enough.
type features struct {
	rows, cols int
	dense      []float32            // rows x cols, when not sparse
	sparse     *autograd.HostSparse // when sparse
}

func newFeatures(x []float32, rows, cols int) (*features, error) {
	f := &features{rows: rows, cols: cols}
	nnz := 0
	for _, v := range x {
		if v != 0 {
			nnz++
		}
	}
	if float64(nnz) >= sparseThreshold*float64(len(x)) {
		f.dense = x
		return f, nil
	}
	var err error
	f.sparse, err = autograd.HostSparseFromDense(rows, cols, x)
	return f, err
}

// gatherSparse returns the listed rows of the sparse features (e.g. a
// mini-batch's input nodes, in order) as a host CSR matrix: what
// HostSparse.Gather uploads, kept on the host so that the input dropout
// can draw the dense matrix's mask (nn.ForwardSparseAsDense).
func (f *features) gatherSparse(rows []int32) (*autograd.HostSparse, error) {
	h := f.sparse
	nnz := int64(0)
	for i, r := range rows {
		if r < 0 || int(r) >= h.Rows {
			return nil, fmt.Errorf("features: row %d (position %d) out of range [0, %d)", r, i, h.Rows)
		}
		nnz += h.Indptr[r+1] - h.Indptr[r]
	}
	out := &autograd.HostSparse{Rows: len(rows), Cols: h.Cols, Indptr: make([]int64, len(rows)+1),
		Indices: make([]int32, 0, nnz), Values: make([]float32, 0, nnz)}
	for i, r := range rows {
		lo, hi := h.Indptr[r], h.Indptr[r+1]
		out.Indices = append(out.Indices, h.Indices[lo:hi]...)
		out.Values = append(out.Values, h.Values[lo:hi]...)
		out.Indptr[i+1] = int64(len(out.Indices))
	}
	return out, nil
}
