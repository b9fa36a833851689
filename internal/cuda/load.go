package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/strata-gnn/strata/internal/cudalib"
)

// driver holds the opened library and its resolved entry points.
type driver struct {
	lib     *cudalib.Found
	version int

	cuInit, cuDriverGetVersion, cuGetErrorName, cuGetErrorString uintptr

	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceTotalMem, cuDeviceGetAttribute uintptr
	cuDeviceCanAccessPeer, cuDeviceGetPCIBusId                                             uintptr

	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxSetCurrent, cuCtxGetCurrent uintptr
	cuCtxSynchronize, cuCtxEnablePeerAccess                                               uintptr

	cuModuleLoadData, cuModuleUnload, cuModuleGetFunction, cuFuncSetAttribute, cuLaunchKernel uintptr

	cuMemAlloc, cuMemFree, cuMemGetInfo, cuMemsetD8Async, cuMemsetD32Async uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync                uintptr
	cuMemHostAlloc, cuMemFreeHost, cuMemHostGetDevicePointer               uintptr
	cuMemHostRegister, cuMemHostUnregister                                 uintptr

	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize, cuStreamWaitEvent, cuStreamQuery uintptr
	cuEventCreate, cuEventDestroy, cuEventRecord, cuEventSynchronize, cuEventElapsedTime   uintptr

	// Optional: zero when the driver lacks them (see StreamMemOps).
	cuStreamWaitValue32, cuStreamWriteValue32 uintptr
	// Optional: streams with a scheduling priority (StreamCreatePriority).
	cuStreamCreateWithPriority, cuCtxGetStreamPriorityRange uintptr
}

var (
	loadOnce sync.Once
	drv      *driver
	loadErr  error
)

