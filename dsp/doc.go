// Package dsp is Strata's implementation of DSP (Cai et al., PPoPP 2023):
// sampling-based GNN training on several devices, each holding one patch
// of a partitioned graph.
//
// Every algorithm is written once, against a small per-package machine
// interface (the kernels it needs), and runs on GPUs and on CPU "virtual
// devices" alike: CPU back ends, one group of goroutines per device,
// in-process communicators (which take their buffers as they are). The
// CPU machines run in production on CPU devices and in CI; the CUDA
// machines (package internal/cudadsp, with the .cu kernels, which
// registers them with csp and cache; the engine imports it) run on
// GPUs, where the GPU tests check them against the CPU run.
//
// A newcomer reads the sub-packages in this order:
//
//   - layout: one device's patch of the topology (rows of the
//     in-adjacency it owns, adjacency in global IDs), split between
//     device memory and host memory by a byte budget.
//   - csp: collective sampling. Per hop, shuffle (send every frontier
//     node to the device owning its row), sample (each device samples
//     everything it received in one pass) and reshuffle (send the
//     neighbors back), over all-to-all. Node-wise batches are
//     byte-identical to sample.NeighborSampler's for the same key,
//     whatever the number of devices; layer-wise sampling and random
//     walks are collective too. The protocols run on a CPU machine or a
//     CUDA one.
//   - cache: the partitioned feature cache: each device keeps different
//     hot rows within a byte budget (or a group of devices splits one
//     copy), cold rows stay in host memory; the loader groups a batch's
//     IDs by the device serving each row, exchanges IDs and rows by
//     all-to-all-v and scatters them into the batch's order (kernels on
//     a GPU, their host mirror on the CPU).
//   - pipeline: bounded queues with deadlines, the launch-order
//     coordination of collectives issued by concurrent stages, and the
//     delay hook used to test for deadlocks.
//   - engine: the one DSP engine: partition, per-device sampler, loader
//     and trainer stages joined by queues, BSP data parallelism with a
//     bucketed gradient all-reduce, evaluation, checkpoints and a JSON
//     report with the pipeline metrics.
//
// Beside them: metrics (stage times, queue occupancy, bytes per link,
// cache hits) and internal/devbuf (buffer views, uploads and stream
// fences).
package dsp
