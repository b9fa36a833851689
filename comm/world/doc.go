// Package world is the layout of one training job over processes and
// machines: which process owns which ranks, on which host, and how to
// open communicators whose members are this process's devices and whose
// group spans the whole job.
//
// A process joins with Join (the job's description comes from
// rendezvous.Detect: 'strata launch' and torchrun's RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT, or an srun task's SLURM_* variables). It
// says how many devices it owns; the job's ranks are every process's
// devices in process order (process 0's devices are ranks 0..n0-1, then
// process 1's, ...). The counts, hosts and addresses are exchanged
// through the rank-0 store of comm/rendezvous, and so is the training
// configuration: every process must pass the same one, and a process
// that differs is refused by name, with the first setting that differs.
// Single is the world of a lone process that owns every rank.
//
// # Communicators
//
// HostGroup and DeviceGroup open, per call, one communicator per local
// rank, ranked globally; like every comm.Comm they take back-end
// buffers (the CPU back end's for host groups: cpu.WrapF32 and the
// like). In one process they are what the trainers used before
// (comm/inproc, NCCL through nccl.OpenLocal). DeviceOptions.Kind picks
// the device groups' back end (a trainer's --comm): NCCL, or a host kind
// whose buffers are the CPU devices' own and through which GPU buffers
// are staged (comm/staged); kinds that cannot span processes (gpushm,
// inproc) are refused there. Across processes, CPU ranks use shared memory
// (comm/shm) when every process is on one host and TCP (comm/tcp) across
// hosts, chosen by comm.Select, with one transport endpoint per local
// rank, all found through the one store (each rank sees the store as a
// view with its global rank and the job's size, its keys under the
// group's name). Over TCP, float sums would be taken in ring order;
// the world's host communicators sum them in rank order instead (an
// all-gather, then the sum 0..n-1), so a job of several processes gives
// the same numbers, bit for bit, as one process with the same devices.
// GPU ranks use NCCL with the unique id exchanged through the store
// (comm/nccl.Open); the local GPUs of a process call ncclCommInitRank
// concurrently, as NCCL requires.
//
// # Hosts
//
// A process's host is STRATA_HOST_ID when set, else NCCL_HOSTID, else
// the boot id and host name: distinct values make processes on one
// machine count as separate machines (the CI test's simulated machines,
// NCCL_HOSTID for NCCL across them). The address a process advertises
// (TCP) is STRATA_COMM_HOST when set, else loopback when the store is
// on loopback, else the interface that routes to the store. Off loopback
// every connection needs mutual TLS (comm/auth).
//
// # Failures
//
// Every wait on another process has a deadline. Explain turns a
// communication failure that names ranks into a *PeerError naming the
// processes, hosts and ranks missing. A process that fails before the
// others have finished setting up calls Leave with its error, which
// tells them through the store, so they stop at once with its message
// instead of waiting for their deadline; every process also beats a
// heartbeat counter in the store, and a setup wait fails naming a process
// silent for Options.PeerTimeout (dead, stopped, or cut off).
//
// # Checkpoints
//
// The trainers' state is replicated, so process 0 writes the one copy;
// every process writes its own ranks' state beside it (WriteState,
// DIR/process-P.json), a resume agrees on the checkpoint through the
// store (AgreeCheckpoint), checks the process's state against it
// (CheckState) and refuses another layout by name (LayoutDiff).
package world
