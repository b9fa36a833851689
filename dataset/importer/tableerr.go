package importer

import (
	"fmt"
	"strings"

	"github.com/strata-gnn/strata/dataset"
)

// TableError reports a bad cell, row or column of a CSV or Parquet table,
// naming the file, the row and the column. Msg shows input only as a
// short escaped excerpt. It wraps dataset.ErrCorruption.
type TableError struct {
	Path   string
	Row    int64  // 1-based data row (the header is not a row); 0: not about one row
	Line   int64  // CSV: the row's 1-based line in the file; 0 otherwise
	Column string // column name; "" when the row or table as a whole is at fault
	Msg    string
}

func (e *TableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "importer: %s", e.Path)
	if e.Row > 0 {
		fmt.Fprintf(&b, ": row %d", e.Row)
		if e.Line > 0 {
			fmt.Fprintf(&b, " (line %d)", e.Line)
		}
	}
	if e.Column != "" {
		fmt.Fprintf(&b, ", column %s", quote([]byte(e.Column)))
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap makes errors.Is(err, dataset.ErrCorruption) hold.
func (e *TableError) Unwrap() error { return dataset.ErrCorruption }

// UnsupportedError says the input asks for something this build cannot
// represent yet (typed graphs, a Parquet feature), as opposed to malformed
// input.
type UnsupportedError struct {
	Path   string
	Column string // "" when not about a column
	Msg    string
}

func (e *UnsupportedError) Error() string {
	if e.Column != "" {
		return fmt.Sprintf("importer: %s, column %s: %s", e.Path, quote([]byte(e.Column)), e.Msg)
	}
	return fmt.Sprintf("importer: %s: %s", e.Path, e.Msg)
}

// cellProblem is an error a table sink returns about the cell it was
// given; the scanner adds the file, row and column.
type cellProblem string

func (p cellProblem) Error() string { return string(p) }

func problem(format string, args ...any) error { return cellProblem(fmt.Sprintf(format, args...)) }
