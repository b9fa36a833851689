package train

// sparseThreshold is the density below which features are kept sparse:
// bag-of-words features (Cora 1.3%, CiteSeer 0.9%) make the first layer's
// X*W an SpMM that is tens of times cheaper than a dense product.
const sparseThreshold = 0.25

// features is the host copy of the (possibly row-normalized) feature
// matrix, in CSR form when sparse enough.
type features struct {
	rows, cols int
	sparse     bool
	dense      []float32 // rows x cols, when !sparse
	indptr     []int64   // when sparse
	indices    []int32
	values     []float32
}

func newFeatures(x []float32, rows, cols int) *features {
	f := &features{rows: rows, cols: cols}
	nnz := 0
	for _, v := range x {
		if v != 0 {
			nnz++
		}
	}
	if float64(nnz) >= sparseThreshold*float64(len(x)) {
		f.dense = x
		return f
	}
	f.sparse = true
	f.indptr = make([]int64, rows+1)
	f.indices = make([]int32, 0, nnz)
	f.values = make([]float32, 0, nnz)
	for r := 0; r < rows; r++ {
		for c, v := range x[r*cols : (r+1)*cols] {
			if v != 0 {
				f.indices = append(f.indices, int32(c))
				f.values = append(f.values, v)
			}
		}
		f.indptr[r+1] = int64(len(f.indices))
	}
	return f
}

// gather returns the CSR rows of the given nodes, in order.
func (f *features) gather(nodes []int32) (indptr []int64, indices []int32, values []float32) {
	n := 0
	for _, v := range nodes {
		n += int(f.indptr[v+1] - f.indptr[v])
	}
	indptr = make([]int64, len(nodes)+1)
	indices = make([]int32, 0, n)
	values = make([]float32, 0, n)
	for i, v := range nodes {
		lo, hi := f.indptr[v], f.indptr[v+1]
		indices = append(indices, f.indices[lo:hi]...)
		values = append(values, f.values[lo:hi]...)
		indptr[i+1] = int64(len(indices))
	}
	return indptr, indices, values
}
