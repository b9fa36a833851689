// Package partition splits a graph's nodes into K parts for multi-device
// (DSP-style) training: few edges between parts, balanced parts.
//
// # Algorithm
//
// Partition (Method Multilevel, the default) is a multilevel k-way
// partitioner in the manner of METIS (Karypis and Kumar, 1998):
//
//   - Coarsening: repeated matching and contraction until about
//     max(n/(20 log2 K), 30K) nodes remain. The input level uses random
//     matching (its edges all weigh 1), later levels heavy-edge matching;
//     vertices are visited in a random order biased towards low degrees.
//     When more than 10% of the vertices stay unmatched (power-law graphs,
//     where leaves hang off a few hubs) 2-hop matching pairs vertices that
//     share a neighbor or have identical neighborhoods. Contraction runs in
//     parallel.
//   - Initial partition: recursive bisection of the coarsest graph; each
//     bisection is itself multilevel (coarsen to ~20 nodes, greedy graph
//     growing from random seeds, FM refinement on the way back up), run
//     several times keeping the best.
//   - Uncoarsening: the partition is projected level by level and refined
//     by greedy boundary k-way moves (best gain first, from a priority
//     queue) under the balance limits, with balancing passes when a part
//     is overweight.
//
// Balance can involve several constraints at once (Weights): node count,
// edge count (degree) and training nodes (NodeWeights builds these); every
// part must stay within Imbalance (default 1.03) times the average for
// each constraint.
//
// Method METIS calls libmetis through purego (package metis), when the
// library is installed.
//
// # Determinism
//
// All randomness comes from counter-based streams (internal/rng) keyed by
// the seed, the level and the step. Matching and refinement are sequential;
// the parallel steps (contraction, projection, gain computation, the cut)
// give every output element one deterministic computation and sum only
// integers, so a seed gives the same partition for any GOMAXPROCS.
//
// # Renumbering and output
//
// Renumber relabels nodes so part p owns the contiguous IDs
// [offsets[p], offsets[p+1]) (package book: the owner of an ID is a range
// check), and PermuteDataset applies that to a dataset. Run is the whole
// 'strata partition' command: it reads a dataset directory, partitions,
// renumbers and writes the renumbered dataset plus a versioned,
// checksummed partition file (WriteFile, ReadFile) atomically, then prints
// the edge cut, the balance of each constraint and the times. The file
// records the fingerprints (dataset.Dataset.Fingerprint) of the dataset it
// partitions and of the renumbered copy; Saved.CheckDataset and Load refuse
// a partition applied to any other dataset, even one of the same size.
package partition
