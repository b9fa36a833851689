// Package nccl binds NVIDIA's collective communication library
// (libnccl.so.2) at run time with purego, so binaries build with
// CGO_ENABLED=0 and run on machines without NCCL (Load then returns an
// error naming every folder searched; see internal/cudalib, whose search
// order and $STRATA_CUDA_PATH override apply).
//
// Bound: ncclGetVersion, ncclGetUniqueId, ncclCommInitRank (the 128-byte
// ncclUniqueId is passed by value, which purego supports on linux/amd64
// and linux/arm64), ncclCommDestroy, ncclCommAbort,
// ncclCommGetAsyncError, ncclCommCount, ncclCommCuDevice,
// ncclCommUserRank, ncclAllReduce, ncclBroadcast, ncclAllGather,
// ncclReduceScatter, ncclSend, ncclRecv, ncclGroupStart, ncclGroupEnd,
// ncclGetErrorString and (when present, NCCL >= 2.13) ncclGetLastError.
// Every failed call returns an *Error carrying the call, the numeric
// ncclResult_t, its name (ncclUnhandledCudaError, ...), NCCL's description
// and its last error message.
//
// # Threads and contexts
//
// NCCL uses the CUDA runtime, which takes the device from the context
// current on the calling OS thread. Call CommInitRank and enqueue
// operations from a goroutine locked to its thread with the device's
// primary context current (cuda.Context.Bind, or inside
// tensor/backend/cuda's Device.Do). Streams are CUstream values (the
// driver's and the runtime's stream handles are the same thing).
//
// # Several communicators
//
// A process may hold several communicators over the same GPUs, for
// example one per pipeline stage: create each from its own unique id
// (rank 0 calls GetUniqueID once per communicator and hands every id to
// the other ranks) and give each its own stream. NCCL serializes the
// operations of one communicator; operations of different communicators
// that depend on each other must be issued in the same order on every
// rank (or on streams that cannot block each other), else they can
// deadlock. comm/nccl opens one communicator per call of Open, with a
// distinct store prefix per stage.
package nccl
