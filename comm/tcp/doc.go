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
// barrier. Every frame carries the operation, phase, dtype, sequence
// number, element count (comm.Call.Count), frame index and length; the
// receiver checks them against what it
// expects and reads the payload straight into the caller's buffer, so
// nothing is allocated from a length read off the wire, and a peer that
// issued a different operation or passed a different count is reported
// instead of corrupting data.
//
// Connections are authenticated by mutual TLS, or by a shared secret
// (HMAC challenge in both directions). Unless every rank's address is on
// loopback, TLS is required, or the secret with the explicit
// trusted-network opt-out (see comm/auth): the secret authenticates at
// connect but neither encrypts nor protects what follows. The listener
// retries temporary accept errors and caps the connections still in their
// handshake (auth.Accept, auth.Limiter).
//
// Failures: a peer whose connection drops is named at once; on a timeout
// the rank asks every peer (over the control connections) which operation
// it has entered and names those behind; the failing rank then aborts the
// others, whose pending operation fails with the same missing ranks.
package tcp
