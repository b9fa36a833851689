// Package gpucsp is DSP's collective sampling (CSP) on GPUs: every device
// holds the in-adjacency rows of its range of node IDs (a layout.Patch)
// in device memory, and the devices draw node-wise mini-batches together,
// one hop at a time, without any host copy of frontiers or neighbors:
//
//  1. shuffle: the frontier (device, deduplicated, global IDs) is grouped
//     by owner (a range check on the partition offsets and a stable
//     device counting sort); a header all-to-all tells every owner how
//     many nodes come, with the requester's hop key, hop, fanout and a
//     status word; the node IDs follow in one all-to-all-v;
//  2. sample: each owner counts, then draws, all received nodes of all
//     requesters in one fused pass over its patch with package
//     gpusample's kernels (gs_count, and gs_sample's per-node body under
//     each requester's hop key), so the picks equal the single-GPU
//     sampler's; a small all-to-all of per-requester totals sizes the
//     answers;
//  3. reshuffle: per-node counts and sampled neighbors go back in one
//     int32 all-to-all-v (global edge IDs in a second, int64 one when
//     Config.EdgeIDs is set); the requester scatters them into frontier
//     order and deduplicates/relabels with gpusample's kernels (gs_insert,
//     gs_flags, gs_relabel). The block's sources are the next frontier.
//
// Sample therefore returns exactly the gpusample.Batch that
// gpusample.Sampler.SampleDevice returns over the whole graph with the
// same seeds and key (seeds, every block's SrcNodes, indptr and indices;
// EdgeIDs too with Config.EdgeIDs), for any number of devices and any
// contiguous partition.
//
// Per hop a rank runs four collectives (five with EdgeIDs) and makes four
// small reads to the host: the headers, its per-requester totals, the
// totals it received, and the size of the deduplicated frontier. A
// single rank (nil communicator) skips the protocol and samples its patch,
// which is then the whole graph, with gpusample.SampleDevice.
//
// # Failures
//
// Sample is a collective: every rank calls it the same number of times
// in the same order. Invalid seeds, and failures of a rank between two
// status exchanges (the previous hop's relabeling, an answer too large
// or an allocation that fails), are reported in the next status word
// (the header, or the totals exchange), so every rank fails at the same
// step: the failing one with its own error, the others with ErrPeer
// naming it. A protocol violation or a device failure in the middle of
// an exchange returns at once on the rank that sees it; its peers' next
// collective then fails at the context's deadline. Every error is an
// *Error naming the rank and hop.
package gpucsp
