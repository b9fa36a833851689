package train

import "github.com/strata-gnn/strata/autograd"

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
