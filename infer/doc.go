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
// layer-wise inference does: the previous layer's output H (N x width)
// stays in host memory (pinned, through the back end's
// backend.PinnedMemory, where it has one), and a device computes its
// destination nodes in chunks: for a chunk, the block of its nodes'
// in-edges (the nodes first among the sources, as nn.Block wants), the
// rows of H of its sources gathered on the host and uploaded, the layer
// applied (nn.Layered.ForwardLayer: the layer, then the activation between
// layers, no dropout), and the chunk's rows downloaded into the next H.
// A chunk takes destination nodes until its estimated memory (sources'
// rows, projections, edges) reaches Options.Budget. When H takes at most
// half of a device's free memory (back ends with backend.Memory: GPUs) it
// is uploaded once per layer and the chunks gather their sources on the
// device instead (Options.Placement); dense features are read the same
// way, sparse ones are gathered as sparse rows on the host. A caller
// whose devices already hold the dense features in node order (a feature
// cache of every row, as the DSP engine's) passes them (Options.Inputs):
// layer 1 gathers from them and the features are not uploaded again,
// which at papers100M's size (57 GB) would not fit beside them.
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
// same bit for bit whatever the budget and the number of devices, and
// equal to the nn model's one-pass forward over the whole graph (the
// tests check both). A back end whose matrix products round differently
// for different row counts (cuBLAS may pick other kernels) agrees up to
// float32 summation order: scripts/pyg-check.sh holds the GPUs' logits,
// on one GPU and on several, to 1e-4 of the CPU's.
package infer
