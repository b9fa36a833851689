// Package graph holds graph topology in compressed sparse row (CSR) form and
// the structural operations built on it: transposition (CSR <-> CSC),
// symmetrization, self-loop insertion and removal, degrees and edge weights.
//
// Node IDs are int32 (graphs up to 2^31-1 nodes); edge offsets are int64 so a
// graph may hold more than 2^31 edges.
package graph
