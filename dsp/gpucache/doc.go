// Package gpucache is DSP's partitioned feature cache on devices that
// exchange rows with device communicators (comm.DeviceComm: NCCL between
// GPUs): the device-side sibling of package dsp/cache, whose Plan it
// follows.
//
// Each device keeps a Store: the rows the plan gives it in device memory,
// every other row readable from host memory (pinned and read through UVA
// on GPUs, feature.Store). A Loader serves one batch's input nodes (IDs
// on the host, as the sampler copied them out; unique when they come from
// a GPU sampler):
//
//  1. the IDs are routed (Router: a byte per node says which device
//     serves it; large batches are split over several goroutines): rows
//     this device caches and cold rows are gathered locally; rows a peer
//     caches are asked of it;
//  2. a header all-to-all on a host communicator carries each device's
//     status and request counts (a device with bad input makes every
//     device fail at once);
//  3. the IDs go out by one all-to-all-v on the device communicator, each
//     holder gathers the asked rows from its cache, and the rows come back
//     by a second all-to-all-v, into a staging buffer after the locally
//     gathered rows;
//  4. one row gather by the route's permutation puts the rows in the
//     batch's order.
//
// With one device, or a plan in which no device serves another (nothing
// cached, or replication on every device), a load is a single local
// gather.
//
// CUDAStore and CUDAFetch are the GPU pieces (feature.Store; a pinned
// copy of IDs waited for with a fence); HostStore serves CPU back ends.
//
// Metrics: local hits, peer hits and misses (cold rows); feature bytes per
// link: local (own cache), peer (IDs and rows sent to peers, headers) and
// host (cold rows).
package gpucache
