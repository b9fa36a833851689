package dataset

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// hostLE reports whether the machine is little-endian; the file format is
// little-endian, so only then can arrays be used without conversion.
var hostLE = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// element is the set of array element types the format stores.
type element interface {
	~int32 | ~int64 | ~float32 | ~uint32
}

func sizeOf[T element]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// asBytes views s as its raw in-memory bytes (no copy).
func asBytes[T element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*sizeOf[T]())
}

// fromBytes views b as a []T (no copy). len(b) must be a multiple of the
// element size and b must be suitably aligned (mmap and make guarantee it).
func fromBytes[T element](b []byte) []T {
	n := len(b) / sizeOf[T]()
	if n == 0 {
		return []T{}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// encodeLE writes s into dst (len(dst) == len(s)*size) in little-endian
// order; used on big-endian hosts only.
func encodeLE[T element](dst []byte, s []T) {
	switch v := any(s).(type) {
	case []int32:
		for i, x := range v {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(x))
		}
	case []int64:
		for i, x := range v {
			binary.LittleEndian.PutUint64(dst[8*i:], uint64(x))
		}
	case []float32:
		for i, x := range v {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(x))
		}
	}
}

// decodeLE converts little-endian bytes into a new []T; used on big-endian
// hosts only.
func decodeLE[T element](b []byte) []T {
	n := len(b) / sizeOf[T]()
	out := make([]T, n)
	switch v := any(out).(type) {
	case []int32:
		for i := range v {
			v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case []int64:
		for i := range v {
			v[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
	case []float32:
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	return out
}
