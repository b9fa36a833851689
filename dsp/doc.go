// Package dsp is Strata's implementation of DSP (Cai et al., PPoPP 2023):
// sampling-based GNN training on several devices, each holding one patch
// of a partitioned graph.
//
// The pieces live in sub-packages:
//
//   - layout: one device's patch of the topology (rows of the
//     in-adjacency it owns, adjacency in global IDs), split between
//     device memory and host memory by a byte budget, with the position
//     list that says where each row lives.
//   - csp: the collective sampling primitive. Per layer, shuffle (send
//     every frontier node to the device owning its row), sample (each
//     device samples everything it received in one pass) and reshuffle
//     (send the neighbors back), over all-to-all. Node-wise sampling gives
//     byte-identical MiniBatches to sample.NeighborSampler for the same
//     key, whatever the number of devices; layer-wise sampling and random
//     walks are also collective.
//   - cache: the partitioned feature cache: each device keeps different
//     hot rows within a byte budget (or a group of devices splits one
//     copy), cold rows stay in host memory; the loader dedupes a batch's
//     nodes, fetches hot rows by all-to-all and cold rows from host memory
//     in parallel.
//   - pipeline: bounded queues with deadlines, the launch-order
//     coordinator for collectives issued by concurrent stages, and the
//     delay hook used to test for deadlocks.
//   - metrics: stage times, queue occupancy, bytes per link, cache hits.
//   - runner: the multi-device trainer: partition, per-device sampler,
//     loader and trainer stages joined by queues, BSP data parallelism
//     with bucketed gradient all-reduce, evaluation and a JSON report.
//
// Devices are ranks of a comm.Comm group, each with its own
// backend.Backend. On the CPU they are goroutines (comm/inproc, "CPU
// virtual devices"); the code uses only the Backend and Comm interfaces,
// so the same code drives GPUs when given CUDA back ends.
package dsp
