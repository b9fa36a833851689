package cuda

import (
	"fmt"
	"math"
	"unsafe"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Buffer is device memory holding Len() elements of one dtype. A freed
// buffer has length 0, so later use fails validation instead of touching
// memory that was handed out again.
type Buffer struct {
	dev  *Device
	ptr  cu.DevPtr
	n    int
	dt   backend.DType
	size uint64 // allocator block size (0 for views and empty buffers)
}

// Len returns the number of elements (0 for nil or freed buffers).
func (b *Buffer) Len() int {
	if b == nil {
		return 0
	}
	return b.n
}

// DType returns the element type.
func (b *Buffer) DType() backend.DType {
	if b == nil {
		return 0
	}
	return b.dt
}

// Ptr returns the device address of the first element (0 when empty).
func (b *Buffer) Ptr() cu.DevPtr {
	if b == nil {
		return 0
	}
	return b.ptr
}

// Truncate shortens the buffer to its first n elements (n <= Len()); the
// memory stays allocated until Free. Samplers allocate for an upper bound
// and truncate once the device reports the real size.
func (b *Buffer) Truncate(n int) error {
	if b == nil || n < 0 || n > b.n {
		return fmt.Errorf("cuda: Truncate to %d elements of a %d-element buffer", n, b.Len())
	}
	b.n = n
	return nil
}

// View returns a buffer aliasing elements [off, off+n) of b. It does not
// own memory: freeing it does nothing, and it must not outlive b.
func (b *Buffer) View(off, n int) *Buffer {
	if b == nil || off < 0 || n < 0 || off+n > b.n {
		return &Buffer{dev: b.Device(), dt: b.DType()}
	}
	return &Buffer{dev: b.dev, ptr: b.ptr + cu.DevPtr(off*b.dt.Size()), n: n, dt: b.dt}
}

// Alias returns a buffer of d over src's memory, where src is a buffer
// of another handle of the same GPU (Open called twice for one ordinal:
// one context, two streams). It owns nothing: freeing it does nothing. The
// caller orders the streams (src's writes before d's reads) and frees src
// on its own handle only after d's stream is done with the alias; pipeline
// stages use it to hand a batch on without copying it (backend.Siblings).
func (d *Device) Alias(src backend.Buffer) (backend.Buffer, error) {
	sb, ok := src.(*Buffer)
	if !ok && src != nil {
		return nil, fmt.Errorf("cuda: Alias of a %T, not a cuda buffer", src)
	}
	if sb == nil || sb.dev == nil {
		return nil, fmt.Errorf("cuda: Alias of a nil buffer")
	}
	if sb.dev.ordinal != d.ordinal {
		return nil, fmt.Errorf("cuda: Alias of a buffer of %s on %s: not the same GPU", sb.dev.name, d.name)
	}
	if sb.n > 0 && sb.ptr == 0 {
		return nil, fmt.Errorf("cuda: Alias of a freed buffer")
	}
	return &Buffer{dev: d, ptr: sb.ptr, n: sb.n, dt: sb.dt}, nil
}

// Overlaps reports whether b and o (a buffer of this GPU) share memory.
func (b *Buffer) Overlaps(o backend.Buffer) bool {
	c, ok := o.(*Buffer)
	if !ok || b == nil || c == nil || b.n == 0 || c.n == 0 || b.ptr == 0 || c.ptr == 0 {
		return false
	}
	if b.dev != nil && c.dev != nil && b.dev.ordinal != c.dev.ordinal {
		return false
	}
	return b.ptr < c.ptr+cu.DevPtr(c.n*c.dt.Size()) && c.ptr < b.ptr+cu.DevPtr(b.n*b.dt.Size())
}

// Slice returns a buffer aliasing elements [off, off+n) of b
// (backend.Slicer); unlike View it reports a window outside b.
func (b *Buffer) Slice(off, n int) (backend.Buffer, error) {
	if b == nil || off < 0 || n < 0 || off > b.n || n > b.n-off {
		return nil, fmt.Errorf("cuda: view [%d, %d+%d) of a %d-element buffer", off, off, n, b.Len())
	}
	return b.View(off, n), nil
}

// Device returns the device the buffer lives on.
func (b *Buffer) Device() *Device {
	if b == nil {
		return nil
	}
	return b.dev
}

// maxElems bounds element counts so byte sizes never overflow.
const maxElems = backend.MaxElems

// Alloc returns a zero-filled buffer of n elements.
func (d *Device) Alloc(dt backend.DType, n int) (backend.Buffer, error) {
	if dt.Size() == 0 {
		return nil, &backend.ShapeError{Op: "Alloc", Msg: fmt.Sprintf("unknown dtype %v", dt)}
	}
	if n < 0 || n > maxElems || uint64(n)*uint64(dt.Size()) > d.total {
		return nil, &backend.ShapeError{Op: "Alloc", Msg: fmt.Sprintf("%d elements of %v: out of range (device has %d bytes)", n, dt, d.total)}
	}
	leave, err := d.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	b, err := d.allocLocked(dt, n)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		if err := d.timed("memset", func() error { return cu.MemsetD8Async(b.ptr, 0, uint64(n*dt.Size()), d.stream) }); err != nil {
			d.freeLocked(b)
			return nil, err
		}
	}
	return b, nil
}

