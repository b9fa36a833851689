package csp

import (
	"errors"
	"fmt"
)

var (
	// ErrInput: invalid arguments on this rank (seeds, configuration).
	ErrInput = errors.New("invalid input")
	// ErrPeer: another rank reported a failure in the same step.
	ErrPeer = errors.New("a peer rank failed")
	// ErrProtocol: a peer sent something inconsistent (another hop or
	// fanout, a count beyond its bound, counts that do not add up).
	ErrProtocol = errors.New("protocol violation")
	// ErrTooLarge: a hop would exceed the 2^31-1 entries that device
	// buffers and block indices allow.
	ErrTooLarge = errors.New("too large")
)

// Error says which rank, operation and hop failed.
type Error struct {
	Rank int    // the reporting rank (-1 before one is known)
	Op   string // "csp.New", "csp.Sample"
	Hop  int    // -1 when not in a hop
	Msg  string
	Err  error // ErrInput, ErrPeer, ErrProtocol, ErrTooLarge, a comm or a device error
}

func (e *Error) Error() string {
	where := e.Op
	if e.Hop >= 0 {
		where = fmt.Sprintf("%s hop %d", e.Op, e.Hop)
	}
	if e.Msg == "" {
		return fmt.Sprintf("csp: rank %d: %s: %v", e.Rank, where, e.Err)
	}
	return fmt.Sprintf("csp: rank %d: %s: %s: %v", e.Rank, where, e.Msg, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }
