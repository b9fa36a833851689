package cpu

import (
	"encoding/binary"
	"math"
	"testing"
	"unsafe"

	"github.com/strata-gnn/strata/tensor/backend"
)

// TestBytesViewsTheElements: Bytes shares the buffer's memory (writes
// through the bytes show in the slice), views exactly its elements (a
// view of a view too), and refuses what is not a CPU buffer.
func TestBytesViewsTheElements(t *testing.T) {
	x := []float32{1, 2, 3, 4}
	b, ok := Bytes(WrapF32(x))
	if !ok || len(b) != 16 {
		t.Fatalf("Bytes of 4 float32 = %d bytes, ok %v", len(b), ok)
	}
	binary.LittleEndian.PutUint32(b[8:], math.Float32bits(-7))
	if x[2] != -7 {
		t.Fatalf("a write through the bytes did not reach the slice: %v", x)
	}
	v, err := WrapI64([]int64{10, 20, 30}).Slice(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := Bytes(v); !ok || len(b) != 16 || binary.LittleEndian.Uint64(b) != 20 || binary.LittleEndian.Uint64(b[8:]) != 30 {
		t.Fatalf("Bytes of a view = %v, %v", b, ok)
	}
	if b, ok := Bytes(WrapI32(nil)); !ok || b != nil {
		t.Fatalf("Bytes of an empty buffer = %v, %v; want nil, true", b, ok)
	}
	for name, buf := range map[string]backend.Buffer{"nil": nil, "nil *Buffer": (*Buffer)(nil), "no dtype": &Buffer{}, "foreign": foreign{}} {
		if b, ok := Bytes(buf); ok || b != nil {
			t.Errorf("Bytes(%s) = %v, %v; want nil, false", name, b, ok)
		}
	}
}

type foreign struct{}

func (foreign) Len() int             { return 1 }
func (foreign) DType() backend.DType { return backend.Float32 }

// TestWrapBytes: WrapBytes shares the bytes as elements of the dtype and
// refuses lengths that are not whole elements, misaligned memory and
// dtypes without a size.
func TestWrapBytes(t *testing.T) {
	words := make([]uint64, 4) // 8-byte aligned memory
	p := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 32)
	for _, dt := range []backend.DType{backend.Float32, backend.Int32, backend.Int64} {
		b, err := WrapBytes(dt, p)
		if err != nil {
			t.Fatal(err)
		}
		if b.DType() != dt || b.Len() != 32/dt.Size() {
			t.Fatalf("WrapBytes(%v, 32 bytes) = %v x %d", dt, b.DType(), b.Len())
		}
		back, ok := Bytes(b)
		if !ok || &back[0] != &p[0] || len(back) != 32 {
			t.Fatalf("WrapBytes(%v) does not share the bytes", dt)
		}
	}
	words[1] = uint64(math.Float32bits(2.5)) // float32 element 2 on a little-endian host
	if f := F32(mustWrap(t, backend.Float32, p)); f[2] != 2.5 {
		t.Fatalf("element 2 = %v, want 2.5", f[2])
	}
	if b, err := WrapBytes(backend.Int32, p[:0]); err != nil || b.Len() != 0 || b.DType() != backend.Int32 {
		t.Fatalf("WrapBytes of no bytes = %v, %v", b, err)
	}
	for name, c := range map[string]struct {
		dt backend.DType
		p  []byte
	}{
		"partial element": {backend.Int64, p[:12]},
		"misaligned":      {backend.Float32, p[2:10]},
		"no dtype":        {backend.DType(0), p},
	} {
		if _, err := WrapBytes(c.dt, c.p); err == nil {
			t.Errorf("%s: WrapBytes succeeded", name)
		}
	}
}

func mustWrap(t *testing.T, dt backend.DType, p []byte) *Buffer {
	t.Helper()
	b, err := WrapBytes(dt, p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