// EnvPoison, set to 1, makes AllocRaw fill new buffers with NaN bytes
// (0xff), so that code wrongly relying on zeros fails in tests.
const EnvPoison = "STRATA_CUDA_POISON"

// AllocRaw returns a buffer of n elements whose contents are undefined,
// for outputs that the next operation overwrites completely: it saves
// Alloc's zero fill, a device memset per buffer (package autograd uses it
// for op outputs and fresh gradients when the back end has it).
func (d *Device) AllocRaw(dt backend.DType, n int) (backend.Buffer, error) {
	if dt.Size() == 0 {
		return nil, &backend.ShapeError{Op: "AllocRaw", Msg: fmt.Sprintf("unknown dtype %v", dt)}
	}
	if n < 0 || n > maxElems || uint64(n)*uint64(dt.Size()) > d.total {
		return nil, &backend.ShapeError{Op: "AllocRaw", Msg: fmt.Sprintf("%d elements of %v: out of range (device has %d bytes)", n, dt, d.total)}
	}
	leave, err := d.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	b, err := d.allocLocked(dt, n)
	if err != nil {
		return nil, err
	}
	if d.poison && n > 0 {
		if err := d.timed("memset", func() error { return cu.MemsetD8Async(b.ptr, 0xff, uint64(n*dt.Size()), d.stream) }); err != nil {
			d.freeLocked(b)
			return nil, err
		}
	}
	return b, nil
}

// allocLocked returns an uninitialized buffer.
func (d *Device) allocLocked(dt backend.DType, n int) (*Buffer, error) {
	b := &Buffer{dev: d, n: n, dt: dt}
	if n == 0 {
		return b, nil
	}
	p, size, err := d.alloc.get(uint64(n) * uint64(dt.Size()))
	if err != nil {
		return nil, err
	}
	b.ptr, b.size = p, size
	return b, nil
}

func (d *Device) freeLocked(b *Buffer) {
	if b == nil || b.dev != d {
		return
	}
	if b.size > 0 {
		d.alloc.put(b.ptr, b.size)
	}
	b.ptr, b.n, b.size = 0, 0, 0
}

// Free returns the buffer to the allocator cache. Freeing nil, a foreign
// or an already freed buffer is a no-op.
func (d *Device) Free(buf backend.Buffer) {
	b, ok := buf.(*Buffer)
	if !ok || b == nil || b.dev != d || b.size == 0 {
		if ok && b != nil && b.dev == d {
			b.ptr, b.n = 0, 0
		}
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.freeLocked(b)
}

// asBuf checks that b is a live buffer of this device with dtype dt and n
// elements.
func (d *Device) asBuf(op, name string, b backend.Buffer, dt backend.DType, n int) (*Buffer, error) {
	if err := backend.CheckLen(op, name, b, dt, n); err != nil {
		return nil, err
	}
	cb, ok := b.(*Buffer)
	if !ok {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%s is a %T, not a cuda buffer", name, b)}
	}
	if cb.dev != d {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%s lives on %s, not %s", name, cb.dev.name, d.name)}
	}
	return cb, nil
}

func (d *Device) f32(op, name string, b backend.Buffer, n int) (*Buffer, error) {
	return d.asBuf(op, name, b, backend.Float32, n)
}

// float checks that b is a float32 or bfloat16 buffer of n elements.
func (d *Device) float(op, name string, b backend.Buffer, n int) (*Buffer, error) {
	if b == nil {
		return nil, &backend.ShapeError{Op: op, Msg: name + " is nil"}
	}
	dt := b.DType()
	if dt != backend.Float32 && dt != backend.BFloat16 {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%s has dtype %s, want float32 or bfloat16", name, dt)}
	}
	return d.asBuf(op, name, b, dt, n)
}

func (d *Device) i32(op, name string, b backend.Buffer, n int) (*Buffer, error) {
	return d.asBuf(op, name, b, backend.Int32, n)
}

func (d *Device) f32Any(op, name string, b backend.Buffer) (*Buffer, error) {
	if b == nil {
		return nil, &backend.ShapeError{Op: op, Msg: name + " is nil"}
	}
	return d.f32(op, name, b, b.Len())
}

func (d *Device) i32Any(op, name string, b backend.Buffer) (*Buffer, error) {
	if b == nil {
		return nil, &backend.ShapeError{Op: op, Msg: name + " is nil"}
	}
	return d.i32(op, name, b, b.Len())
}

// hostSlice returns the element count, dtype and address of a host slice.
func hostSlice(op string, host any) (int, backend.DType, unsafe.Pointer, error) {
	switch h := host.(type) {
	case []float32:
		if len(h) == 0 {
			return 0, backend.Float32, nil, nil
		}
		return len(h), backend.Float32, unsafe.Pointer(&h[0]), nil
	case []int32:
		if len(h) == 0 {
			return 0, backend.Int32, nil, nil
		}
		return len(h), backend.Int32, unsafe.Pointer(&h[0]), nil
	case []int64:
		if len(h) == 0 {
			return 0, backend.Int64, nil, nil
		}
		return len(h), backend.Int64, unsafe.Pointer(&h[0]), nil
	case []uint16:
		if len(h) == 0 {
			return 0, backend.BFloat16, nil, nil
		}
		return len(h), backend.BFloat16, unsafe.Pointer(&h[0]), nil
	}
	return 0, 0, nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("host slice is %T, want []float32, []int32, []int64 or []uint16", host)}
}

