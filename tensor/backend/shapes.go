package backend

import (
	"fmt"
	"math"
)

// Shape checks shared by the back ends: they validate the scalar shape
// arguments of a primitive and return the element counts its buffers must
// have, so every back end rejects the same calls with the same errors.
// Checks that need a back end's own types (buffers, sparse matrices) stay
// in the back end.

// MaxElems bounds every element count so products of two dimensions and
// byte sizes never overflow.
const MaxElems = 1 << 50

// Dims returns a*b, or a ShapeError when either is negative or the product
// exceeds MaxElems.
func Dims(op string, a, b int) (int, error) {
	if a < 0 || b < 0 {
		return 0, &ShapeError{Op: op, Msg: fmt.Sprintf("negative shape %d x %d", a, b)}
	}
	if b != 0 && a > MaxElems/b {
		return 0, &ShapeError{Op: op, Msg: fmt.Sprintf("shape %d x %d too large", a, b)}
	}
	return a * b, nil
}

// CheckCSR validates a host CSR matrix of rows x cols: dimensions below
// 2^31, indptr of rows+1 non-decreasing entries from 0 to len(indices),
// and every column index in [0, cols).
func CheckCSR(op string, rows, cols int, indptr []int64, indices []int32) error {
	if rows < 0 || cols < 0 || rows > math.MaxInt32 || cols > math.MaxInt32 {
		return &ShapeError{Op: op, Msg: fmt.Sprintf("shape %d x %d out of range [0, 2^31)", rows, cols)}
	}
	if len(indptr) != rows+1 {
		return &ShapeError{Op: op, Msg: fmt.Sprintf("indptr has %d entries, want rows+1 = %d", len(indptr), rows+1)}
	}
	if indptr[0] != 0 {
		return &ShapeError{Op: op, Msg: fmt.Sprintf("indptr[0] = %d, want 0", indptr[0])}
	}
	for i := 0; i < rows; i++ {
		if indptr[i+1] < indptr[i] {
			return &ShapeError{Op: op, Msg: fmt.Sprintf("indptr decreases at %d (%d > %d)", i+1, indptr[i], indptr[i+1])}
		}
	}
	if indptr[rows] != int64(len(indices)) {
		return &ShapeError{Op: op, Msg: fmt.Sprintf("indptr[rows] = %d, but %d indices", indptr[rows], len(indices))}
	}
	if maxIndex(indices) < uint32(cols) {
		return nil
	}
	for i, v := range indices {
		if v < 0 || int(v) >= cols {
			return &IndexError{Op: op, Name: "indices", Pos: i, Value: int64(v), Limit: cols}
		}
	}
	return nil
}

// maxIndex returns the largest of indices as unsigned words (a negative
// index is larger than any column count), 0 for none: four running
// maxima without a branch, 1.5-2x faster than a test of each index
// (BenchmarkCheckCSR, 1.4M indices: 1.05 against 1.6-2.2 ms on a 2-core
// VM); inference checks a block of a million indices per chunk on the
// goroutine that feeds its GPU.
func maxIndex(indices []int32) uint32 {
	var m0, m1, m2, m3 uint32
	n := len(indices) &^ 3
	for i := 0; i < n; i += 4 {
		m0 = max(m0, uint32(indices[i]))
		m1 = max(m1, uint32(indices[i+1]))
		m2 = max(m2, uint32(indices[i+2]))
		m3 = max(m3, uint32(indices[i+3]))
	}
	for _, v := range indices[n:] {
		m0 = max(m0, uint32(v))
	}
	return max(m0, m1, m2, m3)
}

// GemmShape returns the lengths of A (m x k), B (k x n) and C (m x n).
func GemmShape(op string, m, n, k int) (aLen, bLen, cLen int, err error) {
	if aLen, err = Dims(op, m, k); err != nil {
		return 0, 0, 0, err
	}
	if bLen, err = Dims(op, k, n); err != nil {
		return 0, 0, 0, err
	}
	if cLen, err = Dims(op, m, n); err != nil {
		return 0, 0, 0, err
	}
	return aLen, bLen, cLen, nil
}

