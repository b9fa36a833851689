// Package nccl is the communicator (comm.Comm) of GPU buffers on NVIDIA's
// NCCL (bindings in internal/nccl), for ranks whose GPUs reach each other
// directly (NVLink or PCIe peer-to-peer), one process per GPU.
//
// Open exchanges the ncclUniqueId through the job's rendezvous store (rank
// 0 makes it), joins the communicator (ncclCommInitRank, bounded by the
// context's deadline) and puts comm's device front end on it: argument
// checks, sequence numbers, deadlines, the Debug check and *comm.OpError
// reporting.
//
// # Operations
//
// All-reduce (sum, mean as ncclAvg, max), broadcast, all-gather and
// reduce-scatter map to the NCCL collectives; all-gather-v and
// all-to-all(v) are grouped ncclSend/ncclRecv (ncclGroupStart/End) plus
// a device copy of the rank's own block; barrier is a one-element
// all-reduce. Operations are queued on the device's stream (after the
// work already there) and each call waits for its completion, or, with
// Options.Async, only for its launch: a watchdog then fails a queued
// operation at its deadline and aborts the communicator, and the next
// call (or Sync, or Close) reports it.
//
// # Deadlines and failures
//
// A call polls its completion event (cuEventQuery) and
// ncclCommGetAsyncError until the deadline. When it has waited 50 ms it
// posts its sequence number to the store, and then checks the store every
// 50 ms for an abort published by another rank and for ranks that closed
// their communicator before this operation. On a timeout, cancellation or
// error the front end asks the store which ranks never posted this
// operation (the missing ranks), publishes the failure there (so the
// others' pending calls fail at once with a *comm.AbortError) and aborts
// the NCCL communicator (ncclCommAbort), which ends its kernels in flight.
//
// Several communicators (one per pipeline stage, say) are opened by
// calling Open once per communicator with a distinct Options.Prefix.
package nccl
