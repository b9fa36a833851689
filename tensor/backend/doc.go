// Package backend defines the compute back-end contract: about 25 primitives
// (dense products, sparse message passing over blocks, SDDMM and edge softmax
// for attention, gather/scatter, elementwise ops, reductions, dropout, loss and
// a fused Adam step) over flat buffers that live in the back end's memory.
//
// Back ends register themselves by kind ("cpu", "cuda") and are opened by a
// device spec such as "cuda:1". Every back end runs the same conformance
// suite, tensor/backendtest.
package backend
