// Package comm is Strata's collective-communication layer.
//
// A Comm is one rank's handle on a group of Size() ranks. Every rank calls
// the same collectives in the same order: AllReduce (sum, mean, max),
// Broadcast, AllGather and AllGatherV, AllToAll and AllToAllV,
// ReduceScatter and Barrier, on host slices of float32, int32 or int64
// wrapped in a Buf (F32, I32, I64).
//
// Back ends implement the small Transport interface; New wraps a Transport
// in the shared front end, which validates arguments (an *ArgError, before
// anything is sent and without consuming a sequence number), numbers the
// operations, applies a deadline to every operation (Options.Timeout when
// the context has none), optionally checks in Debug mode that all ranks
// issued the same operation, dtype and sizes before entering the transport,
// and turns every transport failure into an *OpError naming the operation,
// its sequence number and the ranks that did not take part. After such a
// failure the Comm is broken: later calls fail at once with ErrBroken, and
// the other ranks are told (their pending operation fails too), so no rank
// hangs.
//
// Back ends: comm/inproc (goroutine ranks in one process), comm/shm
// (processes on one host through a shared segment), comm/tcp (several
// hosts). comm/dist opens one of them from the torchrun-style environment
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) through the rank-0 store of
// comm/rendezvous; comm/launch starts N local processes with that
// environment. Select picks a back end for --comm auto. comm/commtest holds
// the conformance and fault suites every back end passes, comm/commbench the
// bus-bandwidth benchmark.
//
// Also here: Bucketer packs gradients into buckets (10 MB by default) and
// reduces each as soon as backward has produced it; Coordinator fixes one
// global launch order for collectives issued concurrently by several
// pipeline stages (DSP's centralized communication coordination).
//
// Device buffers (NCCL, GPU shared memory) get the sibling interface
// DeviceComm, with the same operations, errors and numbering on
// backend.Buffer.
package comm
