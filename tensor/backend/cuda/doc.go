// Package cuda is the GPU back end: every backend.Backend primitive on an
// NVIDIA GPU, through the driver API, NVRTC and cuBLAS loaded at run time
// (package internal/cuda and friends; no cgo, CGO_ENABLED=0 builds). It
// registers the device kind "cuda" with package backend, so
// backend.Open("cuda:1") opens GPU 1. Without the libraries, Open returns
// one *OpenError naming the missing library and every folder searched
// (see internal/cudalib; $STRATA_CUDA_PATH adds folders).
//
// # Execution model
//
// A Device uses the GPU's primary context and one non-blocking stream.
// Methods validate their arguments on the host first (the same checks and
// *backend.ShapeError values as the CPU back end), then queue kernels and
// return; Download, Sum, NLLLoss and Synchronize wait. Index arguments
// (gather/scatter indices, NLL rows and labels) are checked by the
// kernels themselves: a bad index is never dereferenced, and the next
// Synchronize (or NLLLoss) returns a *backend.IndexError for the first bad
// position. Methods are safe for concurrent use (they serialize).
//
// # Kernels
//
// CUDA C sources are embedded (kernels/*.cu), compiled by NVRTC on first
// use to a CUBIN for the device's sm_XY (PTX when NVRTC cannot target it),
// and cached under os.UserCacheDir()/strata/kernels or
// $STRATA_KERNEL_CACHE, keyed by source hash, architecture, NVRTC and
// driver versions (package internal/nvrtc).
//
// # Memory
//
// Buffers come from a caching allocator with size classes (four per power
// of two): after warm-up a training loop makes no cuMemAlloc/cuMemFree
// calls (Device.Stats counts them). On out-of-memory the cache is released
// and the allocation retried once; then an *OOMError gives the bytes asked
// and free/total, and names the knobs that lower memory use. Pinned and
// mapped host memory (HostBuffer) serve zero-copy (UVA) reads from kernels.
//
// # Capabilities
//
// Device implements every optional capability of package backend
// (capability.go): siblings are further Opens of the same ordinal (own
// stream, lock and allocator), fences are events waited for without the
// device lock, pinned memory is a HostBuffer, LoadKernels compiles a
// caller's CUDA C after CommonSource with LoadModule, and Enqueue is Do
// with the *Locked as the backend.Queue. Code above the back end uses
// those interfaces, never these types.
//
// # Precision
//
// Gemm computes in full FP32 by default (CUBLAS_COMPUTE_32F).
// Options.Precision (strata train --precision) switches it: TF32 runs
// CUBLAS_COMPUTE_32F_FAST_TF32 (TF32 tensor cores, about 1e-3 relative
// error), BF16 CUBLAS_COMPUTE_32F_FAST_16BF on the same float32 matrices
// (tensor cores read the operands as bfloat16 and sum in float32, about
// 1e-2), with no conversion pass and no bfloat16 copies; bfloat16
// operands (backend.BFloat16 buffers) multiply in CUBLAS_COMPUTE_32F.
// Every other primitive computes in float32; the storage type
// backend.BFloat16 has its own kernels (Convert, GatherRows from a
// bfloat16 table) with the rounding of package backend, bit for bit
// (common.cuh: f32_to_bf16). Siblings keep the precision. The
// conformance suite runs at each precision's tolerances. Reductions
// accumulate in double. The package reads no environment variable that
// changes results but the debug switch STRATA_CUDA_POISON (EnvPoison)
// and STRATA_CUBLAS_PINNED (EnvPinned, below); docs/configuration.md
// lists them all.
//
// # Pinned GEMM algorithms
//
// Where libcublasLt loads, Gemm runs every product through cuBLASLt with
// an algorithm pinned per shape family (internal/cublas, # Pinned
// algorithms): a product's algorithm depends only on its types,
// transposes, the power-of-two buckets of m, n and k and the alignment of
// its matrices, and the first product of a family chooses and launches
// once the algorithms of all its buckets (2^0..2^24 along each
// dimension). Later products, whatever their row counts, then never use
// a kernel for the first time: a kernel's first use locks libcuda and
// waits for the device, which deadlocks a process whose other GPUs wait
// in a collective for this one (several trainers in one process). The
// products share the cuBLAS handle's 32 MiB workspace and keep 12 MiB of
// scratch (cublas.PinnedScratchBytes) for the warm launches. GemmStats
// reports families, keys, warm launches and fallbacks (products whose
// pinned algorithm cuBLASLt refused at their shape, which ran the
// heuristic's choice instead); GemmImpl says "cublasLt pinned". With
// STRATA_CUBLAS_PINNED=0 (EnvPinned), or without cuBLASLt, Gemm calls
// cublasSgemm (CUBLAS_TF32_TENSOR_OP_MATH at TF32) and cublasGemmEx as
// before. The op profile names products the same either way.
//
// # Determinism
//
// Every result is a pure function of the inputs: no floating-point
// atomics with varying order.
//   - Sum and NLLLoss use a fixed reduction tree whose shape depends only
//     on the length; SumRows sums fixed row chunks, then chunks in order.
//   - SpMM, EdgeSum, EdgeSoftmax and their transposes give each output
//     row to one warp or thread that walks its edges in order; the
//     transpose (CSC) is built once per Sparse on the device by a stable
//     radix sort, so it lists edges in increasing edge order, like the CPU.
//   - ScatterAddRows buckets the indices with the same stable sort and
//     sums each destination in increasing source order.
//   - NLLLossBackward adds identical values with atomics, which gives the
//     same sum in any order.
//   - Dropout re-implements internal/rng.Hash and DropUniform bit for bit,
//     so CPU and GPU masks are identical.
//
// Results are not bit-identical to the CPU back end (the GPU contracts
// a*b+c into fused multiply-adds and uses its own exp/log), but agree to
// the conformance suite's tolerance.
package cuda
