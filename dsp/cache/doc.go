// Package cache is DSP's partitioned feature cache and its loader, on
// GPUs and CPU back ends with the same code.
//
// Every device has a byte budget of device memory for feature rows. The
// cache Plan decides which rows each device holds:
//
//   - Partition (DSP's PartitionCache, the default): device p caches the
//     hottest nodes of its own patch. Every hot row lives on exactly one
//     device, so together the devices cache up to K budgets' worth of
//     rows; a row cached elsewhere is one all-to-all away.
//   - Replicate with GroupSize g (GraphLearn's DeviceGroup): devices form
//     groups of g consecutive ranks; each group holds the same global
//     hottest rows, split round-robin among its members. g = 1 gives every
//     device its own full copy; g = K is a partitioned cache ranked
//     globally.
//   - Auto: replicate over the fewest devices whose budgets hold every
//     row, else partition.
//
// Hotness is an order of nodes, hottest first: InDegree (the default, as
// DSP, GLT and Quiver), PageRank, ReversePageRank, or ByCounts from a
// pre-sampling pass (how often each node was an input node).
//
// Rows that are not cached anywhere are cold: they stay in host memory
// (pinned and read through UVA on GPUs; the shared table on the CPU).
//
// Each device keeps a Store: the rows the plan gives it in device memory,
// every other row readable from host memory (package feature's store on
// a GPU, internal/cudadsp.Store; HostStore: the host table on a CPU back
// end).
// A Loader serves one batch's input nodes (LoadDevice: IDs in a device
// buffer, as the sampler left them; Load: host IDs, uploaded first):
//
//  1. the IDs are grouped on the device by the device that serves each
//     row (a byte-per-node holder table in device memory, a counting sort
//     in two kernels: own rows, cached and cold, first, then each peer's
//     in rank order); the device writes the counts, read back once;
//  2. the own rows are gathered into a staging buffer, and a header
//     all-to-all on a host communicator carries each device's status and
//     request counts (a device with bad input makes every device fail at
//     once);
//  3. the IDs go out by one all-to-all-v on the device communicator
//     (NCCL between GPUs, in-process on the CPU, or what --comm picks),
//     each holder gathers the asked rows from its cache (by its slot
//     table), and the rows come back by a second all-to-all-v, into the
//     staging buffer after the own rows;
//  4. one kernel scatters the staging rows to their batch positions.
//
// LoadDropout and LoadDeviceDropout apply the model's input dropout
// (Dropout: backend.Dropout's rule over the batch's flat indices) in the
// pass that writes the rows: the local gather (Store.GatherDropout), or
// step 4's scatter. The rows equal a plain load followed by
// backend.Dropout, bit for bit, and the trainer skips its own pass.
//
// With one device, or a plan in which no device serves another (nothing
// cached, or replication on every device), a load is a single local
// gather (plus the counting kernel for the cache metrics and the check of
// the IDs). Whatever the budget and policy, the rows returned equal the
// feature table's.
//
// The steps run through a small machine interface (Machine,
// machine_cpu.go): the kernels of route.cu on a GPU (the registered
// DeviceMachine: package internal/cudadsp), their host mirror on any
// other back end, which is what the CPU tests and CPU virtual devices
// run.
//
// At BF16 (the devices' precision, ValueBytes) a CUDAStore holds bfloat16
// rows, on the device and in pinned memory, and the plan fits twice the
// rows in a budget; a HostStore reads the shared table, whose values the
// trainer rounded to bfloat16, and counts its rows at 2 bytes a value.
// Loads return float32 rows, widened exactly, or, for a trainer with
// bfloat16 activations (LoaderConfig.BFloat16Rows, on stores that write
// them: BF16Gatherer), bfloat16 rows: the float32 rows rounded to
// nearest even as they are written (after the input dropout), so the
// step reads them with no conversion. Peers exchange float32 rows; the
// final scatter rounds.
//
// Metrics: local hits, peer hits and misses (cold rows); feature bytes per
// link: local (own cache), peer (IDs and rows sent to peers, headers) and
// host (cold rows).
package cache
