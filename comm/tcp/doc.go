// Package tcp is the communication back end for ranks on several hosts
// (it also works on one). Every pair of ranks holds two TCP connections:
// a data connection that carries the collectives' frames and a control
// connection, served by its own goroutine, that carries status queries,
// aborts and goodbyes, so a rank can always say which sequence number it
// is at, even while its data path is blocked.
//
// Algorithms: ring all-reduce (reduce-scatter then all-gather, data cut
// into segments so sending, receiving and reducing overlap), ring
// reduce-scatter and all-gather (and its variable form), pipelined chain
// broadcast, pairwise all-to-all (and its variable form), dissemination
// barrier. Every frame carries the operation, phase, sequence number,
// frame index and length; the receiver checks them against what it
// expects and reads the payload straight into the caller's buffer, so
// nothing is allocated from a length read off the wire, and a peer that
// issued a different operation is reported instead of corrupting data.
//
// Connections are authenticated by a shared secret (HMAC challenge in both
// directions) or mutual TLS; one of them is required unless every rank's
// address is on loopback. The shared secret authenticates but does not
// encrypt; use TLS on untrusted networks.
//
// Failures: a peer whose connection drops is named at once; on a timeout
// the rank asks every peer (over the control connections) which operation
// it has entered and names those behind; the failing rank then aborts the
// others, whose pending operation fails with the same missing ranks.
package tcp
