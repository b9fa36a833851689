package cuda

import (
	"fmt"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
)

// The optional capabilities of package backend, as thin adapters over
// the Device's own methods.
var (
	_ backend.Slicer        = (*Buffer)(nil)
	_ backend.HostBuffer    = (*HostBuffer)(nil)
	_ backend.Module        = (*Module)(nil)
	_ backend.Siblings      = (*Device)(nil)
	_ backend.Sibling       = (*Device)(nil)
	_ backend.Fences        = (*Device)(nil)
	_ backend.PinnedMemory  = (*Device)(nil)
	_ backend.SparseBuilder = (*Device)(nil)
	_ backend.Memory        = (*Device)(nil)
	_ backend.CSRBuffers    = (*Sparse)(nil)
	_ backend.Kernels       = (*Device)(nil)
	_ backend.Enqueuer      = (*Device)(nil)
)

// LoadKernels compiles CommonSource()+src with LoadModule (the same
// module, cache entry and kernels).
func (d *Device) LoadKernels(name, src string) (backend.Module, error) {
	m, err := d.LoadModule(name, CommonSource()+src)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Kernel returns the kernel named name as a backend.Kernel, for
// Locked.Launch.
func (m *Module) Kernel(name string) (backend.Kernel, error) {
	f, err := m.Func(name)
	return backend.Kernel(f), err
}

// Enqueue is Do for backend.Enqueuer: fn gets the *Locked as a
// backend.Queue.
func (d *Device) Enqueue(fn func(q backend.Queue) error) error {
	return d.Do(func(l *Locked) error { return fn(l) })
}

// Sibling opens another handle of this GPU (Open with the same ordinal
// and precision): its own stream, lock and allocator in the same
// context.
func (d *Device) Sibling(opt backend.SiblingOptions) (backend.Sibling, error) {
	s, err := Open(d.ordinal, Options{Precision: d.prec, HighPriority: opt.HighPriority})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// SameDevice reports whether b is a handle of this GPU.
func (d *Device) SameDevice(b backend.Backend) bool {
	o, ok := b.(*Device)
	return ok && o != nil && o.ordinal == d.ordinal
}

// Owns reports whether b is a buffer of this handle.
func (d *Device) Owns(b backend.Buffer) bool {
	cb, ok := b.(*Buffer)
	return ok && cb != nil && cb.dev == d
}

// QueuePriority is StreamPriority.
func (d *Device) QueuePriority() int { return d.priority }

// AllocPinned is AllocHost for backend.PinnedMemory.
func (d *Device) AllocPinned(bytes uint64, mapped bool) (backend.HostBuffer, error) {
	h, err := d.AllocHost(bytes, mapped)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// DeviceAddr returns the device address of mapped memory (0 when not
// mapped), for kernel arguments (backend.Addr).
func (h *HostBuffer) DeviceAddr() backend.DevPtr { return backend.DevPtr(h.devPtr) }

// SparseFromBuffers is NewSparseFromDevice for backend.SparseBuilder.
func (d *Device) SparseFromBuffers(rows, cols int, indptr, indices backend.Buffer) (backend.Sparse, error) {
	const op = "SparseFromBuffers"
	p, ok := indptr.(*Buffer)
	if !ok && indptr != nil {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("indptr is a %T, not a cuda buffer", indptr)}
	}
	c, ok := indices.(*Buffer)
	if !ok && indices != nil {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("indices is a %T, not a cuda buffer", indices)}
	}
	s, err := d.NewSparseFromDevice(rows, cols, p, c)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// CSR returns the matrix's row pointers and column indices.
func (s *Sparse) CSR() (indptr, indices backend.Buffer) { return s.ptr, s.col }

// Is makes an *OOMError match backend.ErrOutOfMemory.
func (e *OOMError) Is(target error) bool { return target == backend.ErrOutOfMemory }

// fence is the backend.Fence of a Device: an event (without timing) in
// the primary context, which the fence holds a reference to, so that Wait
// can bind the context and synchronize without the device lock.
type fence struct {
	dev *Device
	cd  cu.Device
	ctx cu.Context
	ev  cu.Event
}

// NewFence returns a fence on the device's stream.
func (d *Device) NewFence() (backend.Fence, error) {
	f := &fence{dev: d}
	var err error
	if f.cd, err = cu.GetDevice(d.ordinal); err != nil {
		return nil, err
	}
	if f.ctx, err = f.cd.PrimaryCtxRetain(); err != nil {
		return nil, err
	}
	if err := d.Do(func(*Locked) error {
		var e error
		f.ev, e = cu.EventCreate(cu.EventDisableTiming)
		return e
	}); err != nil {
		f.cd.PrimaryCtxRelease()
		return nil, err
	}
	return f, nil
}

// Record marks the current end of the stream under the device lock.
func (f *fence) Record() error {
	return f.dev.Do(func(l *Locked) error { return l.Mark(f) })
}

// Wait blocks until the stream has run everything queued before the
// last mark, without the device lock.
func (f *fence) Wait() error {
	if f.ctx == 0 {
		return fmt.Errorf("cuda: Wait on a closed fence")
	}
	unbind, err := f.ctx.Bind()
	defer unbind()
	if err != nil {
		return err
	}
	return f.ev.Synchronize()
}

// Close destroys the event and releases the context reference.
func (f *fence) Close() error {
	if f == nil || f.ctx == 0 {
		return nil
	}
	err := f.dev.Do(func(*Locked) error { return f.ev.Destroy() })
	if e := f.cd.PrimaryCtxRelease(); err == nil {
		err = e
	}
	f.ctx, f.ev = 0, 0
	return err
}

// DownloadAsync implements backend.AsyncDownload: a copy into pinned host
// memory queued on the device's stream (Locked.CopyToHost), not waited
// for.
func (d *Device) DownloadAsync(dst backend.HostBuffer, off uint64, src backend.Buffer, bytes uint64) error {
	return d.Do(func(l *Locked) error { return l.CopyToHost(dst, off, src, bytes) })
}
