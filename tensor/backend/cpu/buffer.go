package cpu

import (
	"fmt"
	"unsafe"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Buffer is a host buffer: the slice matching dt holds the elements. Get
// Buffers from Backend.Alloc or the Wrap functions; the zero value has no
// dtype and is rejected by every method.
type Buffer struct {
	dt  backend.DType
	f32 []float32
	i32 []int32
	i64 []int64
	u16 []uint16 // BFloat16 encodings
}

// Len returns the number of elements (0 for a nil or freed buffer).
func (b *Buffer) Len() int {
	if b == nil {
		return 0
	}
	switch b.dt {
	case backend.Float32:
		return len(b.f32)
	case backend.Int32:
		return len(b.i32)
	case backend.Int64:
		return len(b.i64)
	case backend.BFloat16:
		return len(b.u16)
	}
	return 0
}

// DType returns the element type (0 for a nil buffer).
func (b *Buffer) DType() backend.DType {
	if b == nil {
		return 0
	}
	return b.dt
}

// F32 returns the float32 slice behind b without copying, or nil when b is
// not a float32 buffer of this back end.
func F32(b backend.Buffer) []float32 {
	if cb, ok := b.(*Buffer); ok && cb != nil && cb.dt == backend.Float32 {
		return cb.f32
	}
	return nil
}

// I32 returns the int32 slice behind b without copying, or nil.
func I32(b backend.Buffer) []int32 {
	if cb, ok := b.(*Buffer); ok && cb != nil && cb.dt == backend.Int32 {
		return cb.i32
	}
	return nil
}

// I64 returns the int64 slice behind b without copying, or nil.
func I64(b backend.Buffer) []int64 {
	if cb, ok := b.(*Buffer); ok && cb != nil && cb.dt == backend.Int64 {
		return cb.i64
	}
	return nil
}

// BF16 returns the bfloat16 encodings behind b without copying, or nil.
func BF16(b backend.Buffer) []uint16 {
	if cb, ok := b.(*Buffer); ok && cb != nil && cb.dt == backend.BFloat16 {
		return cb.u16
	}
	return nil
}

// WrapF32 makes a Buffer that shares x (no copy).
func WrapF32(x []float32) *Buffer { return &Buffer{dt: backend.Float32, f32: x} }

// WrapI32 makes a Buffer that shares x (no copy).
func WrapI32(x []int32) *Buffer { return &Buffer{dt: backend.Int32, i32: x} }

// WrapI64 makes a Buffer that shares x (no copy).
func WrapI64(x []int64) *Buffer { return &Buffer{dt: backend.Int64, i64: x} }

// Bytes views the elements of b, a CPU buffer, as bytes (no copy; nil
// when b is empty). ok is false when b is not a buffer of this back end
// (another back end's, a nil one or one without a dtype): host code that
// hands buffers to byte-oriented I/O (the host collectives of package
// comm) tells the two apart with it.
func Bytes(b backend.Buffer) (data []byte, ok bool) {
	cb, ok := b.(*Buffer)
	if !ok || cb == nil || cb.dt.Size() == 0 {
		return nil, false
	}
	var p unsafe.Pointer
	switch cb.dt {
	case backend.Float32:
		p = unsafe.Pointer(unsafe.SliceData(cb.f32))
	case backend.Int32:
		p = unsafe.Pointer(unsafe.SliceData(cb.i32))
	case backend.Int64:
		p = unsafe.Pointer(unsafe.SliceData(cb.i64))
	case backend.BFloat16:
		p = unsafe.Pointer(unsafe.SliceData(cb.u16))
	}
	n := cb.Len() * cb.dt.Size()
	if p == nil || n == 0 {
		return nil, true
	}
	return unsafe.Slice((*byte)(p), n), true
}

// WrapBytes makes a Buffer of dt over p (no copy): p's length must be a
// multiple of dt's size and its start aligned to it. For memory that
// arrives as bytes (a shared-memory segment).
func WrapBytes(dt backend.DType, p []byte) (*Buffer, error) {
	es := dt.Size()
	if es == 0 {
		return nil, fmt.Errorf("cpu: WrapBytes of dtype %v", dt)
	}
	if len(p)%es != 0 {
		return nil, fmt.Errorf("cpu: WrapBytes: %d bytes is not a whole number of %v elements", len(p), dt)
	}
	n := len(p) / es
	if n == 0 {
		return &Buffer{dt: dt}, nil
	}
	ptr := unsafe.Pointer(unsafe.SliceData(p))
	if uintptr(ptr)%uintptr(es) != 0 {
		return nil, fmt.Errorf("cpu: WrapBytes: memory at %#x is not aligned to %d bytes for %v", uintptr(ptr), es, dt)
	}
	switch dt {
	case backend.Float32:
		return WrapF32(unsafe.Slice((*float32)(ptr), n)), nil
	case backend.Int32:
		return WrapI32(unsafe.Slice((*int32)(ptr), n)), nil
	case backend.BFloat16:
		return WrapBF16(unsafe.Slice((*uint16)(ptr), n)), nil
	}
	return WrapI64(unsafe.Slice((*int64)(ptr), n)), nil
}

// WrapBF16 makes a BFloat16 Buffer that shares the encodings x (no copy).
func WrapBF16(x []uint16) *Buffer { return &Buffer{dt: backend.BFloat16, u16: x} }

// asBuf checks that b is a live buffer of this back end with dtype dt and
// n elements.
func asBuf(op, name string, b backend.Buffer, dt backend.DType, n int) (*Buffer, error) {
	if err := backend.CheckLen(op, name, b, dt, n); err != nil {
		return nil, err
	}
	cb, ok := b.(*Buffer)
	if !ok {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%s is a %T, not a cpu buffer", name, b)}
	}
	return cb, nil
}

func f32(op, name string, b backend.Buffer, n int) ([]float32, error) {
	cb, err := asBuf(op, name, b, backend.Float32, n)
	if err != nil {
		return nil, err
	}
	return cb.f32, nil
}

func i32(op, name string, b backend.Buffer, n int) ([]int32, error) {
	cb, err := asBuf(op, name, b, backend.Int32, n)
	if err != nil {
		return nil, err
	}
	return cb.i32, nil
}

// i32Any accepts an int32 buffer of any length.
func i32Any(op, name string, b backend.Buffer) ([]int32, error) {
	if b == nil {
		return nil, &backend.ShapeError{Op: op, Msg: name + " is nil"}
	}
	return i32(op, name, b, b.Len())
}

// f32Any accepts a float32 buffer of any length.
func f32Any(op, name string, b backend.Buffer) ([]float32, error) {
	if b == nil {
		return nil, &backend.ShapeError{Op: op, Msg: name + " is nil"}
	}
	return f32(op, name, b, b.Len())
}

// checkIdx returns an IndexError for the first idx[i] outside [0, limit).
func checkIdx(op, name string, idx []int32, limit int) error {
	for i, v := range idx {
		if v < 0 || int(v) >= limit {
			return &backend.IndexError{Op: op, Name: name, Pos: i, Value: int64(v), Limit: limit}
		}
	}
	return nil
}
