package importer

import (
	"fmt"

	"github.com/strata-gnn/strata/dataset"
)

// ParseError reports malformed input. Text inputs set Line (1-based) and,
// where a field is at fault, Col (its 1-based byte column); binary inputs
// set Off (byte offset in the file, after decompression for .gz files);
// the unused ones are 0 / -1. Msg shows input only as a short escaped
// excerpt. It wraps dataset.ErrCorruption.
type ParseError struct {
	Path string
	Line int64 // 1-based line number, 0 if not a text position
	Col  int64 // 1-based byte column in the line, 0 if not known
	Off  int64 // byte offset, -1 if unknown or not applicable
	Msg  string
}

func (e *ParseError) Error() string {
	switch {
	case e.Line > 0 && e.Col > 0:
		return fmt.Sprintf("importer: %s:%d:%d: %s", e.Path, e.Line, e.Col, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("importer: %s:%d: %s", e.Path, e.Line, e.Msg)
	case e.Off >= 0:
		return fmt.Sprintf("importer: %s: at byte %d: %s", e.Path, e.Off, e.Msg)
	}
	return fmt.Sprintf("importer: %s: %s", e.Path, e.Msg)
}

// Unwrap makes errors.Is(err, dataset.ErrCorruption) hold.
func (e *ParseError) Unwrap() error { return dataset.ErrCorruption }

func lineErr(path string, line int64, format string, args ...any) *ParseError {
	return &ParseError{Path: path, Line: line, Off: -1, Msg: fmt.Sprintf(format, args...)}
}

// colErr reports a problem with the field starting at byte column col
// (1-based) of a line.
func colErr(path string, line, col int64, format string, args ...any) *ParseError {
	return &ParseError{Path: path, Line: line, Col: col, Off: -1, Msg: fmt.Sprintf(format, args...)}
}

func offErr(path string, off int64, format string, args ...any) *ParseError {
	return &ParseError{Path: path, Off: off, Msg: fmt.Sprintf(format, args...)}
}

func fileErr(path string, format string, args ...any) *ParseError {
	return &ParseError{Path: path, Off: -1, Msg: fmt.Sprintf(format, args...)}
}
