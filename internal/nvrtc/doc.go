// Package nvrtc compiles CUDA C source to device code at run time through
// libnvrtc, loaded with purego (no cgo), and caches the results on disk.
//
// Compile produces a CUBIN for the device's exact architecture (sm_XY)
// when this NVRTC supports it, and otherwise PTX for the newest virtual
// architecture it supports that is not newer than the device (the driver
// then JIT-compiles it). Compilation errors carry NVRTC's program log.
//
// Cache stores compiled images under os.UserCacheDir()/strata/kernels, or
// $STRATA_KERNEL_CACHE, keyed by a hash of the source and options, the
// target architecture, the NVRTC version and the driver version. Writes go
// to a temporary file renamed into place, so concurrent processes never
// see a partial image.
package nvrtc
