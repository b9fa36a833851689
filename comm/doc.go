// Package comm is Strata's collective-communication layer.
//
// A Comm is one rank's handle on a group of Size() ranks. Every rank calls
// the same collectives in the same order: AllReduce (sum, mean, max),
// Broadcast, AllGather and AllGatherV, AllToAll and AllToAllV,
// ReduceScatter and Barrier, on compute back-end buffers (backend.Buffer)
// of float32, int32 or int64. There is one interface for every back end:
// the host back ends take the CPU back end's buffers, which are host
// memory, and read and write them in place (a Go slice becomes one
// without a copy through cpu.WrapF32, WrapI32 or WrapI64); the device
// back ends take their compute back end's buffers (a GPU's) and may
// complete an operation asynchronously, after it returns, which Sync
// waits for.
//
// # Front end and transports
//
// A back end implements one of two small transport contracts: Transport
// (host back ends, which see byte views of the CPU buffers) or
// DeviceTransport (device back ends, which see the buffers). New and
// NewDevice put the one front end on them, which validates arguments (an
// *ArgError, before anything is sent and without consuming a sequence
// number), numbers the operations, applies a deadline to every operation
// (Options.Timeout when the context has none), optionally checks in Debug
// mode that all ranks issued the same operation, dtype and sizes before
// entering the transport, and turns every transport failure into an
// *OpError naming the operation, its sequence number and the ranks that
// did not take part. After such a failure the Comm is broken: later calls
// fail at once with ErrBroken, and the other ranks are told (their pending
// operation fails too), so no rank hangs.
//
// # Back ends
//
// Host buffers: comm/inproc (goroutine ranks in one process), comm/shm
// (processes on one host through a shared segment), comm/tcp (several
// hosts). comm/dist opens one of them from the torchrun-style environment
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) through the rank-0 store of
// comm/rendezvous; comm/launch starts N local processes with that
// environment. Select picks a back end for --comm auto.
//
// Device buffers: comm/nccl (NVIDIA's NCCL), comm/gpushm (the GPU variant
// of the shared-memory all-reduce: device-to-host copies into a pinned
// shared segment, host reduction, host-to-device copies; on the CPU back
// end it runs the same pipeline on host buffers) and comm/staged (device
// buffers staged through any host communicator; CPU buffers pass
// through without copies). comm/devdist opens one from the environment
// and SelectDevice picks one for --comm auto.
//
// comm/commtest holds the one conformance and fault suite every back end
// passes (host and device alike), comm/commbench the bus-bandwidth
// benchmark.
//
// Also here: Bucketer packs gradients into buckets (10 MB by default) and
// reduces each as soon as backward has produced it; Coordinator fixes one
// global launch order for collectives issued concurrently by several
// pipeline stages (DSP's centralized communication coordination).
package comm
