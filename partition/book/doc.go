// Package book is the partition book of a renumbered graph: part p owns
// the contiguous global node IDs [Offsets[p], Offsets[p+1]), so finding
// the owner of a node is a range check (a binary search over K+1
// offsets), and a node's local index inside its part is its global ID
// minus the part's first ID.
package book
