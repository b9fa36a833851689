package cuda

import (
	"fmt"
	"unsafe"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
)

const threads = 256

// launchN runs kernel name over n items with grid-stride loops: 256
// threads a block, at most 32 blocks per SM.
func (d *Device) launchN(name string, n int64, args ...uint64) error {
	if n <= 0 {
		return nil
	}
	f, ok := d.fns[name]
	if !ok {
		return fmt.Errorf("cuda: kernel %q not loaded", name)
	}
	blocks := min((n+threads-1)/threads, int64(d.sms*32))
	if d.prof.on {
		return d.prof.time(d, name, func() error { return cu.Launch(f, cu.D1(int(blocks)), cu.D1(threads), 0, d.stream, args...) })
	}
	return cu.Launch(f, cu.D1(int(blocks)), cu.D1(threads), 0, d.stream, args...)
}

// launchWarps runs kernel name with one warp per row.
func (d *Device) launchWarps(name string, rows int64, args ...uint64) error {
	return d.launchN(name, rows*32, args...)
}

// launchGrid runs kernel name with an explicit shape.
func (d *Device) launchGrid(name string, grid, block cu.Dim3, args ...uint64) error {
	f, ok := d.fns[name]
	if !ok {
		return fmt.Errorf("cuda: kernel %q not loaded", name)
	}
	if d.prof.on {
		return d.prof.time(d, name, func() error { return cu.Launch(f, grid, block, 0, d.stream, args...) })
	}
	return cu.Launch(f, grid, block, 0, d.stream, args...)
}

// Locked gives code running inside Device.Do access to the device's
// stream, allocator and kernels while the device lock is held. It is the
// back end's backend.Queue (Device.Enqueue hands it out as one).
type Locked struct{ d *Device }

var _ backend.Queue = (*Locked)(nil)

// Device returns the device.
func (l *Locked) Device() *Device { return l.d }

// Stream returns the device's stream.
func (l *Locked) Stream() cu.Stream { return l.d.stream }

// Alloc returns an uninitialized buffer from the caching allocator.
func (l *Locked) Alloc(dt backend.DType, n int) (*Buffer, error) { return l.d.allocLocked(dt, n) }

