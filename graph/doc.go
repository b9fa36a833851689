// Package graph holds graph topology in compressed sparse row (CSR) form and
// the structural operations built on it: transposition (CSR <-> CSC),
// symmetrization, self-loop insertion and removal, degrees and edge weights.
//
// Node IDs are int32 (graphs up to 2^31-1 nodes); edge offsets are int64 so a
// graph may hold more than 2^31 edges.
//
// # Operations
//
//   - FromEdges builds a CSR from (src, dst) lists: rows sorted, optional
//     weights (WithWeights) and duplicate merging (WithDedup + Reduce).
//   - Transpose / Reverse turn an out-adjacency into the in-adjacency (and
//     back); TransposePerm also returns where each edge went.
//   - Symmetrize takes the union of both directions, each pair once.
//   - AddSelfLoops / RemoveSelfLoops, InDegrees / OutDegrees, SortRows,
//     RowsSorted, Clone.
//   - (*CSR).Validate checks every invariant and names the first bad entry.
//
// Every operation validates its input first and returns an *Error wrapping
// ErrShape, ErrIndptr, ErrIndex or ErrWeights instead of panicking, carries
// edge weights along, and never modifies its input (SortRows, which sorts
// in place, excepted).
//
// # Scale and determinism
//
// The operations are meant for graphs of 10^8 edges and more: they are
// O(E + N) parallel counting sorts and prefix sums over contiguous chunks
// (no comparison sort over all edges). Their output never depends on
// GOMAXPROCS: counting sorts are stable (items land by key, then original
// position), filters write at prefix-sum offsets, and duplicate weights are
// reduced in input order.
package graph
