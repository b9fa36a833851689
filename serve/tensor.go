package serve

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/serve/servepb"
)

// MaxRank bounds the number of dimensions of a Tensor on the wire.
const MaxRank = 8

// itemSize is the byte size of one element of dt, 0 for an unknown dtype.
func itemSize(dt servepb.DType) int64 {
	switch dt {
	case servepb.DType_DTYPE_INT32, servepb.DType_DTYPE_FLOAT32:
		return 4
	case servepb.DType_DTYPE_INT64:
		return 8
	}
	return 0
}

// CheckTensor validates t as received: a known dtype, at most MaxRank
// dimensions, each >= 0, an element count that does not overflow, and
// exactly count*itemsize bytes of data. It returns the element count.
// field names t in errors. Nothing is allocated from t's claims.
func CheckTensor(t *servepb.Tensor, field string) (int64, error) {
	if t == nil {
		return 0, reqErr(ErrInvalid, field, -1, "missing")
	}
	is := itemSize(t.Dtype)
	if is == 0 {
		return 0, reqErr(ErrInvalid, field, -1, "unknown dtype %d", int32(t.Dtype))
	}
	if len(t.Shape) > MaxRank {
		return 0, reqErr(ErrInvalid, field, -1, "%d dimensions, at most %d", len(t.Shape), MaxRank)
	}
	n := int64(1)
	for i, d := range t.Shape {
		if d < 0 {
			return 0, reqErr(ErrInvalid, field+".shape", i, "%d < 0", d)
		}
		if d > 0 && n > math.MaxInt64/is/d {
			return 0, reqErr(ErrInvalid, field+".shape", i, "element count overflows")
		}
		n *= d
	}
	if int64(len(t.Data)) != n*is {
		return 0, reqErr(ErrInvalid, field+".data", -1, "%d bytes, shape %v of %s needs %d", len(t.Data), t.Shape, t.Dtype, n*is)
	}
	return n, nil
}

// DecodeIDs reads a 1-D int32 or int64 tensor of node IDs, each checked
// in [0, numNodes), at most maxLen of them.
func DecodeIDs(t *servepb.Tensor, field string, numNodes int64, maxLen int) ([]graph.NodeID, error) {
	n, err := CheckTensor(t, field)
	if err != nil {
		return nil, err
	}
	if len(t.Shape) != 1 {
		return nil, reqErr(ErrInvalid, field, -1, "shape %v, want one dimension", t.Shape)
	}
	if t.Dtype != servepb.DType_DTYPE_INT32 && t.Dtype != servepb.DType_DTYPE_INT64 {
		return nil, reqErr(ErrInvalid, field, -1, "dtype %s, want int32 or int64", t.Dtype)
	}
	if n > int64(maxLen) {
		return nil, reqErr(ErrTooLarge, field, -1, "%d IDs, at most %d", n, maxLen)
	}
	ids := make([]graph.NodeID, n)
	for i := range ids {
		var v int64
		if t.Dtype == servepb.DType_DTYPE_INT32 {
			v = int64(int32(binary.LittleEndian.Uint32(t.Data[4*i:])))
		} else {
			v = int64(binary.LittleEndian.Uint64(t.Data[8*i:]))
		}
		if v < 0 || v >= numNodes {
			return nil, reqErr(ErrInvalid, field, i, "node %d not in [0, %d)", v, numNodes)
		}
		ids[i] = graph.NodeID(v)
	}
	return ids, nil
}

// littleEndian is whether this machine stores numbers little-endian, as
// the wire does: then arrays go out as their memory, without a loop.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Int32Tensor encodes v with the given shape (len(v) elements).
func Int32Tensor(v []int32, shape ...int64) *servepb.Tensor {
	b := make([]byte, 4*len(v))
	if littleEndian && len(v) > 0 {
		copy(b, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(b)))
	} else {
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
		}
	}
	return &servepb.Tensor{Dtype: servepb.DType_DTYPE_INT32, Shape: shape, Data: b}
}

// Int64Tensor encodes v as a 1-D tensor.
func Int64Tensor(v []int64) *servepb.Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return &servepb.Tensor{Dtype: servepb.DType_DTYPE_INT64, Shape: []int64{int64(len(v))}, Data: b}
}

// gatherRows returns the [len(ids), dim] float32 tensor of rows ids of
// the row-major matrix x.
func gatherRows(x []float32, dim int, ids []graph.NodeID) *servepb.Tensor {
	b := make([]byte, 4*dim*len(ids))
	gatherRowsInto(b, x, dim, ids)
	return &servepb.Tensor{Dtype: servepb.DType_DTYPE_FLOAT32, Shape: []int64{int64(len(ids)), int64(dim)}, Data: b}
}

// gatherLabels returns the int32 [len(ids)] tensor of labels[ids].
func gatherLabels(labels []int32, ids []graph.NodeID) *servepb.Tensor {
	b := make([]byte, 4*len(ids))
	gatherLabelsInto(b, labels, ids, false)
	return &servepb.Tensor{Dtype: servepb.DType_DTYPE_INT32, Shape: []int64{int64(len(ids))}, Data: b}
}