// Load opens libcuda, resolves the entry points and calls cuInit once per
// process. Later calls return the first result.
func Load() error {
	loadOnce.Do(func() {
		d, err := open()
		if err != nil {
			loadErr = err
			return
		}
		drv = d
		if err := check("cuInit", syscall(d.cuInit, 0)); err != nil {
			drv = nil
			loadErr = fmt.Errorf("cuda: driver %s loaded but cuInit failed: %w", d.lib.Path, err)
			return
		}
		var v int32
		if err := check("cuDriverGetVersion", syscall(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
			drv = nil
			loadErr = err
			return
		}
		d.version = int(v)
	})
	return loadErr
}

func open() (*driver, error) {
	if !cudalib.Supported {
		return nil, fmt.Errorf("cuda: run-time loading of libcuda is not supported on this platform")
	}
	f, err := cudalib.Open(cudalib.Driver)
	if err != nil {
		return nil, err
	}
	d := &driver{lib: f}
	syms := []struct {
		dst   *uintptr
		names []string // first that resolves wins
	}{
		{&d.cuInit, []string{"cuInit"}},
		{&d.cuDriverGetVersion, []string{"cuDriverGetVersion"}},
		{&d.cuGetErrorName, []string{"cuGetErrorName"}},
		{&d.cuGetErrorString, []string{"cuGetErrorString"}},
		{&d.cuDeviceGetCount, []string{"cuDeviceGetCount"}},
		{&d.cuDeviceGet, []string{"cuDeviceGet"}},
		{&d.cuDeviceGetName, []string{"cuDeviceGetName"}},
		{&d.cuDeviceTotalMem, []string{"cuDeviceTotalMem_v2"}},
		{&d.cuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}},
		{&d.cuDeviceCanAccessPeer, []string{"cuDeviceCanAccessPeer"}},
		{&d.cuDeviceGetPCIBusId, []string{"cuDeviceGetPCIBusId"}},
		{&d.cuDevicePrimaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
		{&d.cuDevicePrimaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{&d.cuCtxSetCurrent, []string{"cuCtxSetCurrent"}},
		{&d.cuCtxGetCurrent, []string{"cuCtxGetCurrent"}},
		{&d.cuCtxSynchronize, []string{"cuCtxSynchronize"}},
		{&d.cuCtxEnablePeerAccess, []string{"cuCtxEnablePeerAccess"}},
		{&d.cuModuleLoadData, []string{"cuModuleLoadData"}},
		{&d.cuModuleUnload, []string{"cuModuleUnload"}},
		{&d.cuModuleGetFunction, []string{"cuModuleGetFunction"}},
		{&d.cuFuncSetAttribute, []string{"cuFuncSetAttribute"}},
		{&d.cuLaunchKernel, []string{"cuLaunchKernel"}},
		{&d.cuMemAlloc, []string{"cuMemAlloc_v2"}},
		{&d.cuMemFree, []string{"cuMemFree_v2"}},
		{&d.cuMemGetInfo, []string{"cuMemGetInfo_v2"}},
		{&d.cuMemsetD8Async, []string{"cuMemsetD8Async"}},
		{&d.cuMemsetD32Async, []string{"cuMemsetD32Async"}},
		{&d.cuMemcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}},
		{&d.cuMemcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2"}},
		{&d.cuMemcpyDtoDAsync, []string{"cuMemcpyDtoDAsync_v2"}},
		{&d.cuMemHostAlloc, []string{"cuMemHostAlloc"}},
		{&d.cuMemFreeHost, []string{"cuMemFreeHost"}},
		{&d.cuMemHostGetDevicePointer, []string{"cuMemHostGetDevicePointer_v2"}},
		{&d.cuMemHostRegister, []string{"cuMemHostRegister_v2", "cuMemHostRegister"}},
		{&d.cuMemHostUnregister, []string{"cuMemHostUnregister"}},
		{&d.cuStreamCreate, []string{"cuStreamCreate"}},
		{&d.cuStreamDestroy, []string{"cuStreamDestroy_v2"}},
		{&d.cuStreamSynchronize, []string{"cuStreamSynchronize"}},
		{&d.cuStreamWaitEvent, []string{"cuStreamWaitEvent"}},
		{&d.cuStreamQuery, []string{"cuStreamQuery"}},
		{&d.cuEventCreate, []string{"cuEventCreate"}},
		{&d.cuEventDestroy, []string{"cuEventDestroy_v2"}},
		{&d.cuEventRecord, []string{"cuEventRecord"}},
		{&d.cuEventSynchronize, []string{"cuEventSynchronize"}},
		{&d.cuEventElapsedTime, []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}},
	}
	for _, s := range syms {
		for _, n := range s.names {
			if p, err := cudalib.Sym(f.Handle, n); err == nil && p != 0 {
				*s.dst = p
				break
			}
		}
		if *s.dst == 0 {
			return nil, fmt.Errorf("cuda: %s (%s) lacks symbol %s: driver too old?", f.Lib, f.Path, s.names[0])
		}
	}
	// Optional entry points: their absence disables only what uses them.
	// The _v2 stream memory operations are the CUDA 12+ ones that need no
	// kernel-module option.
	optional := []struct {
		dst   *uintptr
		names []string
	}{
		{&d.cuStreamWaitValue32, []string{"cuStreamWaitValue32_v2", "cuStreamWaitValue32"}},
		{&d.cuStreamWriteValue32, []string{"cuStreamWriteValue32_v2", "cuStreamWriteValue32"}},
		{&d.cuStreamCreateWithPriority, []string{"cuStreamCreateWithPriority"}},
		{&d.cuCtxGetStreamPriorityRange, []string{"cuCtxGetStreamPriorityRange"}},
	}
	for _, s := range optional {
		for _, n := range s.names {
			if p, err := cudalib.Sym(f.Handle, n); err == nil && p != 0 {
				*s.dst = p
				break
			}
		}
	}
	return d, nil
}

// LibPath returns the file libcuda was loaded from ("" before Load or when
// the loader did not tell).
func LibPath() string {
	if drv == nil {
		return ""
	}
	return drv.lib.Path
}

// DriverVersion returns the CUDA version the driver supports, as
// 1000*major + 10*minor (13000 for 13.0); 0 before Load.
func DriverVersion() int {
	if drv == nil {
		return 0
	}
	return drv.version
}

// loaded returns an error when Load has not succeeded.
func loaded() error {
	if drv == nil {
		if loadErr != nil {
			return loadErr
		}
		return fmt.Errorf("cuda: driver not loaded (call cuda.Load first)")
	}
	return nil
}

func (d *driver) errorName(code Result) (name, desc string) {
	var pn, pd *byte
	if syscall(d.cuGetErrorName, uintptr(code), uintptr(unsafe.Pointer(&pn))) != 0 || pn == nil {
		name = fmt.Sprintf("CUresult %d", int(code))
	} else {
		name = GoString(pn)
	}
	if syscall(d.cuGetErrorString, uintptr(code), uintptr(unsafe.Pointer(&pd))) == 0 && pd != nil {
		desc = GoString(pd)
	}
	return name, desc
}

// GoString copies a NUL-terminated C string (at most 64 KiB).
func GoString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for n < 1<<16 && *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
