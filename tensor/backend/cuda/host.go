package cuda

import (
	"fmt"
	"unsafe"

	cu "github.com/strata-gnn/strata/internal/cuda"
)

// HostBuffer is page-locked (pinned) host memory outside the Go heap.
// Copies from it are truly asynchronous, and when mapped, kernels read it
// directly over PCIe/NVLink through unified virtual addressing (zero-copy):
// the GPU sampler and feature store use this for graphs and features
// larger than device memory.
type HostBuffer struct {
	dev        *Device
	p          unsafe.Pointer
	bytes      uint64
	devPtr     cu.DevPtr
	registered bool // pinned with cuMemHostRegister (memory owned by the caller)
}

// AllocHost allocates bytes of pinned host memory (cuMemHostAlloc,
// portable); mapped also maps it into the device address space.
func (d *Device) AllocHost(bytes uint64, mapped bool) (*HostBuffer, error) {
	if bytes == 0 {
		return nil, fmt.Errorf("cuda: AllocHost: zero bytes")
	}
	leave, err := d.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	flags := uint32(cu.HostAllocPortable)
	if mapped {
		flags |= cu.HostAllocDeviceMap
	}
	p, err := cu.MemHostAlloc(bytes, flags)
	if err != nil {
		return nil, fmt.Errorf("%w (pinning %d bytes of host memory)", err, bytes)
	}
	h := &HostBuffer{dev: d, p: p, bytes: bytes}
	if mapped {
		if h.devPtr, err = cu.MemHostGetDevicePointer(p); err != nil {
			cu.MemFreeHost(p)
			return nil, err
		}
	}
	return h, nil
}

// RegisterHost pins existing host memory (for example a memory-mapped
// feature file; it must not be Go-heap memory) and, when mapped, maps it
// for the device. The caller keeps ownership; Free unregisters.
func (d *Device) RegisterHost(mem unsafe.Pointer, bytes uint64, mapped, readOnly bool) (*HostBuffer, error) {
	if mem == nil || bytes == 0 {
		return nil, fmt.Errorf("cuda: RegisterHost: empty range")
	}
	leave, err := d.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	flags := uint32(cu.HostRegisterPortable)
	if mapped {
		flags |= cu.HostRegisterDeviceMap
	}
	if readOnly {
		flags |= cu.HostRegisterReadOnly
	}
	if err := cu.MemHostRegister(mem, bytes, flags); err != nil {
		return nil, fmt.Errorf("%w (registering %d bytes of host memory)", err, bytes)
	}
	h := &HostBuffer{dev: d, p: mem, bytes: bytes, registered: true}
	if mapped {
		if h.devPtr, err = cu.MemHostGetDevicePointer(mem); err != nil {
			cu.MemHostUnregister(mem)
			return nil, err
		}
	}
	return h, nil
}

// Bytes returns the memory as a byte slice (valid until Free).
func (h *HostBuffer) Bytes() []byte { return unsafe.Slice((*byte)(h.p), h.bytes) }

// Float32s returns the memory as float32s (valid until Free).
func (h *HostBuffer) Float32s() []float32 { return unsafe.Slice((*float32)(h.p), h.bytes/4) }

// Int32s returns the memory as int32s (valid until Free).
func (h *HostBuffer) Int32s() []int32 { return unsafe.Slice((*int32)(h.p), h.bytes/4) }

// Int64s returns the memory as int64s (valid until Free).
func (h *HostBuffer) Int64s() []int64 { return unsafe.Slice((*int64)(h.p), h.bytes/8) }

// DevPtr returns the device address of mapped memory (0 when not mapped).
func (h *HostBuffer) DevPtr() cu.DevPtr { return h.devPtr }

// Len returns the size in bytes.
func (h *HostBuffer) Len() uint64 { return h.bytes }

// Free releases (or unregisters) the memory. The device's queued work
// that reads it is waited for first.
func (h *HostBuffer) Free() error {
	if h == nil || h.p == nil {
		return nil
	}
	leave, err := h.dev.enter()
	if err != nil {
		return err
	}
	defer leave()
	if err := h.dev.stream.Synchronize(); err != nil {
		return err
	}
	if h.registered {
		err = cu.MemHostUnregister(h.p)
	} else {
		err = cu.MemFreeHost(h.p)
	}
	h.p, h.devPtr, h.bytes = nil, 0, 0
	return err
}

// CopyFromHost queues an asynchronous copy of bytes from pinned host
// memory (at byte offset off) into dst. The host memory must not change
// until the device has consumed it (Synchronize or a later event).
func (d *Device) CopyFromHost(dst *Buffer, src *HostBuffer, off uint64) error {
	if dst == nil || dst.dev != d || src == nil || src.p == nil {
		return fmt.Errorf("cuda: CopyFromHost: bad arguments")
	}
	n := uint64(dst.n * dst.dt.Size())
	if off > src.bytes || n > src.bytes-off {
		return fmt.Errorf("cuda: CopyFromHost: %d bytes at offset %d exceed the %d-byte host buffer", n, off, src.bytes)
	}
	if n == 0 {
		return nil
	}
	return d.run(func() error {
		return cu.MemcpyHtoDAsync(dst.ptr, unsafe.Add(src.p, off), n, d.stream)
	})
}

// Event marks a point in the device's stream.
type Event struct {
	d *Device
	e cu.Event
}

// Record queues an event at the current end of the stream.
func (d *Device) Record() (*Event, error) {
	leave, err := d.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	e, err := cu.EventCreate(cu.EventDefault)
	if err != nil {
		return nil, err
	}
	if err := e.Record(d.stream); err != nil {
		e.Destroy()
		return nil, err
	}
	return &Event{d: d, e: e}, nil
}

// Wait blocks until the event has completed.
func (e *Event) Wait() error {
	return e.d.run(e.e.Synchronize)
}

// ElapsedMs returns the device time between e and a later event.
func (e *Event) ElapsedMs(later *Event) (float32, error) {
	var ms float32
	err := e.d.run(func() error {
		if err := later.e.Synchronize(); err != nil {
			return err
		}
		var err error
		ms, err = cu.ElapsedMs(e.e, later.e)
		return err
	})
	return ms, err
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	return e.d.run(e.e.Destroy)
}
