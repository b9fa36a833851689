package dataset

import (
	"errors"
	"fmt"
)

// ErrCorruption is wrapped by every error that reports malformed,
// inconsistent or damaged dataset content (on disk or in memory), so callers
// can test errors.Is(err, ErrCorruption).
var ErrCorruption = errors.New("dataset: corrupt or invalid data")

// ErrUnsupportedVersion is wrapped (together with ErrCorruption) when a
// manifest declares a format version this build does not read.
var ErrUnsupportedVersion = errors.New("dataset: unsupported format version")

// FormatError reports a problem at a byte offset of a file. For in-memory
// validation Path names the array (e.g. "indices") and Off is the byte offset
// the bad element would have in that array's file. Off < 0 means the problem
// concerns the file as a whole.
type FormatError struct {
	Path string
	Off  int64
	Msg  string
	Err  error // optional cause (e.g. ErrUnsupportedVersion); may be nil
}

func (e *FormatError) Error() string {
	if e.Off >= 0 {
		return fmt.Sprintf("dataset: %s: at byte %d: %s", e.Path, e.Off, e.Msg)
	}
	return fmt.Sprintf("dataset: %s: %s", e.Path, e.Msg)
}

// Unwrap lets errors.Is match ErrCorruption and the optional cause.
func (e *FormatError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrCorruption, e.Err}
	}
	return []error{ErrCorruption}
}

func formatErr(path string, off int64, format string, args ...any) *FormatError {
	return &FormatError{Path: path, Off: off, Msg: fmt.Sprintf(format, args...)}
}
