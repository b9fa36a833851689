package importer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// csvTable reads a delimited text table with a header row (RFC 4180
// quoting within a line; plain or .gz) one row at a time, so memory does
// not grow with the file. A field that is empty (after trimming spaces)
// is a missing value.
type csvTable struct {
	path    string
	in      *input
	lr      *lineReader
	delim   byte
	cols    []colInfo
	fields  [][]byte
	scratch []byte
}

// maxCSVColumns bounds the header (and so every row's field count).
const maxCSVColumns = 1 << 20

func openCSV(path string, delim byte, quiet bool) (*csvTable, error) {
	if delim == '"' || delim == '\n' || delim == '\r' || delim == 0 {
		return nil, fmt.Errorf("importer: %s: delimiter %q cannot separate CSV fields", path, delim)
	}
	in, err := openInput(path, quiet)
	if err != nil {
		return nil, err
	}
	t := &csvTable{path: path, in: in, lr: newLineReader(in), delim: delim}
	for {
		b, err := t.lr.next()
		if err == io.EOF {
			in.Close()
			return nil, &TableError{Path: path, Msg: "empty file: want a header row naming the columns"}
		}
		if err != nil {
			in.Close()
			return nil, err
		}
		if t.lr.line == 1 {
			b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		fields, col, msg := t.split(b)
		if msg != "" {
			in.Close()
			return nil, colErr(path, t.lr.line, int64(col), "header: %s", msg)
		}
		seen := map[string]int{}
		for i, f := range fields {
			name := string(f)
			if name == "" {
				in.Close()
				return nil, lineErr(path, t.lr.line, "header: column %d has no name", i+1)
			}
			if j, ok := seen[name]; ok {
				in.Close()
				return nil, lineErr(path, t.lr.line, "header: column %d repeats the name %s of column %d", i+1, quote(f), j+1)
			}
			seen[name] = i
			t.cols = append(t.cols, colInfo{name: name})
		}
		return t, nil
	}
}

func (t *csvTable) columns() []colInfo { return t.cols }

func (t *csvTable) Close() error { return t.in.Close() }

func (t *csvTable) scan(cols []int, grow func(n int64) error, visit func(row int64, k int, c *cell) error) error {
	row := int64(0)
	var c cell
	for {
		b, err := t.lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		fields, col, msg := t.split(b)
		if msg != "" {
			return &TableError{Path: t.path, Row: row + 1, Line: t.lr.line, Msg: fmt.Sprintf("at byte column %d: %s", col, msg)}
		}
		if len(fields) != len(t.cols) {
			return &TableError{Path: t.path, Row: row + 1, Line: t.lr.line, Msg: fmt.Sprintf("%d fields, the header has %d", len(fields), len(t.cols))}
		}
		if err := grow(1); err != nil {
			return err
		}
		for k, ci := range cols {
			f := fields[ci]
			c = cell{kind: cText, b: f}
			if len(f) == 0 {
				c.kind = cNull
			}
			if err := visit(row, k, &c); err != nil {
				var p cellProblem
				if errors.As(err, &p) {
					return &TableError{Path: t.path, Row: row + 1, Line: t.lr.line, Column: t.cols[ci].name, Msg: string(p)}
				}
				return err
			}
		}
		row++
	}
}

// split cuts a line into fields: unquoted fields are trimmed of spaces
// (and tabs, unless the delimiter is a tab); a field that starts with '"'
// runs to the next lone '"' ("" is a literal quote) and may only be
// followed by spaces before the delimiter. It returns a message and the
// 1-based byte column of a malformed field. The fields alias the line or
// t.scratch and are valid until the next call.
func (t *csvTable) split(line []byte) (fields [][]byte, col int, msg string) {
	fields = t.fields[:0]
	if cap(t.scratch) < len(line) {
		t.scratch = make([]byte, 0, len(line))
	}
	scratch := t.scratch[:0] // never grows past len(line): no reallocation
	trim := func(c byte) bool { return c == ' ' || (c == '\t' && t.delim != '\t') }
	i := 0
	for {
		if len(fields) >= maxCSVColumns {
			return nil, i + 1, fmt.Sprintf("more than %d fields", maxCSVColumns)
		}
		for i < len(line) && trim(line[i]) && line[i] != t.delim {
			i++
		}
		if i < len(line) && line[i] == '"' {
			start := i + 1
			i++
			from := len(scratch)
			for {
				j := bytes.IndexByte(line[i:], '"')
				if j < 0 {
					return nil, start, "quoted field not closed on this line (fields spanning lines are not supported)"
				}
				scratch = append(scratch, line[i:i+j]...)
				i += j + 1
				if i < len(line) && line[i] == '"' {
					scratch = append(scratch, '"')
					i++
					continue
				}
				break
			}
			fields = append(fields, scratch[from:len(scratch):len(scratch)])
			for i < len(line) && trim(line[i]) && line[i] != t.delim {
				i++
			}
			if i < len(line) && line[i] != t.delim {
				return nil, i + 1, fmt.Sprintf("text after a closing quote: %s", quote(line[i:min(len(line), i+16)]))
			}
		} else {
			j := bytes.IndexByte(line[i:], t.delim)
			end := len(line)
			if j >= 0 {
				end = i + j
			}
			f := line[i:end]
			for len(f) > 0 && trim(f[len(f)-1]) {
				f = f[:len(f)-1]
			}
			fields = append(fields, f)
			i = end
		}
		if i >= len(line) {
			break
		}
		i++ // the delimiter
	}
	t.fields = fields
	return fields, 0, ""
}
