// Package segment is the shared-memory segment machinery common to the
// host (comm/shm) and GPU (comm/gpushm) shared-memory back ends: the
// segment's header and per-rank control block, its layout (header,
// control, one futex flag per cache line, data slots, per-rank heaps),
// creating, attaching and mapping it, waiting until every rank has
// attached (naming those that never did), publishing and reading an
// abort, and the futex wait/wake and liveness helpers the ranks use to
// sleep on the flags.
//
// What differs between the back ends (magic, version, bounds, the number
// of flags, the size of a control block, where the abort reason starts,
// the prefix of error messages) is described by a Spec; the meaning of
// each flag and the control fields past CEntered belong to the back end.
// Linux only.
package segment
