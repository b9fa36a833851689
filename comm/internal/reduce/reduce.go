// Package reduce holds the element-wise reduction kernels shared by the
// CPU back ends. Buffers are byte views of float32, int32 or int64 data
// (aligned to the element size); all arguments of one call have the same
// length.
package reduce

import (
	"unsafe"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
)

type number interface{ ~float32 | ~int32 | ~int64 }

func view[T number](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

// Into computes dst = dst op src. Mean accumulates like Sum (call Finish
// once after the last operand).
func Into(dt backend.DType, op comm.ReduceOp, dst, src []byte) {
	Into3(dt, op, dst, dst, src)
}

// Into3 computes dst = a op b; dst may alias a or b (element by element).
// The operand order matters only for which NaN payload survives a Max.
func Into3(dt backend.DType, op comm.ReduceOp, dst, a, b []byte) {
	switch dt {
	case backend.Float32:
		if op == comm.Max {
			maxF(view[float32](dst), view[float32](a), view[float32](b))
		} else {
			add(view[float32](dst), view[float32](a), view[float32](b))
		}
	case backend.Int32:
		if op == comm.Max {
			maxI(view[int32](dst), view[int32](a), view[int32](b))
		} else {
			add(view[int32](dst), view[int32](a), view[int32](b))
		}
	case backend.Int64:
		if op == comm.Max {
			maxI(view[int64](dst), view[int64](a), view[int64](b))
		} else {
			add(view[int64](dst), view[int64](a), view[int64](b))
		}
	}
}

// Finish completes a reduction over n ranks: Mean divides by n (float
// division; integers truncate toward zero). Sum and Max need nothing.
func Finish(dt backend.DType, op comm.ReduceOp, dst []byte, n int) {
	if op != comm.Mean || n == 1 {
		return
	}
	switch dt {
	case backend.Float32:
		div(view[float32](dst), float32(n))
	case backend.Int32:
		div(view[int32](dst), int32(n))
	case backend.Int64:
		div(view[int64](dst), int64(n))
	}
}

// add: dst = a + b, unrolled by 8 with bounds checks hoisted.
func add[T number](dst, a, b []T) {
	n := len(dst)
	a, b = a[:n], b[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		d, x, y := dst[i:i+8:i+8], a[i:i+8:i+8], b[i:i+8:i+8]
		d[0] = x[0] + y[0]
		d[1] = x[1] + y[1]
		d[2] = x[2] + y[2]
		d[3] = x[3] + y[3]
		d[4] = x[4] + y[4]
		d[5] = x[5] + y[5]
		d[6] = x[6] + y[6]
		d[7] = x[7] + y[7]
	}
	for ; i < n; i++ {
		dst[i] = a[i] + b[i]
	}
}

// maxF: dst = max(a, b), NaN if either is NaN.
func maxF(dst, a, b []float32) {
	n := len(dst)
	a, b = a[:n], b[:n]
	for i := range dst {
		x, y := a[i], b[i]
		if y > x || y != y {
			x = y
		}
		dst[i] = x
	}
}

func maxI[T ~int32 | ~int64](dst, a, b []T) {
	n := len(dst)
	a, b = a[:n], b[:n]
	for i := range dst {
		dst[i] = max(a[i], b[i])
	}
}

func div[T number](dst []T, n T) {
	for i := range dst {
		dst[i] /= n
	}
}
