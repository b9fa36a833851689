package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Device is a CUdevice.
type Device int32

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int32

// Device attributes used by Strata (values from cuda.h).
const (
	AttrMaxThreadsPerBlock       DeviceAttribute = 1
	AttrMaxSharedMemoryPerBlock  DeviceAttribute = 8
	AttrClockRate                DeviceAttribute = 13
	AttrMultiprocessorCount      DeviceAttribute = 16
	AttrCanMapHostMemory         DeviceAttribute = 19
	AttrMemoryClockRate          DeviceAttribute = 36
	AttrGlobalMemoryBusWidth     DeviceAttribute = 37
	AttrL2CacheSize              DeviceAttribute = 38
	AttrUnifiedAddressing        DeviceAttribute = 41
	AttrComputeCapabilityMajor   DeviceAttribute = 75
	AttrComputeCapabilityMinor   DeviceAttribute = 76
	AttrMaxSharedMemoryPerBlockO DeviceAttribute = 97 // opt-in maximum
)

// DeviceCount returns the number of CUDA devices.
func DeviceCount() (int, error) {
	if err := loaded(); err != nil {
		return 0, err
	}
	var n int32
	if err := check("cuDeviceGetCount", syscall(drv.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return 0, err
	}
	return int(n), nil
}

// GetDevice returns the device with the given ordinal.
func GetDevice(ordinal int) (Device, error) {
	if err := loaded(); err != nil {
		return 0, err
	}
	n, err := DeviceCount()
	if err != nil {
		return 0, err
	}
	if ordinal < 0 || ordinal >= n {
		return 0, fmt.Errorf("cuda: device %d does not exist (%d device(s) found)", ordinal, n)
	}
	var d int32
	if err := check("cuDeviceGet", syscall(drv.cuDeviceGet, uintptr(unsafe.Pointer(&d)), uintptr(ordinal))); err != nil {
		return 0, err
	}
	return Device(d), nil
}

// Name returns the device's marketing name.
func (d Device) Name() (string, error) {
	var buf [256]byte
	if err := check("cuDeviceGetName", syscall(drv.cuDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)-1), uintptr(d))); err != nil {
		return "", err
	}
	return GoString(&buf[0]), nil
}

// PCIBusID returns the device's PCI address, e.g. "0000:1b:00.0".
func (d Device) PCIBusID() (string, error) {
	var buf [64]byte
	if err := check("cuDeviceGetPCIBusId", syscall(drv.cuDeviceGetPCIBusId, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)-1), uintptr(d))); err != nil {
		return "", err
	}
	return GoString(&buf[0]), nil
}

// TotalMem returns the device's memory in bytes.
func (d Device) TotalMem() (uint64, error) {
	var n uint64
	if err := check("cuDeviceTotalMem_v2", syscall(drv.cuDeviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(d))); err != nil {
		return 0, err
	}
	return n, nil
}

