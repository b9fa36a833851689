package importer

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"

	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/internal/regfile"
	"github.com/strata-gnn/strata/internal/sysmem"
)

// parquetTable reads the selected columns of a Parquet file one row group
// and one page at a time (values go straight into the import's arrays).
// Columns are top-level fields: a primitive column (int32, int64, float,
// double, boolean, string/binary; nullable or not) or a list of numbers
// (LIST of float/double/int), e.g. a feature vector.
type parquetTable struct {
	path   string
	f      *os.File
	size   int64
	footer int64 // footer length
	pf     *parquet.File
	cols   []colInfo
	leaves []*parquet.Column // per column: its leaf (nil if unreadable)
	repDef []int             // list columns: definition level of the repeated node
	bar    *progress.Bar
	opts   Options
}

// countingReaderAt feeds a progress bar with the bytes read.
type countingReaderAt struct {
	r   io.ReaderAt
	bar *progress.Bar
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.bar.Add(int64(n))
	return n, err
}

// guard runs fn and turns a panic inside the Parquet library into an
// error: the checks before it bound what the library allocates, and this
// keeps any input it still chokes on from crashing the import.
func guard(path string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fileErr(path, "malformed Parquet data (the reader failed: %s)", quote([]byte(fmt.Sprint(r))))
		}
	}()
	return fn()
}

func openParquet(path string, opts Options) (*parquetTable, error) {
	f, fi, err := regfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("importer: %w", err)
	}
	t := &parquetTable{path: path, f: f, size: fi.Size(), opts: opts}
	if t.footer, err = preflightParquet(path, f, t.size); err != nil {
		f.Close()
		return nil, err
	}
	var r io.ReaderAt = f
	if !opts.Quiet && t.size >= progressMin {
		t.bar = progress.New(t.size, "reading "+shortName(path))
		r = &countingReaderAt{r: f, bar: t.bar}
	}
	err = guard(path, func() error {
		pf, err := parquet.OpenFile(r, t.size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true), parquet.ReadBufferSize(64<<10))
		if err != nil {
			return fileErr(path, "not a readable Parquet file: %s", quote([]byte(err.Error())))
		}
		t.pf = pf
		return nil
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := t.describe(); err != nil {
		f.Close()
		return nil, err
	}
	return t, nil
}

// describe lists the top-level columns and how each can be read.
func (t *parquetTable) describe() error {
	return guard(t.path, func() error {
		seen := map[string]bool{}
		for _, c := range t.pf.Root().Columns() {
			info := colInfo{name: c.Name()}
			if seen[info.name] {
				return fileErr(t.path, "column name %s appears twice", quote([]byte(info.name)))
			}
			seen[info.name] = true
			leaf, repDef := c, 0
			if !c.Leaf() {
				// A list: exactly one leaf below, repeated once.
				var leaves []*parquet.Column
				var walk func(x *parquet.Column)
				walk = func(x *parquet.Column) {
					if x.Leaf() {
						leaves = append(leaves, x)
						return
					}
					if x.Repeated() {
						repDef = x.MaxDefinitionLevel()
					}
					for _, ch := range x.Columns() {
						walk(ch)
					}
				}
				walk(c)
				leaf = nil
				if len(leaves) == 1 && leaves[0].MaxRepetitionLevel() == 1 {
					leaf = leaves[0]
					if leaf.Repeated() { // two-level list: the leaf itself repeats
						repDef = leaf.MaxDefinitionLevel()
					}
					info.list = true
				} else {
					info.bad = "nested column (only primitive columns and lists of numbers are read)"
				}
			} else if c.MaxRepetitionLevel() > 0 {
				info.list = true // a repeated primitive: a two-level list
				repDef = c.MaxDefinitionLevel()
			}
			if leaf != nil {
				switch leaf.Type().Kind() {
				case parquet.Boolean, parquet.Int32, parquet.Int64, parquet.Float, parquet.Double:
				case parquet.ByteArray:
					if info.list {
						info.bad = "list of strings (lists must hold numbers)"
					}
				default:
					info.bad = fmt.Sprintf("column type %s is not supported (use integers, floats, booleans or strings)", leaf.Type())
				}
			}
			t.cols = append(t.cols, info)
			t.leaves = append(t.leaves, leaf)
			t.repDef = append(t.repDef, repDef)
		}
		return nil
	})
}

