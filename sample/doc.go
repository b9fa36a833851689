// Package sample draws mini-batches for sampled GNN training: node-wise
// neighbor sampling with per-hop fanouts, producing per-layer bipartite
// blocks (message-flow graphs) with local relabeling, seeds first.
//
// A batch depends only on (seed, epoch, batch index) and the graph, never on
// how many goroutines sample it.
//
// # Samplers and their siblings
//
// Training loops see one interface, Sampler: seeds and a Key in, a
// MiniBatch out. Every way of building message-flow graphs implements it:
//
//   - NeighborSampler: node-wise sampling (GraphSAGE) over an in-adjacency
//     CSR, uniform or weighted, with or without replacement, fanout -1 for
//     all neighbors; NewFullNeighborSampler takes all neighbors at every hop.
//   - NewBlockSampler(h HopSampler): any per-hop sampler becomes a Sampler.
//     A distributed sampler (DSP's shuffle / sample / reshuffle) only has to
//     implement SampleHop: route each destination to the machine that owns
//     its row, call NeighborSampler.SampleHop there, and gather the answers.
//     Because the stream of a destination is keyed by its global node ID
//     (not its position or the machine), such a sampler returns exactly
//     the batch a single-machine NeighborSampler would.
//   - HeteroSampler: typed graphs (one CSR per relation, grouped by
//     destination), a fanout per relation and hop, producing
//     HeteroMiniBatch (per node type source lists, per relation CSRs). It
//     is a sibling, not a Sampler: its seeds carry a node type. Its
//     algorithm (SampleTyped) is written once against TypedMachine (draw
//     one relation, relabel one node type); HeteroSampler is the CPU
//     machine, gpusample.HeteroSampler the CUDA one (same batches), and
//     dsp/csp's TypedSampler a collective one over several devices (its
//     Draw is an exchange, so it asks for draws of empty frontiers too:
//     EmptyDrawer, and draws all of a hop's relations in one call, so
//     that they share its exchanges: HopDrawer).
//   - Layer-wise samplers (FastGCN, LADIES, LABOR) draw a set per layer
//     instead of per node; they implement Sampler directly and reuse ToBlock
//     for relabeling, so the Block layout is the same.
//
// Other tasks get sibling interfaces with the same contract (inputs + Key
// -> output, deterministic): Walker for random walks (RandomWalker,
// RandomWalk) and NegativeSampler for link prediction
// (UniformNegativeSampler; WeightedNegativeSampler, e.g. degree-biased). SeedBatches turns a training set into the
// epoch's shuffled batches.
//
// # Layout of a MiniBatch
//
// With fanouts [15, 10, 5] the seeds' hop draws up to 15 in-neighbors per
// seed and becomes Blocks[2] (the last block); its source nodes are the
// destinations of Blocks[1] (10 per node), whose sources are the
// destinations of Blocks[0] (5 per node). In every block
// SrcNodes[:NumDst] are the destinations in order, then the other sampled
// nodes in first-seen order (edge order), each once. Blocks[0].SrcNodes
// are the nodes whose input features the model reads.
//
// # Randomness
//
// All draws come from internal/rng, a counter-based generator: destination
// v at hop h of batch (seed, epoch, batch) uses the stream
// rng.Derive(seed, tag, epoch, batch, h) -> rng.Derive(that, v). Work is
// split across goroutines freely and results are written at offsets fixed
// by prefix sums, then relabeled in one deterministic pass, so the output
// is byte-identical for any Workers or GOMAXPROCS.
//
// Errors are *Error values wrapping a sentinel (ErrConfig, ErrGraph,
// ErrNode, ErrDuplicate, ErrTooLarge); bad input never panics.
package sample
