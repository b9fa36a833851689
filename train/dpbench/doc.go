// Package dpbench times one data-parallel training step of sampled
// GraphSAGE with one process per device: every rank samples its own
// batch, runs forward and backward, averages all gradients with one
// all-reduce through a comm.Comm, and takes an Adam step. The
// parameters' gradients are views of one flat buffer (FlatGrads), so the
// all-reduce needs no packing copy. BenchmarkDataParallelStep compares
// NCCL with the GPU shared-memory back end on two GPUs (scripts/gpu.sh
// dp-step).
package dpbench
