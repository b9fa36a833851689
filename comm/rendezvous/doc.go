// Package rendezvous brings the ranks of a job together before they open
// a communicator, the way torchrun's environment and TCPStore do.
//
// FromEnv reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (and
// LOCAL_RANK, LOCAL_WORLD_SIZE when set). Join makes rank 0 serve a small
// key-value store at MASTER_ADDR:MASTER_PORT and connects every rank to it;
// it returns once all ranks have arrived, or fails at its deadline naming
// the ranks that never did. The store exchanges what back ends need
// (listening addresses, shared-segment names, job ids): Set, a Get that
// waits for the key, Add, and Barrier, whose timeout error names the
// missing ranks.
//
// Unless MASTER_ADDR is a loopback address the store requires mutual TLS
// (or a shared secret with the trusted-network opt-out: see comm/auth). Every request and value is bounded before anything is
// allocated. Its accept loop survives temporary errors (EMFILE, retried
// with a backoff), holds at most auth.MaxPending connections that have
// not said hello (closing any beyond at once; a rank's dialer retries)
// and drops a silent one after auth.HandshakeTimeout.
package rendezvous
