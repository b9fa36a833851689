// Package cublas binds the few cuBLAS calls Strata needs (handle
// create/destroy, stream, math mode, version, Sgemm, GemmEx) and the
// cuBLASLt calls of Pinned (handle, matmul descriptor, matrix layouts,
// preference, AlgoGetHeuristic, AlgoCheck, Matmul) at run time with
// purego, no cgo. libcublasLt is the libcublas sibling of the same major
// version (LoadLt); without it, or without one of those calls, Pinned is
// unavailable and callers keep cublasGemmEx/Sgemm.
//
// Gemm takes row-major matrices and calls the column-major cublasSgemm on
// the transposed problem: a row-major X is a column-major X^T with the
// same leading dimension, so C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T with the operands swapped.
//
// # TF32
//
// Handles start in CUBLAS_DEFAULT_MATH, which on Ampere and newer is full
// FP32 (no tensor-core TF32), so results match a float32 CPU product to
// about 1e-6 relative. SetTF32(true) switches to CUBLAS_TF32_TENSOR_OP_MATH:
// several times faster on Hopper, with about 1e-3 relative error (10-bit
// mantissa inputs, FP32 accumulation).
//
// # BF16
//
// GemmEx with Compute32FFast16BF keeps float32 matrices in memory and
// lets the tensor cores read them converted to bfloat16 (7-bit mantissa),
// accumulating in float32: about 4e-3 relative error and twice TF32's
// tensor-core rate, with no conversion pass or bfloat16 copy of the
// operands.
//
// # Pinned algorithms
//
// cuBLAS picks a kernel per product shape, and the first launch of a
// kernel sets its attributes (cuKernelSetAttribute), which takes a
// libcuda lock and waits for the device. In a process driving several
// GPUs, a first use that comes late, while another GPU's collective waits
// for this one's trainer, deadlocks (the hang XLA reports in
// openxla/xla#38932). Sampled batches vary their row counts every step, so
// bfloat16 products kept meeting new kernels.
//
// Pinned makes the kernels a product can use a small set fixed up front.
// A product's Key is its compute type, its A/B and C types, its
// transposes, the size bucket of m, n and k (the power of two >= each,
// Bucket) and the alignment class of A, B and C (AlignClass: 16, 8, 4 or
// 2 bytes dividing both the pointer and the leading dimension in bytes).
// The first product of a key no earlier family covered warms the key's
// family (Key.Family): for each dimension, every bucket 2^0..2^24 of it
// with the other two at the key's buckets, 73 keys. For each, one
// cublasLtMatmulAlgoGetHeuristic at its representative shape (the
// buckets' powers of two, packed leading dimensions; preference: the
// workspace size and the key's alignment classes) gives its algorithm,
// launched once on scratch matrices at that shape capped at 1024 per
// dimension (skipped, and counted, when cublasLtMatmulAlgoCheck refuses
// it there). Every later product of a warmed key runs that algorithm
// after cublasLtMatmulAlgoCheck accepts it at the product's shape (host
// only; skipped when the key's last product had the same shape), so its
// kernels are the warmed ones; when the check refuses, the product runs
// the heuristic's choice for its own shape and PinnedStats counts a
// fallback. Descriptors are made once per compute type, types and
// transposes; a product only updates the rows, columns and leading
// dimensions that changed (cublasLtMatrixLayoutSetAttribute). D is C (in
// place); alpha and beta are float32 host scalars.
package cublas
