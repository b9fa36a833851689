package sample

import (
	"errors"
	"fmt"
)

// Sentinel errors; every error from this package wraps one of them inside
// an *Error that says which argument and which position.
var (
	// ErrConfig: a bad fanout list, batch size, walk length, worker count.
	ErrConfig = errors.New("invalid configuration")
	// ErrGraph: the graph is invalid or unsuitable (not square, bad or
	// missing weights, unsorted rows where sorted ones are needed).
	ErrGraph = errors.New("unsuitable graph")
	// ErrNode: a node ID outside [0, NumNodes).
	ErrNode = errors.New("node out of range")
	// ErrDuplicate: a node repeated where IDs must be unique (seeds).
	ErrDuplicate = errors.New("duplicate node")
	// ErrTooLarge: a batch would exceed the int32 local index space.
	ErrTooLarge = errors.New("batch too large")
)

// Error locates a bad input. Pos is -1 when no single position is at fault.
type Error struct {
	Op     string // e.g. "NeighborSampler.Sample"
	Field  string // e.g. "seeds", "Fanouts"
	Pos    int
	Detail string
	Err    error // the sentinel
	Cause  error // the underlying error (e.g. a *graph.Error), or nil
}

func (e *Error) Error() string {
	where := e.Field
	if e.Pos >= 0 {
		where = fmt.Sprintf("%s[%d]", e.Field, e.Pos)
	}
	return fmt.Sprintf("sample: %s: %s: %s: %v", e.Op, where, e.Detail, e.Err)
}

// Unwrap lets errors.Is match both the sentinel and the cause.
func (e *Error) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// graphError wraps an invalid-graph error from the graph package.
func graphError(op string, err error) *Error {
	return &Error{Op: op, Field: "graph", Pos: -1, Detail: err.Error(), Err: ErrGraph, Cause: err}
}

func errorf(op, field string, pos int, kind error, format string, args ...any) *Error {
	return &Error{Op: op, Field: field, Pos: pos, Detail: fmt.Sprintf(format, args...), Err: kind}
}