func (t *parquetTable) columns() []colInfo { return t.cols }

func (t *parquetTable) Close() error {
	t.bar.Finish()
	return t.f.Close()
}

// precheck validates every column chunk of the selected columns (see
// checkChunk) and that the values they declare fit in memory, before any
// page is decoded.
func (t *parquetTable) precheck(cols []int) error {
	md := t.pf.Metadata()
	dataEnd := t.size - 8 - t.footer
	var declared int64
	codecs := map[int]int32{}
	for rg := range md.RowGroups {
		g := &md.RowGroups[rg]
		if g.NumRows < 0 {
			return fileErr(t.path, "row group %d declares %d rows", rg, g.NumRows)
		}
		for _, ci := range cols {
			leaf := t.leaves[ci].Index()
			if leaf < 0 || leaf >= len(g.Columns) {
				return fileErr(t.path, "row group %d has %d column chunks, the schema needs column %d", rg, len(g.Columns), leaf)
			}
			cc := &g.Columns[leaf]
			name := t.cols[ci].name
			if cc.FilePath != "" {
				return &UnsupportedError{Path: t.path, Column: name, Msg: "column chunks in other files are not supported"}
			}
			m := &cc.MetaData
			codec := int32(m.Codec)
			if !codecSupported(codec) {
				return &UnsupportedError{Path: t.path, Column: name, Msg: fmt.Sprintf("compression codec %s is not supported (use snappy, gzip, zstd, brotli, lz4_raw or none)", m.Codec)}
			}
			if c, ok := codecs[ci]; ok && c != codec {
				return &UnsupportedError{Path: t.path, Column: name, Msg: "the compression codec changes between row groups"}
			}
			codecs[ci] = codec
			base := m.DataPageOffset
			if m.DictionaryPageOffset != 0 {
				base = m.DictionaryPageOffset
			}
			if m.NumValues < 0 || m.TotalCompressedSize < 0 || base < 4 || base > dataEnd || m.TotalCompressedSize > dataEnd-base {
				return fileErr(t.path, "row group %d, column %s: chunk at byte %d of %d bytes with %d values does not fit the file (%d bytes)",
					rg, quote([]byte(name)), base, m.TotalCompressedSize, m.NumValues, t.size)
			}
			if m.NumValues < g.NumRows {
				return fileErr(t.path, "row group %d, column %s: %d values for %d rows", rg, quote([]byte(name)), m.NumValues, g.NumRows)
			}
			pc, err := checkChunk(t.path, t.f, base, m.TotalCompressedSize, codec, m.NumValues)
			if err != nil {
				return err
			}
			if pc.values != m.NumValues {
				return fileErr(t.path, "row group %d, column %s: pages hold %d values, the chunk declares %d", rg, quote([]byte(name)), pc.values, m.NumValues)
			}
			declared += m.NumValues
		}
	}
	// Each value read costs about 8 bytes where it is kept (IDs, features).
	limit, source := t.opts.MaxBytes, "Options.MaxBytes"
	if limit == 0 {
		if b, ok := sysmem.Available(); ok {
			limit, source = b.Bytes, b.Source
		}
	}
	if limit > 0 && declared > limit/8 {
		return fileErr(t.path, "the columns read declare %d values, about %s in memory, more than the %s available (%s)",
			declared, sysmem.Format(min(declared, 1<<59)*8), sysmem.Format(limit), source)
	}
	if t.opts.limitNodes > 0 && declared > 64*t.opts.limitNodes {
		return fileErr(t.path, "%d values exceed the limit", declared)
	}
	return nil
}