// Upload copies host data into dst.
func (d *Device) Upload(dst backend.Buffer, src any) error {
	const op = "Upload"
	if dst == nil {
		return &backend.ShapeError{Op: op, Msg: "buffer is nil"}
	}
	n, dt, p, err := hostSlice(op, src)
	if err != nil {
		return err
	}
	b, err := d.asBuf(op, "buffer", dst, dt, n)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	return d.uploadLocked(b.ptr, p, uint64(n*dt.Size()))
}

// uploadLocked copies host memory to the device: small copies through the
// pinned ring (asynchronous), large ones directly from pageable memory
// (the driver stages them and synchronizes the stream first).
func (d *Device) uploadLocked(dst cu.DevPtr, src unsafe.Pointer, n uint64) error {
	if n <= stageMax && d.stage.host != nil {
		return d.timed("memcpy HtoD", func() error { return d.stage.upload(d, dst, src, n) })
	}
	return d.timed("memcpy HtoD", func() error { return cu.MemcpyHtoDAsync(dst, src, n, d.stream) })
}

// Download copies src into host memory dst (waits for queued work).
func (d *Device) Download(dst any, src backend.Buffer) error {
	const op = "Download"
	if src == nil {
		return &backend.ShapeError{Op: op, Msg: "buffer is nil"}
	}
	n, dt, p, err := hostSlice(op, dst)
	if err != nil {
		return err
	}
	b, err := d.asBuf(op, "buffer", src, dt, n)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	if err := cu.MemcpyDtoHAsync(p, b.ptr, uint64(n*dt.Size()), d.stream); err != nil {
		return err
	}
	return d.stream.Synchronize()
}

// Copy copies src into dst (same dtype and length).
func (d *Device) Copy(dst, src backend.Buffer) error {
	const op = "Copy"
	if src == nil {
		return &backend.ShapeError{Op: op, Msg: "src is nil"}
	}
	s, err := d.asBuf(op, "src", src, src.DType(), src.Len())
	if err != nil {
		return err
	}
	t, err := d.asBuf(op, "dst", dst, s.dt, s.n)
	if err != nil {
		return err
	}
	if s.n == 0 || s.ptr == t.ptr {
		return nil
	}
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	return d.timed("memcpy DtoD", func() error { return cu.MemcpyDtoDAsync(t.ptr, s.ptr, uint64(s.n*s.dt.Size()), d.stream) })
}

// Convert casts src into dst (float32 to bfloat16 rounds to nearest even,
// bfloat16 to float32 is exact; the same dtype copies).
func (d *Device) Convert(dst, src backend.Buffer) error {
	const op = "Convert"
	if src == nil || dst == nil {
		return &backend.ShapeError{Op: op, Msg: "nil buffer"}
	}
	for _, x := range []struct {
		name string
		buf  backend.Buffer
	}{{"src", src}, {"dst", dst}} {
		if dt := x.buf.DType(); dt != backend.Float32 && dt != backend.BFloat16 {
			return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%s has dtype %s, want float32 or bfloat16", x.name, dt)}
		}
	}
	s, err := d.asBuf(op, "src", src, src.DType(), src.Len())
	if err != nil {
		return err
	}
	t, err := d.asBuf(op, "dst", dst, dst.DType(), s.n)
	if err != nil {
		return err
	}
	if s.dt == t.dt {
		return d.Copy(dst, src)
	}
	kernel := "convert_f32_bf16"
	if s.dt == backend.BFloat16 {
		kernel = "convert_bf16_f32"
	}
	return d.run(func() error {
		return d.launchN(kernel, int64(s.n), uint64(t.ptr), uint64(s.ptr), cu.I64(int64(s.n)))
	})
}

// Fill sets every element of the float32 buffer dst to v.
func (d *Device) Fill(dst backend.Buffer, v float32) error {
	b, err := d.f32Any("Fill", "dst", dst)
	if err != nil {
		return err
	}
	if b.n == 0 {
		return nil
	}
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	return d.timed("memset", func() error { return cu.MemsetD32Async(b.ptr, math.Float32bits(v), uint64(b.n), d.stream) })
}
