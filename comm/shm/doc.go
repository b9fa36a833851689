// Package shm is the communication back end for processes on one host:
// the ranks map one shared segment (a memfd handed to child processes, or
// a named file in /dev/shm found through the rendezvous store and unlinked
// once every rank has mapped it) and signal each other with atomic
// counters in it, sleeping on them with futex wait/wake.
//
// The segment holds, per rank, K input slots, plus K result slots (K = 2
// per rank by default). Data streams through the slots as a sequence of
// chunks numbered identically on every rank; chunk q uses slot q mod K,
// and a slot is reused only after every rank has finished with the chunk
// that used it before, so consecutive operations pipeline without
// barriers.
//
// All-reduce is reduce + broadcast through host memory, as in MegEngine's
// shared-memory all-reduce: the data is cut into about 2 chunks per rank
// (at most one slot each); chunk i is owned by rank i mod n. The other
// ranks copy it into their input slots; the owner's persistent reducer
// goroutine adds the inputs in rank order 0..n-1 (reading its own part
// straight from the caller's buffer) into the result slot and into its
// own buffer; the others copy the result out. Copy-in, reduction and
// copy-out of different chunks overlap, on different ranks and, through
// the reducer goroutine, within one rank. Broadcast, all-gather,
// all-to-all and reduce-scatter use the same slots.
//
// The flag that publishes a slot's data carries, in the rest of its cache
// line, the operation's number, kind, dtype and element count; readers
// check it, so ranks that pass different counts (or issue different
// operations) fail with an ErrMismatch naming both instead of reducing
// garbage. A rank whose wait is slow also checks the operation the rank
// it waits for has entered (for the case where the two take different
// paths and never meet on a slot). An empty operation streams one empty
// chunk, so that it is checked too.
//
// A rank waiting on a counter checks its deadline, the segment's abort
// word and whether the rank it waits for has closed its communicator or
// exited (its pid is gone), so no wait outlives the deadline. Linux only.
package shm