func (t *parquetTable) scan(cols []int, grow func(n int64) error, visit func(row int64, k int, c *cell) error) error {
	if err := t.precheck(cols); err != nil {
		return err
	}
	base := int64(0)
	buf := make([]parquet.Value, 4096)
	var list []float32
	var c cell
	for rg, g := range t.pf.RowGroups() {
		n := g.NumRows()
		if err := grow(n); err != nil {
			return err
		}
		for k, ci := range cols {
			leaf := t.leaves[ci]
			info := t.cols[ci]
			kind := leaf.Type().Kind()
			maxDef := leaf.MaxDefinitionLevel()
			row := int64(-1) // the row being read
			pending := false // a list row is being collected
			where := func(err error, r int64) error {
				var p cellProblem
				if errors.As(err, &p) {
					return &TableError{Path: t.path, Row: base + r + 1, Column: info.name, Msg: string(p)}
				}
				return err
			}
			flush := func() error {
				if !pending {
					return nil
				}
				pending = false
				if row >= n {
					return &TableError{Path: t.path, Row: base + row + 1, Column: info.name, Msg: fmt.Sprintf("more rows than the %d row group %d declares", n, rg)}
				}
				c = cell{kind: cList, list: list}
				if err := visit(base+row, k, &c); err != nil {
					return where(err, row)
				}
				return nil
			}
			err := guard(t.path, func() error {
				pages := g.ColumnChunks()[leaf.Index()].Pages()
				defer pages.Close()
				for {
					p, err := pages.ReadPage()
					if err == io.EOF {
						return nil
					}
					if err != nil {
						return fileErr(t.path, "row group %d, column %s: %s", rg, quote([]byte(info.name)), quote([]byte(err.Error())))
					}
					vr := p.Values()
					for {
						m, rerr := vr.ReadValues(buf)
						for _, v := range buf[:m] {
							if !info.list {
								row++
								if row >= n {
									parquet.Release(p)
									return &TableError{Path: t.path, Row: base + row + 1, Column: info.name, Msg: fmt.Sprintf("more rows than the %d row group %d declares", n, rg)}
								}
								c = valueCell(v, kind)
								if err := visit(base+row, k, &c); err != nil {
									parquet.Release(p)
									return where(err, row)
								}
								continue
							}
							if v.RepetitionLevel() == 0 {
								if err := flush(); err != nil {
									parquet.Release(p)
									return err
								}
								row++
								pending = true
								list = list[:0]
							}
							def := v.DefinitionLevel()
							switch {
							case def < t.repDef[ci]: // a null or empty list
							case def < maxDef:
								parquet.Release(p)
								return &TableError{Path: t.path, Row: base + row + 1, Column: info.name, Msg: "null element in a list"}
							default:
								x := valueCell(v, kind)
								f, err := cellFloat32(&x, "list element")
								if err != nil {
									parquet.Release(p)
									return where(err, row)
								}
								list = append(list, f)
							}
						}
						if rerr == io.EOF {
							break
						}
						if rerr != nil {
							parquet.Release(p)
							return fileErr(t.path, "row group %d, column %s: %s", rg, quote([]byte(info.name)), quote([]byte(rerr.Error())))
						}
					}
					parquet.Release(p)
				}
			})
			if err != nil {
				return err
			}
			if err := flush(); err != nil {
				return err
			}
			if row+1 != n {
				return &TableError{Path: t.path, Column: info.name, Msg: fmt.Sprintf("row group %d holds %d rows of this column, it declares %d", rg, row+1, n)}
			}
		}
		base += n
	}
	return nil
}

// valueCell converts a Parquet value of a primitive column.
func valueCell(v parquet.Value, kind parquet.Kind) cell {
	if v.IsNull() {
		return cell{kind: cNull}
	}
	switch kind {
	case parquet.Boolean:
		if v.Boolean() {
			return cell{kind: cBool, i: 1}
		}
		return cell{kind: cBool}
	case parquet.Int32:
		return cell{kind: cInt, i: int64(v.Int32())}
	case parquet.Int64:
		return cell{kind: cInt, i: v.Int64()}
	case parquet.Float:
		return cell{kind: cFloat, f: float64(v.Float())}
	case parquet.Double:
		return cell{kind: cFloat, f: v.Double()}
	case parquet.ByteArray:
		return cell{kind: cText, b: v.ByteArray()}
	}
	return cell{kind: cNull}
}
