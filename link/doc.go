// Package link trains link predictors ('strata train --task link'): a
// node encoder (GCN, GraphSAGE or GAT, package nn, fed by train.Inputs as
// node classification feeds it) and a decoder that scores node pairs (the
// inner product of their embeddings, or an MLP on their elementwise
// product), trained with binary cross-entropy on positive edges and
// sampled negative pairs, and evaluated by AUC, MRR and Hits@K on
// held-out edges.
//
// # Protocol
//
// NewSplit splits the graph's links at random (PyG's RandomLinkSplit,
// GAE's protocol): an undirected graph's link is one pair and holding it
// out removes both directions from the message-passing graph, which every
// training step and evaluation aggregates over. The validation and test
// negatives are drawn once from the seed (uniform non-edges, as many as
// the positives), so every epoch is scored on the same pairs. Metrics
// documents AUC (ties count one half), MRR (OGB's tie rule, each positive
// ranked among all the split's negatives) and Hits@K (OGB's: above the
// K-th highest negative). The headline epoch has the best validation AUC.
//
// # Steps
//
// An epoch visits the training links in a seeded order, in batches of
// Config.BatchSize positives. Each positive gets NegRatio negative pairs
// (Negatives: uniform or degree^0.75 endpoints, optionally excluding
// known edges; a typed run's pair a source-type node with a
// destination-type node, drawn by the same samplers). In sampled mode the step's seeds are the distinct
// endpoints of all its pairs (Batch, as PyG's LinkNeighborLoader): their
// neighborhoods are sampled as node seeds' are, the batch's positive
// links are removed from those neighborhoods (ExcludeTargets, DGL's
// exclude="reverse_id"), and the encoder embeds the seeds. In full mode
// the encoder embeds every node over the whole message-passing graph.
// The decoder scores the pairs and BCEWithLogits (package autograd) is
// the loss. Run prepares a step's host work (negatives, Batch, sampling,
// ExcludeTargets) one step ahead on another goroutine, so that it
// overlaps the step before on the device; being keyed by (epoch,
// batch), it changes no number.
//
// # Several devices
//
// Only the seeds of a Batch depend on where the step runs: the DSP
// engine's collective sampler takes them as it takes node seeds, and the
// rest of the step is unchanged. Package link/multi plugs link
// prediction into the DSP engine and the full-graph trainer as their
// task, with this package's split (EpochEdges, Negatives, NewBatch,
// ExcludeTargets), loss (PairLoss), decoder and Evaluator.
//
// # Stored splits
//
// Options.EdgeSplit (a dataset's edge_split/, package dataset/split)
// replaces the random split: FromEdgeSplit. A typed run (RunHetero)
// always splits through package split (split.RelationEdges with its seed,
// or the stored split of the relation, split.ReadRelationEdges), so a
// stored split of seed s and a run with seed s train identically.
//
// # Determinism
//
// Every random choice is keyed by the seed and a position (the split,
// the evaluation negatives, the epoch's order of the links and their
// orientation, each step's negatives, the sampled neighborhoods and
// dropout masks, the decoder's weights; the encoder's weights are
// train's, those of a node classifier with the seed), and the back ends
// are deterministic for any number of goroutines, so a run repeats bit
// for bit.
package link
