// Package csp is DSP's collective sampling primitive: every device owns
// the rows of one patch of the graph (package layout) and the devices
// sample together, one layer at a time, in three synchronous stages over
// all-to-all:
//
//  1. shuffle: each device sends every frontier node to the device that
//     owns its row (a range check in the partition book), after telling
//     every peer how many it will send;
//  2. sample: each device samples all frontier nodes it received, from
//     every requester, in one pass over its own rows (memory accesses,
//     no remote reads: a task travels instead of the ~1000-entry rows);
//  3. reshuffle: the sampled neighbors go back to the requester, which
//     puts them in its frontier's order and relabels them into a Block.
//
// Every device calls the same method the same number of times with its
// own seeds and key (a device with no seeds still takes part). A Sampler
// is not safe for concurrent use: its collectives must not interleave.
//
// # Samplers
//
//   - NodeSampler: node-wise (GraphSAGE) sampling, uniform or weighted,
//     with or without replacement. The owner of node v samples v's row with
//     sample.NeighborSampler.SampleHop under the requester's key; since a
//     node's draws are keyed by (seed, epoch, batch, hop, v) and nothing
//     else, and the requester puts the answers back in its frontier's
//     order, the MiniBatch is byte-identical to the one
//     sample.NeighborSampler returns on the whole graph, for any number of
//     devices and any placement of the topology.
//   - LayerSampler: layer-wise sampling: Fanouts[hop] is the number of
//     edges drawn for the whole layer; frontier node v receives each draw
//     with probability p_v = w_v / sum(w) (w_v is v's degree, or its total
//     edge weight when weighted), then draws that many in-neighbors. With
//     replacement the layer's edges are i.i.d. draws; without replacement
//     (unweighted only) they are distinct edges, uniform among all edges of
//     the frontier. An extra exchange brings w_v from the owners to the
//     requester, which decides the allocation, so the result depends only
//     on (graph, seeds, key), never on the number of devices.
//   - Walker: random walks, node-wise with fanout 1 per step: a walker
//     travels to the owner of its current node (shuffle), takes one step
//     there and stays (no reshuffle); walkers at a node without neighbors
//     stop and are not shuffled again. At the end the visited nodes go back
//     to the walk's origin. Walks are byte-identical to sample.RandomWalk.
//
// # Failures
//
// The first exchange of every hop carries a status word: a device whose
// input is invalid still takes part in it, and every device then returns
// an error (the invalid one its own *Error, the others one wrapping
// ErrPeer naming it), so bad input on one device never leaves the others
// waiting. Collective failures come back as the comm package's errors.
package csp
