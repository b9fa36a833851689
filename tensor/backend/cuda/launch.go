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
// stream, allocator and kernels while the device lock is held.
type Locked struct{ d *Device }

// Device returns the device.
func (l *Locked) Device() *Device { return l.d }

// Stream returns the device's stream.
func (l *Locked) Stream() cu.Stream { return l.d.stream }

// Alloc returns an uninitialized buffer from the caching allocator.
func (l *Locked) Alloc(dt backend.DType, n int) (*Buffer, error) { return l.d.allocLocked(dt, n) }

// Free returns a buffer to the allocator.
func (l *Locked) Free(b *Buffer) { l.d.freeLocked(b) }

// Launch1D runs f over n items with grid-stride loops (256 threads a block).
func (l *Locked) Launch1D(f cu.Function, n int64, args ...uint64) error {
	if n <= 0 {
		return nil
	}
	blocks := min((n+threads-1)/threads, int64(l.d.sms*32))
	return l.Launch(f, cu.D1(int(blocks)), cu.D1(threads), 0, args...)
}

// Launch runs f with an explicit shape on the device's stream.
func (l *Locked) Launch(f cu.Function, grid, block cu.Dim3, sharedBytes uint32, args ...uint64) error {
	if l.d.prof.on {
		return l.d.prof.time(l.d, l.d.fnName(f), func() error { return cu.Launch(f, grid, block, sharedBytes, l.d.stream, args...) })
	}
	return cu.Launch(f, grid, block, sharedBytes, l.d.stream, args...)
}

// Sync waits for the stream.
func (l *Locked) Sync() error { return l.d.stream.Synchronize() }

// ScanI64 writes the exclusive prefix sum of in[0:n] to out[0:n] (int64
// buffers on this device) and returns nothing on the host.
func (l *Locked) ScanI64(out, in *Buffer, n int) error { return l.d.scanI64(out.ptr, in.ptr, int64(n)) }

// Bucket groups positions 0..n-1 of the int32 keys by key in
// [0, nkeys), keeping positions in increasing order within a key (a
// stable counting sort): the positions with key k are
// order[ptr[k]:ptr[k+1]]. ptr (int64, nkeys+2 entries: the last bucket
// collects out-of-range keys) and order (int32, n) are new buffers.
func (l *Locked) Bucket(keys *Buffer, nkeys int, errSlot uint64) (ptr, order *Buffer, err error) {
	return l.d.bucket(keys, nkeys, errSlot)
}

// Memset sets every byte of b to v.
func (l *Locked) Memset(b *Buffer, v byte) error {
	if b == nil || b.n == 0 {
		return nil
	}
	return l.d.timed("memset", func() error { return cu.MemsetD8Async(b.ptr, v, uint64(b.n*b.dt.Size()), l.d.stream) })
}

// UploadFrom queues a copy of len(src) elements into dst from a host
// slice ([]float32, []int32 or []int64 of dst's dtype, at most dst.Len()
// elements). Small copies go through the device's pinned ring, so src may
// be reused as soon as UploadFrom returns.
func (l *Locked) UploadFrom(dst *Buffer, src any) error {
	n, dt, p, err := hostSlice("UploadFrom", src)
	if err != nil {
		return err
	}
	if dst == nil || dt != dst.dt || n > dst.n {
		return fmt.Errorf("cuda: UploadFrom: %d elements of %v into a buffer of %d %v", n, dt, dst.Len(), dst.DType())
	}
	if n == 0 {
		return nil
	}
	return l.d.uploadLocked(dst.ptr, p, uint64(n*dt.Size()))
}

// CopyToHost queues a copy of src's first bytes into pinned host memory
// at byte offset off; read it after Sync.
func (l *Locked) CopyToHost(dst *HostBuffer, off uint64, src *Buffer, bytes uint64) error {
	if dst == nil || src == nil || off > dst.bytes || bytes > dst.bytes-off || bytes > uint64(src.n*src.dt.Size()) {
		return fmt.Errorf("cuda: CopyToHost: %d bytes do not fit", bytes)
	}
	if bytes == 0 {
		return nil
	}
	return cu.MemcpyDtoHAsync(unsafe.Add(dst.p, off), src.ptr, bytes, l.d.stream)
}

// IndexSlot reserves a device index-check slot (see the package doc) for
// argument name of op, checking the int32 buffer idx against [0, limit):
// kernels call index_error(slot, pos) from kernels/common.cuh, and the
// next Synchronize reports the first bad position as a *backend.IndexError.
func (l *Locked) IndexSlot(op, name string, idx *Buffer, limit int) (uint64, error) {
	return l.d.checks.slot(l.d, op, name, idx, limit)
}
