package serve

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors; a *RequestError wraps one.
var (
	// ErrInvalid: a request field out of range or inconsistent.
	ErrInvalid = errors.New("invalid request")
	// ErrTooLarge: a request or reply over the server's limits.
	ErrTooLarge = errors.New("over the message size limit")
	// ErrVersion: the client speaks another protocol version.
	ErrVersion = errors.New("protocol version mismatch")
	// ErrUnavailable: the request needs something the dataset lacks
	// (features, labels, a split).
	ErrUnavailable = errors.New("not in the served dataset")
)

// RequestError says which field of a request is bad, and where in it.
type RequestError struct {
	Field  string // e.g. "seeds", "fanouts"
	Pos    int    // position in the field, -1 for the whole field
	Detail string
	Err    error // one of the sentinels
}

func (e *RequestError) Error() string {
	where := e.Field
	if e.Pos >= 0 {
		where = fmt.Sprintf("%s[%d]", e.Field, e.Pos)
	}
	return fmt.Sprintf("serve: %s: %s", where, e.Detail)
}

func (e *RequestError) Unwrap() error { return e.Err }

func reqErr(kind error, field string, pos int, format string, args ...any) *RequestError {
	return &RequestError{Field: field, Pos: pos, Detail: fmt.Sprintf(format, args...), Err: kind}
}

// grpcError turns err into a gRPC status with the code its sentinel
// implies; errors already carrying a status keep it.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, ErrTooLarge):
		code = codes.ResourceExhausted
	case errors.Is(err, ErrVersion):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrUnavailable):
		code = codes.FailedPrecondition
	}
	return status.Error(code, err.Error())
}
