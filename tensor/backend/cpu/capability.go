package cpu

import (
	"fmt"
	"unsafe"

	"github.com/strata-gnn/strata/tensor/backend"
)

// The optional capabilities of package backend that make sense on the
// host: every call completes before it returns and all memory is host
// memory, so they are trivial.
var (
	_ backend.Slicer        = (*Buffer)(nil)
	_ backend.Siblings      = (*Backend)(nil)
	_ backend.Sibling       = (*Backend)(nil)
	_ backend.Fences        = (*Backend)(nil)
	_ backend.PinnedMemory  = (*Backend)(nil)
	_ backend.SparseBuilder = (*Backend)(nil)
	_ backend.CSRBuffers    = (*Sparse)(nil)
)

// CSR returns buffers sharing the matrix's row pointers and column
// indices.
func (s *Sparse) CSR() (indptr, indices backend.Buffer) {
	return WrapI64(s.indptr), WrapI32(s.indices)
}

// Slice returns a buffer sharing elements [off, off+n) of b's slice.
func (b *Buffer) Slice(off, n int) (backend.Buffer, error) {
	if b == nil || off < 0 || n < 0 || off > b.Len() || n > b.Len()-off {
		return nil, fmt.Errorf("cpu: view [%d, %d+%d) of a %d-element buffer", off, off, n, b.Len())
	}
	v := &Buffer{dt: b.dt}
	switch b.dt {
	case backend.Float32:
		v.f32 = b.f32[off : off+n : off+n]
	case backend.Int32:
		v.i32 = b.i32[off : off+n : off+n]
	case backend.Int64:
		v.i64 = b.i64[off : off+n : off+n]
	case backend.BFloat16:
		v.u16 = b.u16[off : off+n : off+n]
	}
	return v, nil
}

// span returns the address range of b's elements (0, 0 when empty).
func (b *Buffer) span() (lo, hi uintptr) {
	if b == nil {
		return 0, 0
	}
	var p unsafe.Pointer
	switch b.dt {
	case backend.Float32:
		p = unsafe.Pointer(unsafe.SliceData(b.f32))
	case backend.Int32:
		p = unsafe.Pointer(unsafe.SliceData(b.i32))
	case backend.Int64:
		p = unsafe.Pointer(unsafe.SliceData(b.i64))
	case backend.BFloat16:
		p = unsafe.Pointer(unsafe.SliceData(b.u16))
	}
	n := uintptr(b.Len() * b.dt.Size())
	if p == nil || n == 0 {
		return 0, 0
	}
	return uintptr(p), uintptr(p) + n
}

// Overlaps reports whether b and o (a CPU buffer) share memory.
func (b *Buffer) Overlaps(o backend.Buffer) bool {
	c, ok := o.(*Buffer)
	if !ok {
		return false
	}
	la, ha := b.span()
	lb, hb := c.span()
	return la != 0 && lb != 0 && la < hb && lb < ha
}

// Truncate shortens b to its first n elements.
func (b *Buffer) Truncate(n int) error {
	if b == nil || n < 0 || n > b.Len() {
		return fmt.Errorf("cpu: Truncate to %d elements of a %d-element buffer", n, b.Len())
	}
	switch b.dt {
	case backend.Float32:
		b.f32 = b.f32[:n]
	case backend.Int32:
		b.i32 = b.i32[:n]
	case backend.Int64:
		b.i64 = b.i64[:n]
	case backend.BFloat16:
		b.u16 = b.u16[:n]
	}
	return nil
}

// Sibling returns another CPU back end with the same settings: the host
// has one memory and no queue, so handles are interchangeable.
func (b *Backend) Sibling(backend.SiblingOptions) (backend.Sibling, error) {
	return &Backend{useBLAS: b.useBLAS, maxBytes: b.maxBytes, prec: b.prec}, nil
}

// Close does nothing (a CPU back end holds no resources).
func (b *Backend) Close() error { return nil }

// SameDevice reports whether o is a CPU back end (they share the host).
func (b *Backend) SameDevice(o backend.Backend) bool {
	c, ok := o.(*Backend)
	return ok && c != nil
}

// Owns reports whether b is a CPU buffer (every CPU handle's).
func (b *Backend) Owns(buf backend.Buffer) bool {
	c, ok := buf.(*Buffer)
	return ok && c != nil
}

// QueuePriority is 0: the host has no queue.
func (b *Backend) QueuePriority() int { return 0 }

