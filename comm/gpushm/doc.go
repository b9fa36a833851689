// Package gpushm is the GPU variant of the shared-memory all-reduce for
// ranks on one host whose GPUs cannot reach each other directly (no
// peer-to-peer access): device buffers meet in a page-locked shared
// segment. Small all-reduces are reduced by the GPUs themselves, from
// their own stream (the device path); large ones are reduced by the CPUs
// (the host pipeline).
//
// # Segment
//
// The segment (a file in /dev/shm found through the rendezvous store, or
// a memfd for goroutine ranks) holds, per rank, Slots input chunks, plus
// Slots result chunks, and three flags per rank and slot (in, red,
// done). Every process page-locks it with cuMemHostRegister and maps it
// into its device's address space, so copies into and out of it are
// asynchronous copy-engine transfers and the device can read the slots
// and read and write the flags. Every all-reduce uses the next slot(s)
// in turn (slot q mod Slots for the q-th chunk, the same on every rank),
// whichever path it takes.
//
// # Device path (up to DeviceMax bytes, 16 MiB by default)
//
// The message is cut into chunks of up to DeviceChunk (4 MiB), each
// through the next slot. For every chunk, queued after the work already
// on the device's stream (the one the caller's work is on):
//
//  1. on a copy stream of the mover's own: wait (cuStreamWaitValue32)
//     until every peer's done flag of the slot shows its last use is
//     over, copy the chunk into this rank's input slot and raise this
//     rank's in flag (cuStreamWriteValue32);
//  2. on the device's stream: wait until every rank's in flag is raised,
//     then one kernel adds every rank's input in rank order 0..n-1 (the
//     peers' read from the mapped segment, this rank's own from the
//     buffer) into the buffer, and divides for Mean;
//  3. raise this rank's done flag.
//
// The copy of chunk c+1 overlaps the reduction of chunk c; the device's
// later work follows the last reduction. A message of one chunk is
// copied on the device's stream as well (nothing to overlap, and the
// hand-over between streams costs about 35 us).
//
// The host only queues; the GPUs exchange and reduce on their own, as
// NCCL's kernels do. By default the call then waits for the stream to
// finish the operation (a failure is reported by the call that caused
// it, as the fault suite requires). With Options.Async (strata's
// --gpushm-async) the call returns once the work is queued, like
// an NCCL call, and the caller's next operations on the stream follow it;
// a failure is then reported by the next operation or Sync. Waiting
// streams never hang: whoever watches an operation (the waiting call, or
// in asynchronous mode a watchdog goroutine, every millisecond) fails it
// at its deadline, on an abort, or when a peer has gone, publishes the
// abort in the segment, then releases its own stream by writing the
// values it waits for into the peers' flags and lets the stream drain; a
// rank whose stream consumed such a released flag sees the abort when
// its operation completes and fails it too. The path needs the stream
// memory operations and NVRTC (the kernels are compiled on first use and
// cached); Open checks both (a probe on the mapped segment) and falls
// back to the host pipeline when they are missing.
//
// # Host pipeline (larger all-reduces)
//
// A message is cut into chunks (about 8, from 256 KiB up to ChunkBytes);
// chunk q uses slot q mod Slots. Each rank runs one pipeline:
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
// separate streams and events. The operation is ordered after the work
// queued on the device's stream before the call (an event), and is
// complete when the call returns.
//
// All-reduces above DeviceMax (and all of them with DeviceMax < 0, or
// where the device path is unavailable) take the host pipeline. Both
// paths sum in rank order on every rank, so results are
// bit-identical across ranks, paths and runs, and equal to a sequential
// float32 sum.
//
// # Waiting
//
// A waiting host polls without sleeping for 500 us (50 us on machines
// with fewer than 8 cores), then naps 20 us at a time with nanosleep and
// a 1 us timer slack. (time.Sleep is not used: with nothing else to run,
// the Go runtime sleeps in epoll_wait, whose timeout counts whole
// milliseconds, so a 20 us time.Sleep lasts about 1 ms and a wait noticed
// a finished copy up to a millisecond late; Options.Idle IdleGoSleep
// brings that back for comparison.) STRATA_GPUSHM_TRACE=1 (EnvTrace, a
// debug switch) times the phases of every all-reduce, on the host and on
// the device, and prints their means when the communicator closes.
//
// # Settings
//
// Every tuning knob is a field of Options; the package reads no
// environment variable but EnvTrace. FromEnv applies the older
// STRATA_GPUSHM_* variables to the fields they name, for programs that
// keep honouring them (strata does, below its --gpushm-* flags; see
// docs/configuration.md).
//
// # Measured
//
// See BENCHMARKS.md. On 2 H200s with NCCL_P2P_DISABLE=1 the device path
// all-reduces 808 KiB in 65 us (12.7 GB/s bus bandwidth; NCCL 93 us) and
// 3.2 MiB at 20.6 GB/s (NCCL 17.8); the host pipeline reaches 11-31 GB/s
// from 16 MiB to 256 MiB, 108-136% of NCCL's. A data-parallel SAGE step
// with one 0.83 MB gradient all-reduce takes 4.24-4.52 ms (4.04 ms with
// Async) against NCCL's 4.34-4.37 ms (after comm/nccl's waits stopped
// oversleeping; 4.9-5.1 ms before).
//
// # Other operations
//
// Broadcast, all-gather(v), all-to-all(v), reduce-scatter and barrier are
// staged (comm/staged) through a host comm/shm communicator opened with
// the same store: correct, but not tuned. They first wait for queued
// device-path all-reduces.
//
// # Failures
//
// Every wait checks the deadline, the segment's abort word (set by a rank
// that failed), and whether the ranks it depends on have closed their
// communicator or exited; a failure names the operation, its sequence
// number and the missing ranks (comm.OpError). On the host pipeline each
// in flag carries the operation's number, dtype and element count in its
// cache line, so ranks that pass different counts fail with an
// ErrMismatch naming both; the device path exchanges no such header
// (like NCCL: Options.Debug checks the counts there, at the cost of one
// exchange per operation). Linux only.
package gpushm
