// Package fullgraph trains GCN, GraphSAGE (mean) and GAT on the whole
// graph every epoch (no sampling), on one device or decentralized over
// several, with Sancus's staleness-aware communication avoidance
// (historical embeddings, skip-broadcast under bounded staleness).
// 'strata train --mode fullgraph --devices cpu:4' runs it, and 'strata
// train --mode full' (GCN's and GAT's default) on one device: it is
// Strata's one whole-graph trainer.
//
// # What it shares with package train
//
// Config embeds train.Common, the settings every trainer reads the same
// way (model, Adam or SGD, schedule, evaluation cadence, whole-graph or
// sampled evaluation, row normalization, model selection); features are
// prepared by train.NewFeatures, evaluations scored by train.Score (each
// device its rows, the tallies added in rank order; Eval "sampled" runs
// train.Evaluator on device 0 with an nn model holding its parameters),
// and the Report is train.Report with the engine's configuration,
// devices, memory and communication. Initial weights and dropout masks
// are keyed as train keys them (Common.ModelConfig, Common.DropoutSeed),
// so one device gives, bit for bit, the run of package train's former
// full-batch trainer.
//
// # Checkpoints
//
// With Options.CheckpointDir device 0 saves the parameters, the
// optimizer state, the epochs done and the report so far every
// CheckpointEvery epochs, when interrupted between epochs and at the end;
// Resume goes on exactly as the uninterrupted run on the same devices.
// Staleness carries the devices' historical embeddings from epoch to
// epoch, which are not saved: Run refuses checkpoints with it.
//
// # One device
//
// Aggregation is the back end's SpMM over a CSR matrix with per-entry
// weights: a fused gather-multiply-add per destination row, no per-edge
// message tensor (GAT keeps its nnz x heads attention coefficients, not
// nnz x width messages). A layer keeps for its backward pass its input
// after dropout, its aggregation when the weight gradient needs it, and
// its output until the next layer has applied dropout to it; dropout
// masks and pre-activations are not kept, because the gradient through
// the previous layer's ReLU and this layer's dropout is
// y > 0 ? dy/(1-p) : 0 with y the dropped input. (GAT's ELU has no such
// shortcut: its hidden layers keep their pre-activations and the next
// layer its dropout mask, and every GAT layer its attention logits,
// softmax and attention dropout mask, nnz x heads each.) The output
// act(self + neighbors + bias) and that gradient are one pass each when
// the back end has BiasAct and ReLUMaskScale (the CUDA back end does),
// else composed from standard primitives with the same arithmetic. The
// report gives, per layer, the bytes its forward pass keeps, and the peak
// bytes of the device, measured by counting every buffer the run
// allocates. Config.Order "degree" renumbers each block's nodes by
// descending in-degree, which keeps the most gathered rows in the GPU's
// cache.
//
// GCN, GraphSAGE and GAT run on the distributed engine below (with one
// device it does no communication and is bit-identical to the nn models);
// Config.Engine "tape" runs the nn layers on an autograd tape instead, the
// reference the tests compare the engine with.
//
// # Decentralized layout (Layout)
//
// For P devices the nodes are partitioned (package partition's multilevel
// partitioner by default) and renumbered so device d owns the contiguous
// IDs [Offsets[d], Offsets[d+1]). Device d holds its rows of the
// normalized in-adjacency, split by source block into P sub-blocks A_ds
// whose columns are local to block s, and a replica of the model. Per
// layer every device computes its payload block H_d (the input projected
// by the layer's weight when that is narrower, as nn orders the product,
// else the input itself), then
//
//	out_d = sum over s of A_ds * H_s
//
// where H_d is its own fresh block and H_s for s != d the block device s
// broadcast, or the cached copy when s skipped the broadcast. The blocks
// live in one N-row matrix per layer (the historical embeddings), so the
// sum is one SpMM of device d's rows over all N columns (Layout.Rows),
// each row summed in the single-device order. The broadcasts of one layer
// are one all-gather-v when every block is sent, else one broadcast per
// sending owner.
//
// With Config.Exchange "halo" each device receives only the rows of the
// other blocks it reads (Layout.Used), gathered by their owners and sent
// in one all-to-all-v per layer, and in training the last layer only the
// rows its training nodes read: the loss reads no other output row, so
// the last layer's gradient is zero elsewhere and its gradient messages
// shrink alike. Every row a device reads has the value the block exchange
// gives it, so the run is the same bit for bit, with fewer bytes
// (halo.go; GCN and GraphSAGE).
//
// # Backward
//
// The gradient of a payload block H_s is sum over d of A_ds^T G_d, where
// G_d is device d's gradient of its aggregation output. Each device
// computes its contributions and sends each to the block's owner: a
// reduce to every owner at once, as one all-to-all-v per layer. Only the
// rows of block s that d reads (Layout.Used) can be non-zero, so the
// contribution is computed through the transpose of A_ds restricted to
// those rows (SubBlock.Transpose, built once on the host) and sent
// packed, and the owner scatter-adds them (own contribution first, then the
// others in rank order, so sums are deterministic). Parameter gradients
// are then all-reduced (in rank order over host communicators) and every replica takes the
// same Adam step. Without staleness the run therefore equals
// single-device training up to float rounding (the tests check losses to
// 1e-5 and identical accuracies for P = 1, 2, 4, and GAT's for P = 1 to
// 4; dropout masks are drawn from each element's global position,
// Config.Masks "global").
//
// # Tasks
//
// Options.Task (task.go) replaces the node-classification loss: the
// final layer's output blocks are all-gathered, each rank's replica of
// the task computes its share of the loss and its gradient with respect
// to every row, the gradients are summed over the ranks and each rank
// takes its rows into the layers' backward pass. Package link/multi's
// task is link prediction (each rank scores the pairs whose source it
// owns).
//
// # GAT
//
// A GAT layer's payload is Z = X W, heads x hidden wide (always
// projected). The attention logit of edge j -> i is
// LeakyReLU(<Z_i, a_r> + <Z_j, a_l>) per head, and its softmax runs over
// i's incoming edges, so all of it but Z_j is local to i's owner: the
// source term <Z_j, a_l> is computed by the receivers from the Z rows
// they hold (N x heads dot products), not broadcast with Z, which saves
// heads floats per row in both directions (the gradient contributions
// have the payload's width, el's gradient folded into Z's) and combines a
// cached block with the current a_l. The historical-embedding cache,
// skip-broadcast and both bounds apply to Z as to the other payloads. In
// the backward pass each device computes the gradient of every Z row it
// read (an N-row matrix: the aggregation's transpose, then the source
// term's) and sends each owner the rows it read, gathered (Layout.Used),
// reduced as above; the attention vectors' gradients are partial sums,
// all-reduced with the other parameters. Hidden layers concatenate their
// heads and apply ELU, the last layer averages its heads, and dropout on
// features and attention coefficients draws the one-device masks (an
// edge's position in the self-loop adjacency's CSR order, which the
// devices' rows keep).
//
// # Staleness (Sancus)
//
// With Config.Staleness each device caches the blocks it received
// (historical embeddings). Before broadcasting, the owner of a block
// checks two bounds against the copy everyone holds: the epoch bound (the
// copy would be at most EpochBound epochs old when used) and the
// variation bound (||B - V||_F <= eps ||V||_F). The drift is measured on
// the dropout-free version of the block: two dropout draws of the same
// embedding differ by about 100%, and an older draw is not an
// approximation error but another draw; what ages is the model that
// produced it. With Adaptive the bound is Epsilon scaled by the training
// loss relative to the first epoch's (clamped below by AdaptiveFloor), so
// the tolerated error shrinks as training converges. Each owner decides
// for its own block and all devices learn the decisions, with the drifts,
// from one all-gather of two int32 per device and layer, so they agree on
// who sends and everyone tracks every block's age.
//
// The drift of a hidden layer's block still carries the earlier layers'
// dropout (the clean block removes only this layer's masks), so with
// dropout it has a noise floor: on the products shape (3-layer SAGE,
// dropout 0.5) a frozen model's hidden blocks "drift" by 0.88 and 1.0 per
// epoch, above the default bound, and only the first layer was ever
// skipped. Staleness.Drift DriftParams bounds what ages instead, the
// relative change of the parameters of layers 0..l since the block was
// sent, the same on every device; it seldom exceeds the default bound,
// so the epoch bound decides, which saves three quarters of the
// broadcasts but costs accuracy on products-hard (docs/fullgraph.md).
// Without dropout (Sancus's models have none) the embedding drift is the
// model's change, large while it trains fast and small after: a bound
// of 0.1 with an epoch bound of 2 then skips most hidden broadcasts at
// the exact run's accuracy (docs/fullgraph.md). A
// first-layer payload that is the
// dense input features (unprojected) is constant: its blocks are sent
// once, dropout-free, into every device's copy, and the receivers draw
// the owners' dropout masks themselves each epoch (any device can draw
// another's mask, global or local), so skipping it is exact and needs no
// epoch bound; Sancus caches the input features the same way.
//
// Sancus applies skip-broadcast to the forward embedding broadcasts; its
// bounded gradient error follows from bounded embedding staleness (the
// gradients are computed with the stale embeddings), and the available
// description of it does not skip gradient communication. Here gradients
// are therefore reduced exactly by default. Staleness.Gradients extends
// the same machinery to the gradient contributions sent to owners (sender
// keeps the last sent contribution, owner the last received; the P x P
// flag matrix is all-gathered) as an option.
//
// # Metrics
//
// CommStats counts broadcasts sent and skipped, bytes sent and avoided,
// gradient messages and bytes, flag and all-reduce bytes, and per layer
// and block the ages and drifts (mean, maximum, largest skipped drift);
// Report.EpochComm has every epoch's share. The progress line shows the
// share of broadcast bytes skipped.
//
// # Devices
//
// The engine uses the backend.Backend interface (plus the optional fused
// methods above), so it runs on CPU virtual devices (one goroutine per
// rank over comm/inproc, sharing one CPU back end) and on GPUs (one CUDA
// back end per device). With Options.DeviceComms (OpenDeviceComms: NCCL
// in this process, or the GPU shared-memory collectives) the blocks,
// gradient contributions and the weight-gradient all-reduce move between
// device buffers; without, they are staged through host memory over the
// host communicators, which carry the small control messages (staleness
// flags, losses, evaluation counts) in both cases. With Masks "global" and P > 1 the
// dropout masks of blocks other than the first are drawn on the host;
// Masks "local" draws them on each device instead (equal in distribution,
// but the run then depends on P).
//
// # Processes and machines
//
// With Options.World (comm/world) the devices of every process of a job
// are the ranks: each process runs Run with its own devices (workers for
// its ranks only), the host communicators are a World.HostGroup spanning
// the job (TCP across machines, shared memory on one, float sums in rank
// order) and device communicators NCCL across processes, so the run
// (skip-broadcast included) equals one process's with every device.
// Device 0 logs, checkpoints and reports (Report.World).
//
// # Determinism
//
// The same configuration and device count give bit-identical runs:
// initial weights and dropout masks come from the seed, the partitioner
// is seeded, every sum across devices is taken in a fixed order, and the
// staleness decisions depend only on these values. (NCCL's sums are
// deterministic for a fixed machine and device count, but not in rank
// order.)
package fullgraph
