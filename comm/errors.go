package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrTimeout: the operation's deadline passed. errors.Is(err,
	// context.DeadlineExceeded) is also true.
	ErrTimeout error = timeoutError{}
	// ErrPeerLost: a peer exited, closed its communicator or its connection
	// broke.
	ErrPeerLost = errors.New("peer lost")
	// ErrAborted: another rank failed and aborted the operation.
	ErrAborted = errors.New("aborted by a peer")
	// ErrBroken: an earlier operation failed; the communicator is unusable.
	ErrBroken = errors.New("communicator broken by an earlier failure")
	// ErrClosed: the communicator was closed by this rank.
	ErrClosed = errors.New("communicator closed")
	// ErrMismatch: ranks issued different operations (Debug mode, or a
	// transport that noticed).
	ErrMismatch = errors.New("ranks issued different operations")
	// ErrProtocol: a peer sent something malformed or unexpected.
	ErrProtocol = errors.New("protocol error")
)

type timeoutError struct{}

func (timeoutError) Error() string { return "deadline exceeded" }

// Is makes errors.Is(ErrTimeout, context.DeadlineExceeded) true.
func (timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// OpError reports a failed collective: which operation, its sequence
// number, and the ranks that did not take part (did not enter it, or are
// gone). The communicator is broken afterwards, except for an ErrMismatch
// found by the Debug check (nothing was exchanged, so it stays usable).
type OpError struct {
	Kind    string // back end
	Rank    int    // the rank reporting
	Op      Op
	Seq     uint64
	Missing []int // ranks that did not take part, ascending; may be empty
	Elapsed time.Duration
	Err     error
}

func (e *OpError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "comm %s rank %d: %s #%d failed", e.Kind, e.Rank, e.Op, e.Seq)
	if e.Elapsed > 0 {
		fmt.Fprintf(&b, " after %v", e.Elapsed.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	if len(e.Missing) > 0 {
		fmt.Fprintf(&b, "; ranks %v did not take part", e.Missing)
	}
	return b.String()
}

func (e *OpError) Unwrap() error { return e.Err }

// MissingRanks returns e.Missing.
func (e *OpError) MissingRanks() []int { return e.Missing }

// ArgError reports invalid arguments, found before anything was sent. The
// operation did not start and consumed no sequence number.
type ArgError struct {
	Op   Op
	Rank int
	Msg  string
}

func (e *ArgError) Error() string { return fmt.Sprintf("comm rank %d: %s: %s", e.Rank, e.Op, e.Msg) }

// PeerError is returned by transports when identifiable peers caused a
// failure (exited, closed, sent garbage).
type PeerError struct {
	Ranks []int
	Err   error // ErrPeerLost, ErrProtocol, ...
	Msg   string
}

func (e *PeerError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("ranks %v: %v", e.Ranks, e.Err)
	}
	return fmt.Sprintf("%v: %s", e.Err, e.Msg)
}

func (e *PeerError) Unwrap() error { return e.Err }

// MissingRanks returns the peers at fault.
func (e *PeerError) MissingRanks() []int { return e.Ranks }

// AbortError is what a rank's pending operation fails with when another
// rank detected a failure and aborted the communicator.
type AbortError struct {
	By      int    // rank that aborted
	Seq     uint64 // its operation
	Missing []int  // ranks it found missing
	Reason  string // its error text
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("%v by rank %d at #%d: %s", ErrAborted, e.By, e.Seq, e.Reason)
}

func (e *AbortError) Unwrap() error { return ErrAborted }

// MissingRanks returns the ranks the aborting rank found missing.
func (e *AbortError) MissingRanks() []int { return e.Missing }

// MismatchError lists what each rank issued when they disagreed.
type MismatchError struct {
	Seq   uint64
	Ranks []string // per rank, e.g. "all_reduce(float32, 10, sum)"; empty when a transport found the difference
	Diff  string   // the first difference found
}

func (e *MismatchError) Error() string {
	if len(e.Ranks) == 0 {
		return fmt.Sprintf("%v: %s", ErrMismatch, e.Diff)
	}
	return fmt.Sprintf("%v: %s (issued: %s)", ErrMismatch, e.Diff, strings.Join(e.Ranks, "; "))
}

func (e *MismatchError) Unwrap() error { return ErrMismatch }

// missingOf extracts the ranks named by an error chain.
func missingOf(err error) ([]int, bool) {
	var m interface{ MissingRanks() []int }
	if errors.As(err, &m) {
		r := slices.Clone(m.MissingRanks())
		slices.Sort(r)
		return slices.Compact(r), true
	}
	return nil, false
}
