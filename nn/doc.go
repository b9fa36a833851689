// Package nn holds GNN layers and models built on package autograd:
// Linear, SAGEConv (mean), GCNConv (symmetric normalization with self-loops)
// and GATConv (multi-head attention), and the GCN, GraphSAGE and GAT models
// that stack them.
//
// Parameters are Params: named back-end buffers with a gradient buffer of
// the same shape. A forward pass wraps them as tape leaves, so Backward
// accumulates into Param.Grad; an optimizer (package optim) reads the
// gradients and zeroes them.
//
// Message passing runs over Blocks: back-end CSR matrices whose rows are
// destination nodes and columns source nodes, with the destination nodes
// first among the sources (DGL's message-flow graphs). A full graph is one
// square Block used by every layer. Per-edge weights (mean aggregation,
// GCN normalization) and the self-loop variant of a block are computed the
// first time a layer asks for them and cached on the Block: on the host
// for blocks made from host arrays (NewBlock, UploadBlock, UploadGraph),
// on the back end for blocks wrapping a back-end resident Sparse
// (NewBlockFromSparse, e.g. the GPU sampler's blocks), which never leave
// the device.
//
// Typed graphs have HeteroModel (NewHetero): R-GCN ("rgcn") and
// heterogeneous GraphSAGE ("hsage"), one conv per relation summed per
// destination type, over HeteroBlocks (per node type destinations first
// among sources, per relation a sparse matrix), built from
// sample.HeteroBlock or a whole typed graph with NewHeteroBlock.
//
// NLLLoss is the mean negative log-likelihood computed without a host
// round trip, for training loops that keep a device busy.
//
// Initialization is deterministic: Glorot/Xavier-uniform weights drawn from
// internal/rng streams keyed by (Config.Seed, parameter index), zero biases.
// Dropout masks are keyed by (step seed, layer, purpose), so two runs with
// the same seeds are bit-identical.
package nn