// ArgmaxShape returns the length of x (rows x cols) for ArgmaxRows, whose
// non-empty rows need at least one column and whose column index must fit
// int32.
func ArgmaxShape(op string, rows, cols int) (int, error) {
	n, err := Dims(op, rows, cols)
	if err != nil {
		return 0, err
	}
	if rows > 0 && cols < 1 {
		return 0, &ShapeError{Op: op, Msg: "cols must be >= 1"}
	}
	if cols > math.MaxInt32 {
		return 0, &ShapeError{Op: op, Msg: "cols does not fit int32"}
	}
	return n, nil
}

// SpMMShape checks heads and width and returns the lengths of out
// (rows x width) and x (cols x width) for an SpMM whose (possibly
// transposed) matrix is rows x cols; weighted says whether w is given.
// The length of w (nnz x heads) is left to the caller: the back ends check
// it after out and x.
func SpMMShape(op string, rows, cols, heads, width int, weighted bool) (outLen, xLen int, err error) {
	if heads < 1 || width < 0 || width%heads != 0 {
		return 0, 0, &ShapeError{Op: op, Msg: fmt.Sprintf("heads %d, width %d: want heads >= 1 dividing width", heads, width)}
	}
	if !weighted && heads != 1 {
		return 0, 0, &ShapeError{Op: op, Msg: fmt.Sprintf("w is nil but heads = %d, want 1", heads)}
	}
	if outLen, err = Dims(op, rows, width); err != nil {
		return 0, 0, err
	}
	if xLen, err = Dims(op, cols, width); err != nil {
		return 0, 0, err
	}
	return outLen, xLen, nil
}

// SDDMMShape checks the op, heads and dim of an SDDMM on a rows x cols
// matrix with nnz entries and returns the lengths of u (rows x heads*dim),
// v (cols x heads*dim) and out (nnz x heads).
func SDDMMShape(op string, sop SDDMMOp, rows, cols, nnz, heads, dim int) (uLen, vLen, eLen int, err error) {
	switch sop {
	case SDDMMDot:
	case SDDMMAdd:
		if dim != 1 {
			return 0, 0, 0, &ShapeError{Op: op, Msg: fmt.Sprintf("SDDMMAdd needs dim 1, got %d", dim)}
		}
	default:
		return 0, 0, 0, &ShapeError{Op: op, Msg: fmt.Sprintf("unknown SDDMM op %d", sop)}
	}
	if heads < 1 || dim < 0 {
		return 0, 0, 0, &ShapeError{Op: op, Msg: fmt.Sprintf("heads %d, dim %d: want heads >= 1, dim >= 0", heads, dim)}
	}
	width, err := Dims(op, heads, dim)
	if err != nil {
		return 0, 0, 0, err
	}
	if uLen, err = Dims(op, rows, width); err != nil {
		return 0, 0, 0, err
	}
	if vLen, err = Dims(op, cols, width); err != nil {
		return 0, 0, 0, err
	}
	if eLen, err = Dims(op, nnz, heads); err != nil {
		return 0, 0, 0, err
	}
	return uLen, vLen, eLen, nil
}

// EdgeSumShape checks heads and returns the lengths of out (rows x heads)
// and e (nnz x heads) for an EdgeSum whose (possibly transposed) matrix
// has rows rows.
func EdgeSumShape(op string, rows, nnz, heads int) (outLen, eLen int, err error) {
	if err := checkHeads(op, heads); err != nil {
		return 0, 0, err
	}
	if outLen, err = Dims(op, rows, heads); err != nil {
		return 0, 0, err
	}
	if eLen, err = Dims(op, nnz, heads); err != nil {
		return 0, 0, err
	}
	return outLen, eLen, nil
}

// EdgeShape checks heads and returns nnz x heads, the length of every
// per-edge buffer of EdgeSoftmax and EdgeSoftmaxBackward.
func EdgeShape(op string, nnz, heads int) (int, error) {
	if err := checkHeads(op, heads); err != nil {
		return 0, err
	}
	return Dims(op, nnz, heads)
}

func checkHeads(op string, heads int) error {
	if heads < 1 {
		return &ShapeError{Op: op, Msg: fmt.Sprintf("heads %d, want >= 1", heads)}
	}
	return nil
}
