// Package cuda binds the CUDA driver API (libcuda.so.1) at run time with
// purego, so binaries build with CGO_ENABLED=0 and run on machines without
// CUDA (Load then returns an error).
//
// About forty calls are bound: initialization and device queries, the
// primary context, modules and kernel launch, device memory, pinned and
// mapped host memory, streams, events and peer access; and, when the
// driver has them, the stream memory operations cuStreamWaitValue32 and
// cuStreamWriteValue32 (StreamMemOps reports whether it does). Every call's result
// is checked; failures are *Error values carrying the call, the numeric
// code and its name (CUDA_ERROR_OUT_OF_MEMORY, ...).
//
// # Threads
//
// The driver keeps the current context per OS thread, and purego calls run
// on the calling goroutine's thread. Callers must therefore make a context
// current and call the driver from the same locked thread:
// Context.Bind does runtime.LockOSThread plus cuCtxSetCurrent and returns
// the matching unlock. Strata always uses the device's primary context (the
// one cuBLAS, NCCL and PyTorch use too).
//
// # Hot paths
//
// Launch, asynchronous copies and event records go through
// purego.SyscallN with symbols resolved once (about 60 ns of overhead per
// call). Kernel parameters are staged in memory outside the Go heap, so no
// Go pointer is handed to the driver.
package cuda
