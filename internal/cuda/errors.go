package cuda

import "fmt"

// Result is a CUresult.
type Result int

// Result codes used by callers.
const (
	Success                  Result = 0
	ErrInvalidValue          Result = 1
	ErrOutOfMemory           Result = 2
	ErrNotInitialized        Result = 3
	ErrNoDevice              Result = 100
	ErrInvalidDevice         Result = 101
	ErrNotReady              Result = 600
	ErrPeerAlreadyEnabled    Result = 704
	ErrHostAlreadyRegistered Result = 712
)

// Error is a failed driver call.
type Error struct {
	Call string // e.g. "cuMemAlloc_v2"
	Code Result
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Desc string // the driver's description
}

func (e *Error) Error() string {
	if e.Desc != "" {
		return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, e.Name, int(e.Code), e.Desc)
	}
	return fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Name, int(e.Code))
}

// IsCode reports whether err is a driver *Error with the given code.
func IsCode(err error, code Result) bool {
	e, ok := err.(*Error)
	return ok && e.Code == code
}

// check turns a CUresult into an *Error (nil on success).
func check(call string, r uintptr) error {
	if r == 0 {
		return nil
	}
	code := Result(int32(r))
	e := &Error{Call: call, Code: code, Name: fmt.Sprintf("CUresult %d", int(code))}
	if d := drv; d != nil {
		e.Name, e.Desc = d.errorName(code)
	}
	return e
}
