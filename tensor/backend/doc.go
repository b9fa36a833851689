// Package backend defines the compute back-end contract: about 25 primitives
// (dense products, sparse message passing over blocks, SDDMM and edge softmax
// for attention, gather/scatter, elementwise ops, reductions, dropout, loss and
// a fused Adam step) over flat buffers that live in the back end's memory.
//
// Back ends register themselves by kind ("cpu", "cuda") and are opened by a
// device spec such as "cuda:1". Every back end runs the same conformance
// suite, tensor/backendtest.
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