// Alias returns a buffer over src's slice (src a CPU buffer); freeing it
// leaves src alone.
func (b *Backend) Alias(src backend.Buffer) (backend.Buffer, error) {
	s, ok := src.(*Buffer)
	if !ok || s == nil || s.dt == 0 {
		return nil, fmt.Errorf("cpu: Alias of a %T, not a cpu buffer", src)
	}
	return &Buffer{dt: s.dt, f32: s.f32, i32: s.i32, i64: s.i64, u16: s.u16}, nil
}

// hostFence is the CPU's fence: work is done when its call returns.
type hostFence struct{}

func (hostFence) Record() error { return nil }
func (hostFence) Wait() error   { return nil }
func (hostFence) Close() error  { return nil }

// NewFence returns a fence that is always reached.
func (b *Backend) NewFence() (backend.Fence, error) { return hostFence{}, nil }

// hostMem is the CPU's pinned memory: 8-byte aligned Go memory, its
// device address the host address (the CPU's kernels are host code).
type hostMem struct {
	words  []uint64
	bytes  uint64
	mapped bool
}

// AllocPinned returns bytes of zeroed host memory.
func (b *Backend) AllocPinned(bytes uint64, mapped bool) (backend.HostBuffer, error) {
	if bytes == 0 || bytes > uint64(b.maxBytes) {
		return nil, fmt.Errorf("cpu: AllocPinned of %d bytes: want 1 to %d", bytes, b.maxBytes)
	}
	return &hostMem{words: make([]uint64, (bytes+7)/8), bytes: bytes, mapped: mapped}, nil
}

func (h *hostMem) ptr() unsafe.Pointer {
	if len(h.words) == 0 {
		return nil
	}
	return unsafe.Pointer(&h.words[0])
}

func (h *hostMem) Bytes() []byte       { return unsafe.Slice((*byte)(h.ptr()), h.bytes) }
func (h *hostMem) Float32s() []float32 { return unsafe.Slice((*float32)(h.ptr()), h.bytes/4) }
func (h *hostMem) Int32s() []int32     { return unsafe.Slice((*int32)(h.ptr()), h.bytes/4) }
func (h *hostMem) Int64s() []int64     { return unsafe.Slice((*int64)(h.ptr()), h.bytes/8) }

func (h *hostMem) DeviceAddr() backend.DevPtr {
	if !h.mapped {
		return 0
	}
	return backend.DevPtr(uintptr(h.ptr()))
}

func (h *hostMem) Free() error {
	h.words, h.bytes = nil, 0
	return nil
}

// SparseFromBuffers wraps the int64 indptr and int32 indices slices of
// two CPU buffers (no copy) after checking them as NewSparse does.
func (b *Backend) SparseFromBuffers(rows, cols int, indptr, indices backend.Buffer) (backend.Sparse, error) {
	const op = "SparseFromBuffers"
	if rows < 0 || rows >= backend.MaxElems {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%d rows out of range", rows)}
	}
	p, err := asBuf(op, "indptr", indptr, backend.Int64, rows+1)
	if err != nil {
		return nil, err
	}
	if indices == nil {
		return nil, &backend.ShapeError{Op: op, Msg: "indices is nil"}
	}
	c, err := asBuf(op, "indices", indices, backend.Int32, indices.Len())
	if err != nil {
		return nil, err
	}
	if err := backend.CheckCSR(op, rows, cols, p.i64, c.i32); err != nil {
		return nil, err
	}
	return &Sparse{rows: rows, cols: cols, indptr: p.i64, indices: c.i32}, nil
}

// DownloadAsync implements backend.AsyncDownload: the CPU copies at once.
func (b *Backend) DownloadAsync(dst backend.HostBuffer, off uint64, src backend.Buffer, bytes uint64) error {
	h, ok := dst.(*hostMem)
	if !ok || off > h.bytes || bytes > h.bytes-off {
		return fmt.Errorf("cpu: DownloadAsync: %d bytes at %d do not fit the host buffer", bytes, off)
	}
	raw, ok := Bytes(src)
	if !ok {
		return fmt.Errorf("cpu: DownloadAsync: %T is not a buffer of the CPU back end", src)
	}
	if bytes > uint64(len(raw)) {
		return fmt.Errorf("cpu: DownloadAsync: %d bytes of a %d-byte buffer", bytes, len(raw))
	}
	copy(h.Bytes()[off:off+bytes], raw[:bytes])
	return nil
}
