// Package gpushm is the GPU variant of the shared-memory all-reduce for
// ranks on one host whose GPUs cannot reach each other directly (no
// peer-to-peer access): device buffers are copied into a page-locked
// shared segment, reduced on the CPUs and copied back.
//
// # All-reduce
//
// The segment (a file in /dev/shm found through the rendezvous store, or
// a memfd for goroutine ranks) holds, per rank, Slots input chunks, plus
// Slots result chunks, and three flags per rank and slot. Every process
// page-locks the segment's data with cuMemHostRegister, so its copies are
// asynchronous copy-engine transfers on two streams of its own. A message
// is cut into chunks (about 8, from 256 KiB up to ChunkBytes); chunk q
// uses slot q mod Slots. Each rank runs one pipeline:
//
//  1. copy-in: when every rank has finished with the slot's previous
//     chunk, queue the device-to-host copy of chunk i into its input slot;
//  2. when that copy's event completes, raise its "in" flag;
//  3. once every rank's chunk i is in, its reducer goroutines (Workers;
//     the pipeline goroutine itself for shares up to 64 KiB) add the
//     inputs in rank order 0..n-1 (comm/internal/reduce, the shm back
//     end's kernels) over this rank's 1/n share of the chunk into the
//     result slot, then raise its "red" flag;
//  4. once every rank's share is reduced, queue the host-to-device copy of
//     the result;
//  5. when it completes, raise its "done" flag (the slot may be reused).
//
// The steps run for different chunks at once: the copy-in of chunk i+1
// and the copy-out of chunk i-1 overlap the reduction of chunk i, on
// separate streams and events. Sums are in rank order on every rank, so
// results are bit-identical across ranks and runs, and equal to a
// sequential float32 sum. The operation is ordered after the work queued
// on the device's stream before the call (an event), and is complete when
// the call returns.
//
// # Measured
//
// On 2 H200s (BENCHMARKS.md) the all-reduce reaches 11-31 GB/s bus
// bandwidth from 16 MiB to 256 MiB, 108-122% of NCCL's with
// NCCL_P2P_DISABLE=1; below 16 MiB it has 2-3x NCCL's latency (about
// 65 us at 4 KiB).
//
// # Other operations
//
// Broadcast, all-gather(v), all-to-all(v), reduce-scatter and barrier are
// staged (comm/staged) through a host comm/shm communicator opened with
// the same store: correct, but not tuned.
//
// # Failures
//
// Every wait checks the deadline, the segment's abort word (set by a rank
// that failed), and whether the ranks it depends on have closed their
// communicator or exited; a failure names the operation, its sequence
// number and the missing ranks (comm.OpError). Linux only.
package gpushm
