package graph

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package wraps one of them
// (test with errors.Is) inside an *Error that says where the problem is.
var (
	// ErrShape: sizes disagree (NumRows vs len(Indptr), src vs dst, a
	// non-square graph where a square one is needed, counts out of range).
	ErrShape = errors.New("inconsistent shape")
	// ErrIndptr: Indptr does not start at 0, decreases, or does not end at
	// len(Indices).
	ErrIndptr = errors.New("bad indptr")
	// ErrIndex: a node ID outside [0, NumCols) (or [0, numNodes)).
	ErrIndex = errors.New("node index out of range")
	// ErrWeights: weights of the wrong length.
	ErrWeights = errors.New("bad weights")
)

// Error describes an invalid graph or argument: which operation, which
// array, and where in it. Pos is -1 when no single position is at fault.
type Error struct {
	Op     string // operation, e.g. "Validate", "FromEdges"
	Field  string // array or argument at fault, e.g. "Indices", "src"
	Pos    int64  // index into Field, or -1
	Detail string // human-readable specifics
	Err    error  // one of the sentinels above
}

func (e *Error) Error() string {
	where := e.Field
	if e.Pos >= 0 {
		where = fmt.Sprintf("%s[%d]", e.Field, e.Pos)
	}
	return fmt.Sprintf("graph: %s: %s: %s: %v", e.Op, where, e.Detail, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(op, field string, pos int64, kind error, format string, args ...any) *Error {
	return &Error{Op: op, Field: field, Pos: pos, Detail: fmt.Sprintf(format, args...), Err: kind}
}
