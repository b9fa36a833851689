// Package infer runs a trained model over every node of a graph layer by
// layer, with all neighbors (full-neighbor inference), on one device or
// several, within a memory budget per device: what 'strata predict',
// 'strata embed', 'strata evaluate' and training's whole-graph evaluation
// (train.Evaluator, Eval "full") compute.
//
// # Layer-wise
//
// A sampled model evaluated on a whole graph in one pass needs every
// layer's activations of every node on the device at once. Here each
// layer is computed for every node before the next starts, as DGL's
// layer-wise inference does, and a device computes its destination
// nodes in chunks: for a chunk, the block of its nodes' in-edges (the
// nodes first among the sources, as nn.Block wants), the rows of the
// layer's input of its sources, the layer applied
// (nn.Layered.ForwardLayer: the layer, then the activation between
// layers, no dropout), and the chunk's rows written to the layer's
// output. A chunk takes destination nodes until its estimated memory
// (sources' rows, projections, edges) reaches Options.Budget.
//
// # Where a layer's output lives
//
// Each hidden layer's output H (N x width: at papers100M's size 28 GB
// at width 64, 114 GB at 256) is planned per layer (Options.Resident):
//
//   - resident: every device keeps the rows of its own range
//     (Options.Offsets; with a node list, its part of the nodes the next
//     layer reads) in device memory, and the next layer's chunks gather
//     their source rows from the devices that hold them. Chosen when
//     every device reports its memory (backend.Memory: GPUs) and its
//     share fits beside twice the chunk budget (ResidentAuto), or on any
//     back end with ResidentOn (CPU virtual devices run this path in
//     CI); Options.ResidentBytes caps a device's share.
//   - host: H goes to host memory (from 256 MiB on Linux an anonymous
//     mapping in huge pages, outside Go's heap, whose allocator would
//     zero it on one core; each chunk's rows copied there through
//     pinned slots while the device computes the next chunks, unless
//     Options.SyncOutputs), and the next layer gathers each chunk's
//     source rows on the host into pinned staging and uploads them, or
//     uploads H whole to every device when it takes at most half of
//     each one's free memory (Options.Placement). When it does not, a
//     device keeps a copy of H's most-read rows (the nodes of highest
//     in-degree) in the memory the chunks leave, and its chunks upload
//     only the other rows (Options.HotBytes): a hidden layer's chunks
//     otherwise upload several times H. A whole-graph output is handed
//     over mapped: Result.Release frees it.
//
// LayerStats, the progress bar and Options.Log say which path ran for
// each layer, with the bytes a device held, and why a hidden layer went
// to the host.
//
// With several devices a resident layer's rows move by an exchange on a
// device communicator (Options.Exchange, or one Run opens: in-process
// between CPU back ends, NCCL between GPUs; Options.Keep keeps it across
// Runs), the protocol of the DSP feature cache's loader (dsp/cache): a
// header (each device's request counts and status, exchanged in host
// memory: the devices' workers are goroutines of one process, and a
// header on the device would wait for the device's queue), the
// requested row numbers by one all-to-all-v, each holder's gather from
// its own buffer, the rows back by a second all-to-all-v after the own
// rows gathered locally, and one gather into the chunk's source order.
// The routing runs on the host, where the chunk's source list is built
// anyway: no table of N entries per device. The devices run the layer
// in lockstep: as many rounds as the device with the most chunks,
// padded with rounds that only serve the others. NCCL's collectives are
// queued asynchronously, so the host builds and queues the next rounds
// while the devices exchange; each device waits for its exchanges at the
// layer's end. Every collective and header has
// the stall timeout as its deadline, and a failure names the devices
// that did not take part; a device that fails before a round says so in
// the header, so the others fail at once.
//
// Layer 1 reads the features: dense features are uploaded whole when
// they fit (Options.Placement) or gathered per chunk on the host, sparse
// ones are gathered as sparse rows on the host. When every device (each
// its own back end) takes the whole table, of 1 GiB or more, each
// uploads only its range
// (Options.Offsets) and the devices fill in the rest by one all-gather
// on the device communicator, within the stall timeout: the host sends
// the table once instead of once a device (4 x 57 GB took 10.6 s to
// reach 4 GPUs), the GPUs copy among themselves. The communicators
// refuse a source inside the destination, so a range goes up to a
// staging buffer first (a device briefly holds its range twice); where
// the exchange does not open or the staging does not fit, each device
// uploads the table whole. A caller whose devices
// already hold the dense features in node order (a feature cache of
// every row, as the DSP engine's) passes them (Options.Inputs): layer 1
// gathers from them and the features are not uploaded again, which at
// papers100M's size (57 GB) would not fit beside them.
//
// The features may instead be held in parts, each device some nodes'
// rows (Options.InputShards: by range, or where a Holder says, as a
// feature cache partitioned over the devices holds them): layer 1 then
// reads its sources by the resident layers' exchange, the features
// being "layer 0", resident in parts, and neither a replicated table
// nor a host gather is needed (14 GB a GPU of 4 at papers100M's size
// instead of 57). Training's evaluation passes the DSP engine's cache
// when it is partitioned and caches every row (dsp/engine). Without
// either, on several GPUs whose free memory cannot hold the whole table
// twice but can hold their ranges, Run uploads each device's range of
// the features and reads them the same way ("shards" in LayerStats).
//
// # Building the chunks on the host
//
// A chunk's block (its destinations' in-edges, with local source IDs)
// and source list are built on the host: at papers100M's size about
// 800M edges a device a layer. Each device builds with several
// goroutines (Options.Workers, by default GOMAXPROCS / devices; from 4
// on, at most 8 a chunk): each goroutine owns a range of node IDs and
// finds, over the chunk's edges, the first edge of every source it
// owns (one word a node, no atomics), then each numbers the first
// edges of its range of edges from the counts of the ranges before it,
// so the block is the same bytes whatever the number of goroutines
// (the destinations, then the other sources in the order of their
// first edge). Up to 4 builders per device (one per 4 workers, each
// with its own scratch; builder i makes the chunks c with c%builders
// == i, the device takes them in order) make the next chunks (and, for
// a resident input, their routes to the devices holding their rows,
// a node's row found in constant time by a rank index when the layer
// computed a list of nodes) while the device computes the current one:
// the exchange's rounds are lockstep, the building runs ahead.
// LayerStats.BuildSeconds and BuildWaitSeconds (and the log) say how
// long the building took and how much of it the computing waited for.
//
// The nodes each layer computes (the requested ones, then hop by hop
// their in-neighbors) are marked in a bitset by several goroutines and
// listed in order; the log's first line gives this setup's time.
//
// Only what the request needs is computed: the last layer for the
// requested nodes, each earlier layer for the nodes the next one reads
// (the requested nodes and their in-neighbors, hop by hop), so
// evaluating the labeled nodes of a large graph skips the rest of the
// last layers.
//
// # Keeping uploads between runs
//
// Options.Keep carries what a Run uploaded to a device to the next Run of
// the same work (the same graph, features, request and back ends): the
// chunks' blocks and source lists and, when read on the device, the
// features, within a byte budget per device; the later Run reuses the
// first one's plan and chunk budgets, so its chunks are the kept ones.
// Training's evaluation (train.Evaluator) keeps one for the whole run:
// only the parameters change between epochs.
//
// # Devices
//
// With several back ends each takes a contiguous range of node IDs
// (Options.Offsets, by default equal ranges, or a partition's ranges) and
// computes the chunks of its range, all devices at once; every device
// holds a replica of the model (NewModels). The algorithm is written once
// against the backend.Backend interface: CPU back ends (and CPU virtual
// devices, as CI runs it) and CUDA back ends run the same code.
//
// # Determinism
//
// A node's output is computed from the same rows, summed in the same
// edge order (the in-adjacency's), whatever chunk or device computes it:
// GCN's normalization takes the whole graph's degrees
// (nn.Block.SetSourceDegrees), SAGE's mean and GAT's softmax run over the
// node's whole in-neighborhood. On the CPU back end the logits are the
// same bit for bit whatever the budget, the number of devices and where
// the hidden layers lived (a resident layer's rows are copied, never
// recomputed or converted), and
// equal to the nn model's one-pass forward over the whole graph (the
// tests check both). A back end whose matrix products round differently
// for different row counts (cuBLAS may pick other kernels) agrees up to
// float32 summation order: scripts/pyg-check.sh holds the GPUs' logits,
// on one GPU and on several, to 1e-4 of the CPU's.
package infer
