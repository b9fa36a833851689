// Package commtest is the one conformance and fault suite every
// communication back end passes, in the manner of gonum's testblas: the
// same cases run on the host transports (inproc, shm, tcp, on CPU
// back-end buffers) and the device ones (staged, gpushm, nccl, on buffers
// of their compute back end).
//
// The suites are written per rank (RankConformance, RankFaults, on an
// Env), so that one process per GPU can run them; Conformance,
// ConformanceAlloc and Faults run them on goroutine ranks of one test,
// and RunJob and Launch in several processes (Main and Command re-execute
// the test binary in a child role, so no separate build is needed).
//
// The conformance suite runs each operation (all-reduce with sum, mean
// and max, broadcast, all-gather and its variable form, all-to-all and its
// variable form, reduce-scatter, barrier) for each dtype (float32, int32,
// int64), with lengths that include 0 and odd sizes, against a reference
// computed from every rank's inputs (exact where the back end's Caps say
// float sums run in rank order, else within a rounding bound), and checks
// that all ranks receive bit-identical results, that no rank leaves a
// barrier early and that operations are numbered in the history. The
// fault suite checks that a stalled, closed or mismatched rank makes
// every other rank return an *OpError naming the operation, its sequence
// number and the missing ranks within the deadline, and that invalid
// arguments are *ArgErrors that consume no sequence number.
package commtest
