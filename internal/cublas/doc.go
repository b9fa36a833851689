// Package cublas binds the few cuBLAS calls Strata needs (handle
// create/destroy, stream, math mode, version, Sgemm, GemmEx) at run time
// with purego, no cgo.
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
package cublas