// AllocRaw is Alloc for backend.Queue: a buffer of n elements with
// undefined contents.
func (l *Locked) AllocRaw(dt backend.DType, n int) (backend.Buffer, error) {
	if dt.Size() == 0 || n < 0 || n > maxElems {
		return nil, &backend.ShapeError{Op: "AllocRaw", Msg: fmt.Sprintf("%d elements of %v: out of range", n, dt)}
	}
	b, err := l.d.allocLocked(dt, n)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Free returns a buffer of this device to the allocator (other buffers,
// views and nil are left alone).
func (l *Locked) Free(b backend.Buffer) {
	if cb, ok := b.(*Buffer); ok {
		l.d.freeLocked(cb)
	}
}

// buf returns b as a buffer of this GPU (of this handle or a sibling);
// nil stays nil.
func (l *Locked) buf(op, name string, b backend.Buffer) (*Buffer, error) {
	if b == nil {
		return nil, nil
	}
	cb, ok := b.(*Buffer)
	if !ok {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%s is a %T, not a cuda buffer", name, b)}
	}
	if cb != nil && cb.dev != nil && cb.dev.ordinal != l.d.ordinal {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%s lives on %s, not %s", name, cb.dev.name, l.d.name)}
	}
	return cb, nil
}

// Launch1D runs f over n items with grid-stride loops (256 threads a block).
func (l *Locked) Launch1D(f cu.Function, n int64, args ...uint64) error {
	if n <= 0 {
		return nil
	}
	blocks := min((n+threads-1)/threads, int64(l.d.sms*32))
	return l.LaunchShape(f, cu.D1(int(blocks)), cu.D1(threads), 0, args...)
}

// Launch runs kernel k (from LoadKernels) over n items as Launch1D does,
// with buffer arguments passed as their device addresses.
func (l *Locked) Launch(k backend.Kernel, n int64, args ...backend.Arg) error {
	if len(args) > cu.MaxParams {
		return fmt.Errorf("cuda: Launch: %d parameters, at most %d", len(args), cu.MaxParams)
	}
	var vals [cu.MaxParams]uint64
	for i, a := range args {
		b := a.Buffer()
		if b == nil {
			vals[i] = a.Bits()
			continue
		}
		cb, ok := b.(*Buffer)
		if !ok || cb != nil && cb.dev != nil && cb.dev.ordinal != l.d.ordinal {
			_, err := l.buf("Launch", fmt.Sprintf("argument %d", i), b)
			return err
		}
		vals[i] = uint64(cb.Ptr())
	}
	return l.Launch1D(cu.Function(k), n, vals[:len(args)]...)
}

// LaunchShape runs f with an explicit shape on the device's stream.
func (l *Locked) LaunchShape(f cu.Function, grid, block cu.Dim3, sharedBytes uint32, args ...uint64) error {
	if l.d.prof.on {
		return l.d.prof.time(l.d, l.d.fnName(f), func() error { return cu.Launch(f, grid, block, sharedBytes, l.d.stream, args...) })
	}
	return cu.Launch(f, grid, block, sharedBytes, l.d.stream, args...)
}

// Sync waits for the stream.
func (l *Locked) Sync() error { return l.d.stream.Synchronize() }

// Timed queues what fn queues as one op named name in the device's
// profile (StartProfile): for work queued outside the Device, such as a
// collective's kernels.
func (l *Locked) Timed(name string, fn func() error) error { return l.d.timed(name, fn) }

// ScanI64 writes the exclusive prefix sum of in[0:n] to out[0:n] (int64
// buffers on this device) and returns nothing on the host.
func (l *Locked) ScanI64(out, in backend.Buffer, n int) error {
	o, err := l.buf("ScanI64", "out", out)
	if err != nil {
		return err
	}
	i, err := l.buf("ScanI64", "in", in)
	if err != nil {
		return err
	}
	if o == nil || i == nil {
		return &backend.ShapeError{Op: "ScanI64", Msg: "nil buffer"}
	}
	return l.d.scanI64(o.ptr, i.ptr, int64(n))
}

// Bucket groups positions 0..n-1 of the int32 keys by key in
// [0, nkeys), keeping positions in increasing order within a key (a
// stable counting sort): the positions with key k are
// order[ptr[k]:ptr[k+1]]. ptr (int64, nkeys+2 entries: the last bucket
// collects out-of-range keys) and order (int32, n) are new buffers.
func (l *Locked) Bucket(keys *Buffer, nkeys int, errSlot uint64) (ptr, order *Buffer, err error) {
	return l.d.bucket(keys, nkeys, errSlot)
}

// Memset sets every byte of b to v.
func (l *Locked) Memset(b backend.Buffer, v byte) error {
	cb, err := l.buf("Memset", "buffer", b)
	if err != nil || cb == nil || cb.n == 0 {
		return err
	}
	return l.d.timed("memset", func() error { return cu.MemsetD8Async(cb.ptr, v, uint64(cb.n*cb.dt.Size()), l.d.stream) })
}

// UploadFrom queues a copy of len(src) elements into dst from a host
// slice ([]float32, []int32, []int64 or []uint16 of dst's dtype, at most dst.Len()
// elements). Small copies go through the device's pinned ring, so src may
// be reused as soon as UploadFrom returns.
func (l *Locked) UploadFrom(dst backend.Buffer, src any) error {
	n, dt, p, err := hostSlice("UploadFrom", src)
	if err != nil {
		return err
	}
	d, err := l.buf("UploadFrom", "dst", dst)
	if err != nil {
		return err
	}
	if d == nil || dt != d.dt || n > d.n {
		return fmt.Errorf("cuda: UploadFrom: %d elements of %v into a buffer of %d %v", n, dt, d.Len(), d.DType())
	}
	if n == 0 {
		return nil
	}
	return l.d.uploadLocked(d.ptr, p, uint64(n*dt.Size()))
}

// Copy queues a copy of src into dst (same dtype and length; either may
// be a buffer of a sibling handle of this GPU).
func (l *Locked) Copy(dst, src backend.Buffer) error {
	s, err := l.buf("Copy", "src", src)
	if err != nil {
		return err
	}
	d, err := l.buf("Copy", "dst", dst)
	if err != nil {
		return err
	}
	if s == nil || d == nil || s.dt != d.dt || s.n != d.n {
		return &backend.ShapeError{Op: "Copy", Msg: fmt.Sprintf("copy of %d %v into %d %v", s.Len(), s.DType(), d.Len(), d.DType())}
	}
	if s.n == 0 || s.ptr == d.ptr {
		return nil
	}
	return l.d.timed("memcpy DtoD", func() error { return cu.MemcpyDtoDAsync(d.ptr, s.ptr, uint64(s.n*s.dt.Size()), l.d.stream) })
}

// CopyToHost queues a copy of src's first bytes into pinned host memory
// (a *HostBuffer) at byte offset off; read it after Sync.
func (l *Locked) CopyToHost(dst backend.HostBuffer, off uint64, src backend.Buffer, bytes uint64) error {
	h, _ := dst.(*HostBuffer)
	s, err := l.buf("CopyToHost", "src", src)
	if err != nil {
		return err
	}
	if h == nil || s == nil || off > h.bytes || bytes > h.bytes-off || bytes > uint64(s.n*s.dt.Size()) {
		return fmt.Errorf("cuda: CopyToHost: %d bytes do not fit", bytes)
	}
	if bytes == 0 {
		return nil
	}
	return cu.MemcpyDtoHAsync(unsafe.Add(h.p, off), s.ptr, bytes, l.d.stream)
}

// IndexSlot reserves a device index-check slot (see the package doc) for
// argument name of op, checking the int32 buffer idx against [0, limit):
// kernels call index_error(slot, pos) from kernels/common.cuh, and the
// next Synchronize reports the first bad position as a *backend.IndexError.
func (l *Locked) IndexSlot(op, name string, idx backend.Buffer, limit int) (uint64, error) {
	b, err := l.buf(op, name, idx)
	if err != nil {
		return 0, err
	}
	return l.d.checks.slot(l.d, op, name, b, limit)
}

// Aligned reports whether b (a buffer of this GPU) starts at a multiple
// of bytes.
func (l *Locked) Aligned(b backend.Buffer, bytes int) bool {
	cb, err := l.buf("Aligned", "buffer", b)
	return err == nil && bytes > 0 && uint64(cb.Ptr())%uint64(bytes) == 0
}

// Mark records f (from NewFence on this GPU) at the current end of the
// stream.
func (l *Locked) Mark(f backend.Fence) error {
	cf, ok := f.(*fence)
	if !ok || cf == nil || cf.ev == 0 {
		return fmt.Errorf("cuda: Mark of a %T that is not an open cuda fence", f)
	}
	if cf.dev.ordinal != l.d.ordinal {
		return fmt.Errorf("cuda: Mark of a fence of %s on %s", cf.dev.name, l.d.name)
	}
	return cf.ev.Record(l.d.stream)
}
