// Package backend defines the compute back-end contract: about 25 primitives
// (dense products, sparse message passing over blocks, SDDMM and edge softmax
// for attention, gather/scatter, elementwise ops, reductions, dropout, loss and
// a fused Adam step) over flat buffers that live in the back end's memory.
//
// Back ends register themselves by kind ("cpu", "cuda") and are opened by a
// device spec such as "cuda:1". Every back end runs the same conformance
// suite, tensor/backendtest.
//
// # Precision
//
// A back end is opened with a Precision (cpu.Options, cuda.Options; the
// zero value FP32), which only Gemm reads: FP32 multiplies float32
// inputs, TF32 and BF16 round both inputs to TF32 (10-bit mantissa) or
// bfloat16 (7-bit mantissa), to nearest with ties to even, and
// accumulate in float32. Weights, gradients, optimizer state and
// activations stay float32 buffers (the optimizer updates float32 master
// weights; bfloat16 activations, below, are the exception), and every
// other primitive computes in float32 as always.
// The CUDA back end runs TF32 on tensor cores through cuBLAS's TF32 math
// mode and BF16 through cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_16BF,
// which converts float32 operands to bfloat16 inside the tensor-core
// GEMM; the CPU back end rounds copies of the inputs and runs its float32
// GEMM, so CI checks the same numerics (up to the order of the float32
// sums, as in FP32). bfloat16 keeps float32's 8-bit exponent, so BF16
// needs no loss scaling (float16, with 5 exponent bits, would).
//
// BFloat16 is a storage type for data read far more often than it is
// computed on: input features. Trainers at BF16 store features as
// BFloat16 (host tables, the device copy, feature caches), so gathering a
// batch's rows reads half the bytes and a cache holds twice the rows;
// GatherRows widens them to float32 exactly, and Convert casts whole
// buffers.
// backendtest runs every primitive in each precision with that
// precision's tolerances.
//
// bfloat16 activations (BF16Activations): the primitives of a sampled
// training step's chain also accept BFloat16 operands (Gemm's A and B
// and C, Axpby, SumRows, GatherRows' dst, SpMM with one head, the Fused
// chain), each widening on read, computing in float32 and rounding once
// on store, so that a step's activations and their gradients, the bytes
// that dominate a memory-bound step, are half as large; autograd's
// Tape.SetActivations turns them on where a model's ops all take them.
// The CPU back end emulates them with the same arithmetic.
//
// # Capabilities
//
// Beyond Backend, a back end may implement small optional interfaces
// (capability.go), each found with a type assertion to the interface where
// the code that needs it is set up, never with one to a concrete back-end
// type: nothing above the back ends names a CUDA type.
//
//   - Slicer (on buffers; View, Truncate): views of part of a buffer.
//   - Siblings: further handles of one device with their own queue, lock
//     and allocator (pipeline stages), and aliases of each other's buffers.
//   - Fences: marks in the device's queue, waited for without its lock.
//   - PinnedMemory: page-locked host memory, optionally mapped so that
//     kernels read it in place (graphs and features larger than the device).
//   - SparseBuilder: a Sparse over CSR buffers built on the device.
//   - Memory: free and total device memory.
//   - Kernels and Enqueuer: kernels compiled at run time from a source the
//     caller embeds, launched with buffers, addresses and fixed-width
//     scalars (Arg) among other queued ops (Queue) under the device's lock.
//
// The CPU back end implements the first five trivially (views are
// sub-slices, siblings are more CPU back ends, fences are always reached,
// pinned memory is plain memory). Algorithms that need kernels are written
// against a per-package machine interface with a CPU implementation in
// plain Go and a CUDA one over Kernels and Enqueuer. backendtest.Capabilities
// checks whichever capabilities a back end has.
package backend
