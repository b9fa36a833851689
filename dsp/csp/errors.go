package csp

import (
	"errors"
	"fmt"
)

var (
	// ErrInput: invalid arguments on this device (seeds, key, config).
	ErrInput = errors.New("invalid input")
	// ErrPeer: another device reported a failure in the same step.
	ErrPeer = errors.New("a peer device failed")
	// ErrProtocol: a peer sent something inconsistent (a node this device
	// does not own, a count that does not add up, another hop).
	ErrProtocol = errors.New("protocol violation")
)

// Error says which device, operation and step failed.
type Error struct {
	Rank int    // the reporting device
	Op   string // e.g. "NodeSampler.Sample"
	Hop  int    // -1 when not in a hop
	Msg  string
	Err  error // ErrInput, ErrPeer, ErrProtocol or a comm error
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