// Attribute returns a device attribute.
func (d Device) Attribute(a DeviceAttribute) (int, error) {
	var v int32
	if err := check("cuDeviceGetAttribute", syscall(drv.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(d))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// ComputeCapability returns (major, minor), e.g. (9, 0) for Hopper.
func (d Device) ComputeCapability() (major, minor int, err error) {
	if major, err = d.Attribute(AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	minor, err = d.Attribute(AttrComputeCapabilityMinor)
	return major, minor, err
}

// CanAccessPeer reports whether device a can map device b's memory.
func CanAccessPeer(a, b Device) (bool, error) {
	if err := loaded(); err != nil {
		return false, err
	}
	var v int32
	if err := check("cuDeviceCanAccessPeer", syscall(drv.cuDeviceCanAccessPeer, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(b))); err != nil {
		return false, err
	}
	return v != 0, nil
}

// Context is a CUcontext.
type Context uintptr

// PrimaryCtxRetain retains the device's primary context (creating it on
// first use). Balance with PrimaryCtxRelease.
func (d Device) PrimaryCtxRetain() (Context, error) {
	var c uintptr
	if err := check("cuDevicePrimaryCtxRetain", syscall(drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&c)), uintptr(d))); err != nil {
		return 0, err
	}
	return Context(c), nil
}

// PrimaryCtxRelease releases one reference to the primary context.
func (d Device) PrimaryCtxRelease() error {
	return check("cuDevicePrimaryCtxRelease_v2", syscall(drv.cuDevicePrimaryCtxRelease, uintptr(d)))
}

// SetCurrent makes c current on the calling OS thread.
func (c Context) SetCurrent() error {
	return check("cuCtxSetCurrent", syscall(drv.cuCtxSetCurrent, uintptr(c)))
}

// Bind locks the calling goroutine to its OS thread and makes c current
// there. Call the returned function (which unlocks) when done; it is
// returned even on error so that `defer unbind()` is always right.
func (c Context) Bind() (unbind func(), err error) {
	runtime.LockOSThread()
	var cur uintptr
	if syscall(drv.cuCtxGetCurrent, uintptr(unsafe.Pointer(&cur))) == 0 && Context(cur) == c {
		return runtime.UnlockOSThread, nil
	}
	return runtime.UnlockOSThread, c.SetCurrent()
}

// CtxSynchronize waits for all work in the current context.
func CtxSynchronize() error {
	return check("cuCtxSynchronize", syscall(drv.cuCtxSynchronize))
}

// EnablePeerAccess lets the current context access peer's memory. Enabling
// twice is not an error.
func EnablePeerAccess(peer Context) error {
	err := check("cuCtxEnablePeerAccess", syscall(drv.cuCtxEnablePeerAccess, uintptr(peer), 0))
	if IsCode(err, ErrPeerAlreadyEnabled) {
		return nil
	}
	return err
}

// Module is a CUmodule.
type Module uintptr

// LoadModule loads a cubin or a NUL-terminated PTX image into the current
// context.
func LoadModule(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, fmt.Errorf("cuda: LoadModule: empty image")
	}
	var m uintptr
	if err := check("cuModuleLoadData", syscall(drv.cuModuleLoadData, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&image[0])))); err != nil {
		return 0, err
	}
	return Module(m), nil
}

// Unload unloads the module.
func (m Module) Unload() error {
	return check("cuModuleUnload", syscall(drv.cuModuleUnload, uintptr(m)))
}

// Function is a CUfunction.
type Function uintptr

// Function looks up an extern "C" kernel by name.
func (m Module) Function(name string) (Function, error) {
	cname := append([]byte(name), 0)
	var f uintptr
	if err := check("cuModuleGetFunction", syscall(drv.cuModuleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&cname[0])))); err != nil {
		return 0, fmt.Errorf("%w (kernel %q)", err, name)
	}
	return Function(f), nil
}

// SetMaxDynamicShared raises the kernel's dynamic shared-memory limit
// (needed above 48 KiB).
func (f Function) SetMaxDynamicShared(bytes int) error {
	const attrMaxDynamicShared = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	return check("cuFuncSetAttribute", syscall(drv.cuFuncSetAttribute, uintptr(f), attrMaxDynamicShared, uintptr(bytes)))
}

// DevPtr is a device address (CUdeviceptr).
type DevPtr uintptr

// MemAlloc allocates device memory.
func MemAlloc(bytes uint64) (DevPtr, error) {
	var p uintptr
	if err := check("cuMemAlloc_v2", syscall(drv.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes))); err != nil {
		return 0, err
	}
	return DevPtr(p), nil
}

// MemFree frees device memory.
func MemFree(p DevPtr) error {
	return check("cuMemFree_v2", syscall(drv.cuMemFree, uintptr(p)))
}

// MemGetInfo returns free and total device memory of the current context.
func MemGetInfo() (free, total uint64, err error) {
	err = check("cuMemGetInfo_v2", syscall(drv.cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))))
	return free, total, err
}

// MemsetD8Async sets n bytes.
func MemsetD8Async(p DevPtr, v byte, n uint64, s Stream) error {
	return check("cuMemsetD8Async", syscall(drv.cuMemsetD8Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s)))
}

// MemsetD32Async sets n 32-bit words.
func MemsetD32Async(p DevPtr, v uint32, n uint64, s Stream) error {
	return check("cuMemsetD32Async", syscall(drv.cuMemsetD32Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s)))
}

// MemcpyHtoDAsync copies n bytes from host to device. From pageable (Go)
// memory the driver stages the data before returning, so src may be reused
// at once; from pinned memory the copy is truly asynchronous.
func MemcpyHtoDAsync(dst DevPtr, src unsafe.Pointer, n uint64, s Stream) error {
	return check("cuMemcpyHtoDAsync_v2", syscall(drv.cuMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

// MemcpyDtoHAsync copies n bytes from device to host. Into pageable memory
// the call returns only when the data has arrived; into pinned memory,
// synchronize the stream before reading.
func MemcpyDtoHAsync(dst unsafe.Pointer, src DevPtr, n uint64, s Stream) error {
	return check("cuMemcpyDtoHAsync_v2", syscall(drv.cuMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

// MemcpyDtoDAsync copies n bytes between device buffers (or peers, with UVA).
func MemcpyDtoDAsync(dst, src DevPtr, n uint64, s Stream) error {
	return check("cuMemcpyDtoDAsync_v2", syscall(drv.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

// Host allocation and registration flags.
const (
	HostAllocPortable     = 1 // CU_MEMHOSTALLOC_PORTABLE: pinned for every context
	HostAllocDeviceMap    = 2 // CU_MEMHOSTALLOC_DEVICEMAP: mapped into the device address space
	HostRegisterPortable  = 1
	HostRegisterDeviceMap = 2
	HostRegisterReadOnly  = 8
)

// MemHostAlloc allocates pinned host memory outside the Go heap.
func MemHostAlloc(bytes uint64, flags uint32) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", syscall(drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes), uintptr(flags))); err != nil {
		return nil, err
	}
	return p, nil
}

// MemFreeHost frees memory from MemHostAlloc.
func MemFreeHost(p unsafe.Pointer) error {
	return check("cuMemFreeHost", syscall(drv.cuMemFreeHost, uintptr(p)))
}

// MemHostGetDevicePointer returns the device address of mapped pinned host
// memory (zero-copy access through UVA).
func MemHostGetDevicePointer(p unsafe.Pointer) (DevPtr, error) {
	var d uintptr
	if err := check("cuMemHostGetDevicePointer_v2", syscall(drv.cuMemHostGetDevicePointer, uintptr(unsafe.Pointer(&d)), uintptr(p), 0)); err != nil {
		return 0, err
	}
	return DevPtr(d), nil
}

// MemHostRegister page-locks an existing host range (for example an mmap'd
// feature file) and, with HostRegisterDeviceMap, maps it for the device.
func MemHostRegister(p unsafe.Pointer, bytes uint64, flags uint32) error {
	return check("cuMemHostRegister_v2", syscall(drv.cuMemHostRegister, uintptr(p), uintptr(bytes), uintptr(flags)))
}

// MemHostUnregister undoes MemHostRegister.
func MemHostUnregister(p unsafe.Pointer) error {
	return check("cuMemHostUnregister", syscall(drv.cuMemHostUnregister, uintptr(p)))
}

// Stream is a CUstream; 0 is the legacy default stream.
type Stream uintptr

// StreamNonBlocking makes a stream that does not synchronize with stream 0.
const StreamNonBlocking = 1

// StreamCreate creates a stream in the current context.
func StreamCreate(flags uint32) (Stream, error) {
	var s uintptr
	if err := check("cuStreamCreate", syscall(drv.cuStreamCreate, uintptr(unsafe.Pointer(&s)), uintptr(flags))); err != nil {
		return 0, err
	}
	return Stream(s), nil
}

// StreamPriorityRange returns the current context's stream priorities:
// least (the default, usually 0) and greatest (numerically lowest, -5 on
// Hopper). Both are 0 when the driver lacks the call.
func StreamPriorityRange() (least, greatest int, err error) {
	if err := loaded(); err != nil {
		return 0, 0, err
	}
	if drv.cuCtxGetStreamPriorityRange == 0 {
		return 0, 0, nil
	}
	var lo, hi int32
	if err := check("cuCtxGetStreamPriorityRange", syscall(drv.cuCtxGetStreamPriorityRange, uintptr(unsafe.Pointer(&lo)), uintptr(unsafe.Pointer(&hi)))); err != nil {
		return 0, 0, err
	}
	return int(lo), int(hi), nil
}

// StreamCreatePriority creates a stream whose kernels the scheduler
// prefers over those of lower-priority streams (lower numbers are higher
// priorities; see StreamPriorityRange). Without the driver call it falls
// back to StreamCreate.
func StreamCreatePriority(flags uint32, priority int) (Stream, error) {
	if err := loaded(); err != nil {
		return 0, err
	}
	if drv.cuStreamCreateWithPriority == 0 || priority == 0 {
		return StreamCreate(flags)
	}
	var s uintptr
	if err := check("cuStreamCreateWithPriority", syscall(drv.cuStreamCreateWithPriority, uintptr(unsafe.Pointer(&s)), uintptr(flags), uintptr(int64(priority)))); err != nil {
		return 0, err
	}
	return Stream(s), nil
}

// Destroy destroys the stream (queued work still completes).
func (s Stream) Destroy() error {
	return check("cuStreamDestroy_v2", syscall(drv.cuStreamDestroy, uintptr(s)))
}

// Synchronize waits for the stream's work.
func (s Stream) Synchronize() error {
	return check("cuStreamSynchronize", syscall(drv.cuStreamSynchronize, uintptr(s)))
}

// Done reports whether all work queued on s has completed.
func (s Stream) Done() (bool, error) {
	r := syscall(drv.cuStreamQuery, uintptr(s))
	if Result(r) == ErrNotReady {
		return false, nil
	}
	return true, check("cuStreamQuery", r)
}

// WaitEvent makes later work on s wait for e.
func (s Stream) WaitEvent(e Event) error {
	return check("cuStreamWaitEvent", syscall(drv.cuStreamWaitEvent, uintptr(s), uintptr(e), 0))
}

// Event is a CUevent.
type Event uintptr

// Event flags.
const (
	EventDefault       = 0
	EventBlockingSync  = 1
	EventDisableTiming = 2
)

// EventCreate creates an event.
func EventCreate(flags uint32) (Event, error) {
	var e uintptr
	if err := check("cuEventCreate", syscall(drv.cuEventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags))); err != nil {
		return 0, err
	}
	return Event(e), nil
}

// Destroy destroys the event.
func (e Event) Destroy() error {
	return check("cuEventDestroy_v2", syscall(drv.cuEventDestroy, uintptr(e)))
}

// Record records e on stream s.
func (e Event) Record(s Stream) error {
	return check("cuEventRecord", syscall(drv.cuEventRecord, uintptr(e), uintptr(s)))
}

// Synchronize waits for the event.
func (e Event) Synchronize() error {
	return check("cuEventSynchronize", syscall(drv.cuEventSynchronize, uintptr(e)))
}

// ElapsedMs returns the time between two recorded events in milliseconds.
func ElapsedMs(start, end Event) (float32, error) {
	var ms float32
	if err := check("cuEventElapsedTime", syscall(drv.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end))); err != nil {
		return 0, err
	}
	return ms, nil
}
