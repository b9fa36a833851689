// Package gpucache is DSP's partitioned feature cache on devices that
// exchange rows with device communicators (comm.DeviceComm: NCCL between
// GPUs): the device-side sibling of package dsp/cache, whose Plan it
// follows.
//
// Each device keeps a Store: the rows the plan gives it in device memory,
// every other row readable from host memory (pinned and read through UVA
// on GPUs, feature.Store). A Loader serves one batch's input nodes
// (LoadDevice: IDs in a device buffer, as the sampler left them; Load:
// host IDs, uploaded first):
//
//  1. the IDs are grouped on the device by the device that serves each
//     row (a byte-per-node holder table in device memory, a counting sort
//     in two kernels: own rows, cached and cold, first, then each peer's
//     in rank order); the device writes the counts, read back once;
//  2. the own rows are gathered into a staging buffer, and a header
//     all-to-all on a host communicator carries each device's status and
//     request counts (a device with bad input makes every device fail at
//     once);
//  3. the IDs go out by one all-to-all-v on the device communicator, each
//     holder gathers the asked rows from its cache (by its slot table),
//     and the rows come back by a second all-to-all-v, into the staging
//     buffer after the own rows;
//  4. one kernel scatters the staging rows to their batch positions.
//
// With one device, or a plan in which no device serves another (nothing
// cached, or replication on every device), a load is a single local
// gather (plus the counting kernel for the cache metrics and the check of
// the IDs).
//
// On back ends other than CUDA the same steps run through a host mirror
// of the kernels (hostMachine), which is what the CPU tests cover. Router
// is the host routing of the previous loader, kept as a reference and a
// benchmark.
//
// CUDAStore is the GPU piece (a feature.Store); HostStore serves CPU back
// ends.
//
// Metrics: local hits, peer hits and misses (cold rows); feature bytes per
// link: local (own cache), peer (IDs and rows sent to peers, headers) and
// host (cold rows).
package gpucache
