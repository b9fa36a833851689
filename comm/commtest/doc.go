// Package commtest is the conformance and fault suite every communication
// back end passes, in the manner of gonum's testblas: a back end's test
// calls Conformance and Faults with a function that creates a group of n
// communicators, and the same cases run on every back end.
//
// Conformance runs each operation (all-reduce with sum, mean and max,
// broadcast, all-gather and its variable form, all-to-all and its variable
// form, reduce-scatter, barrier) for each dtype (float32, int32, int64) on
// groups of 1 to 4 ranks, with lengths that include 0 and odd sizes,
// against a reference computed from every rank's inputs, and checks that
// all ranks receive bit-identical results. Faults checks that a stalled,
// closed or mismatched rank makes every other rank return an *OpError
// naming the operation, its sequence number and the missing ranks within
// the deadline.
//
// For multi-process tests, RunProgram runs a seeded sequence of checked
// cases on one rank, and Main/Start re-execute the test binary in a child
// role so no separate build is needed.
package commtest
