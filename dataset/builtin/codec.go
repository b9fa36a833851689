package builtin

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"github.com/klauspost/compress/gzip"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
)

// The compact codec (see docs/dataset-format.md, "Built-in datasets"):
//
//	gzip( payload || crc32c(payload) as uint32 LE )
//	payload = "SBDS" version(1) name(uvarint len + bytes) directed(byte)
//	          N E F C (uvarint)
//	          N rows: degree, then neighbor IDs ascending as gaps (uvarint)
//	          featKind(byte): 0 none, 1 binary (per row: nnz, column gaps),
//	                          2 dense (N*F float32 LE)
//	          labels (if C > 0): N x uvarint(label+1)
//	          3 splits: count, then ascending IDs as gaps (uvarint)
//
// The first gap of a list is the value itself; later gaps are the
// difference to the previous value (>= 1 for strictly ascending lists,
// >= 0 for neighbor lists, which may repeat).
const (
	codecMagic   = "SBDS"
	codecVersion = 1

	featNone   = 0
	featBinary = 1
	featDense  = 2

	// maxDecoded bounds the decompressed payload and maxFloats the dense
	// feature matrix a payload may ask for, so no input forces a huge
	// allocation.
	maxDecoded = 64 << 20
	maxFloats  = 1 << 25
)

// DecodeError reports a malformed asset; Off is the byte offset in the
// decompressed payload (-1 when not applicable). It wraps
// dataset.ErrCorruption.
type DecodeError struct {
	Off int
	Msg string
}

func (e *DecodeError) Error() string {
	if e.Off >= 0 {
		return fmt.Sprintf("builtin: corrupt asset at payload byte %d: %s", e.Off, e.Msg)
	}
	return "builtin: corrupt asset: " + e.Msg
}

// Unwrap makes errors.Is(err, dataset.ErrCorruption) hold.
func (e *DecodeError) Unwrap() error { return dataset.ErrCorruption }

func corrupt(off int, format string, args ...any) error {
	return &DecodeError{Off: off, Msg: fmt.Sprintf(format, args...)}
}

// Encode serializes d in the compact built-in form (gzip-compressed).
// Features whose values are all 0 or 1 are stored sparsely.
func Encode(d *dataset.Dataset) ([]byte, error) {
	if err := dataset.Validate(d); err != nil {
		return nil, err
	}
	var p []byte
	uv := func(v uint64) { p = binary.AppendUvarint(p, v) }
	gaps := func(ids []int32) {
		prev := int32(0)
		for i, v := range ids {
			if i == 0 {
				uv(uint64(v))
			} else {
				uv(uint64(v - prev))
			}
			prev = v
		}
	}
	p = append(p, codecMagic...)
	p = append(p, codecVersion)
	uv(uint64(len(d.Name)))
	p = append(p, d.Name...)
	if d.Directed {
		p = append(p, 1)
	} else {
		p = append(p, 0)
	}
	g := d.Graph
	n := g.NumRows
	uv(uint64(n))
	uv(uint64(g.NumEdges()))
	uv(uint64(d.FeatDim))
	uv(uint64(d.NumClasses))
	if g.Weights != nil {
		return nil, errors.New("builtin: edge weights are not supported by the compact codec")
	}
	for v := int64(0); v < n; v++ {
		row := g.Indices[g.Indptr[v]:g.Indptr[v+1]]
		for i := 1; i < len(row); i++ {
			if row[i] < row[i-1] {
				return nil, fmt.Errorf("builtin: row %d is not sorted", v)
			}
		}
		uv(uint64(len(row)))
		gaps(row)
	}
	switch {
	case d.Features == nil:
		p = append(p, featNone)
	case isBinary(d.Features):
		p = append(p, featBinary)
		f := d.FeatDim
		var cols []int32
		for v := int64(0); v < n; v++ {
			cols = cols[:0]
			for j, x := range d.Features[v*int64(f) : (v+1)*int64(f)] {
				if x == 1 {
					cols = append(cols, int32(j))
				}
			}
			uv(uint64(len(cols)))
			gaps(cols)
		}
	default:
		p = append(p, featDense)
		for _, x := range d.Features {
			p = binary.LittleEndian.AppendUint32(p, math.Float32bits(x))
		}
	}
	for _, l := range d.Labels {
		uv(uint64(l + 1))
	}
	for _, s := range [][]int32{d.Train, d.Val, d.Test} {
		uv(uint64(len(s)))
		gaps(s)
	}
	p = binary.LittleEndian.AppendUint32(p, crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)))
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(p); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func isBinary(x []float32) bool {
	for _, v := range x {
		if v != 0 && v != 1 {
			return false
		}
	}
	return true
}

// Decode reverses Encode: it decompresses (at most 64 MiB), checks the
// trailing CRC-32C, decodes and validates the dataset.
func Decode(b []byte) (*dataset.Dataset, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, corrupt(-1, "%v", err)
	}
	p, err := io.ReadAll(io.LimitReader(zr, maxDecoded+1))
	if err != nil {
		return nil, corrupt(-1, "decompressing: %v", err)
	}
	if len(p) > maxDecoded {
		return nil, corrupt(-1, "decompresses to more than %d bytes", maxDecoded)
	}
	if len(p) < 4 {
		return nil, corrupt(-1, "too short")
	}
	body := p[:len(p)-4]
	if want, got := binary.LittleEndian.Uint32(p[len(p)-4:]), crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)); want != got {
		return nil, corrupt(-1, "checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	return decodePayload(body)
}

// decoder reads uvarints from a payload, remembering the first error.
type decoder struct {
	p   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = corrupt(d.off, format, args...)
	}
}

func (d *decoder) uv() uint64 {
	if d.err != nil {
		return 0
	}
	v, k := binary.Uvarint(d.p[d.off:])
	if k <= 0 {
		d.fail("bad or truncated varint")
		return 0
	}
	d.off += k
	return v
}

func (d *decoder) byte1() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.p) {
		d.fail("truncated")
		return 0
	}
	d.off++
	return d.p[d.off-1]
}

func (d *decoder) left() uint64 { return uint64(len(d.p) - d.off) }

// count reads a count that must fit in what is left (every element takes
// at least per bytes) and below limit.
func (d *decoder) count(what string, per, limit uint64) int64 {
	c := d.uv()
	if d.err == nil && (c > limit || c > d.left()/per) {
		d.fail("%s %d exceeds what the input can hold", what, c)
		return 0
	}
	return int64(c)
}

// limit reads a value that must not exceed max.
func (d *decoder) limit(what string, max uint64) int64 {
	v := d.uv()
	if d.err == nil && v > max {
		d.fail("%s %d out of range (max %d)", what, v, max)
		return 0
	}
	return int64(v)
}

// list reads count gap-coded IDs in [0, n), strictly ascending if strict.
func (d *decoder) list(dst []int32, n int64, strict bool) {
	prev := int64(0)
	for i := range dst {
		g := d.uv()
		if d.err != nil {
			return
		}
		if i > 0 && strict && g == 0 {
			d.fail("list not strictly ascending")
			return
		}
		v := int64(g)
		if i > 0 {
			v = prev + int64(g)
		}
		if g >= uint64(n) || v >= n {
			d.fail("ID out of range [0, %d)", n)
			return
		}
		dst[i] = int32(v)
		prev = v
	}
}

func decodePayload(p []byte) (*dataset.Dataset, error) {
	d := &decoder{p: p}
	if len(p) < len(codecMagic)+1 || string(p[:len(codecMagic)]) != codecMagic {
		return nil, corrupt(-1, "bad magic")
	}
	d.off = len(codecMagic)
	if v := d.byte1(); v != codecVersion {
		return nil, corrupt(-1, "unsupported codec version %d (this build reads %d)", v, codecVersion)
	}
	nameLen := d.count("name length", 1, 256)
	var name string
	if d.err == nil {
		name = string(p[d.off : d.off+int(nameLen)])
		d.off += int(nameLen)
	}
	directed := d.byte1()
	if d.err == nil && directed > 1 {
		d.fail("bad directed flag %d", directed)
	}
	n := d.count("node count", 1, dataset.MaxNodes)
	e := d.count("edge count", 1, math.MaxInt32)
	// F and C are ranges, not list lengths: bound them by value only (the
	// dense matrix n*F is bounded below before allocation).
	f := d.limit("feature dim", maxFloats)
	c := d.limit("class count", math.MaxInt32)
	if d.err != nil {
		return nil, d.err
	}
	// Each node needs at least one byte for its degree: n <= left bytes.
	if uint64(n) > d.left() {
		d.fail("node count %d exceeds what the input can hold", n)
		return nil, d.err
	}
	g := &graph.CSR{NumRows: n, NumCols: n, Indptr: make([]int64, n+1), Indices: make([]int32, e)}
	for v := int64(0); v < n && d.err == nil; v++ {
		deg := d.count("degree", 1, uint64(e-g.Indptr[v]))
		d.list(g.Indices[g.Indptr[v]:g.Indptr[v]+deg], n, false)
		g.Indptr[v+1] = g.Indptr[v] + deg
	}
	if d.err == nil && g.Indptr[n] != e {
		d.fail("rows hold %d edges, header says %d", g.Indptr[n], e)
	}
	out := &dataset.Dataset{Name: name, Directed: directed == 1, Graph: g}
	kind := d.byte1()
	if d.err != nil {
		return nil, d.err
	}
	if (kind == featNone) != (f == 0) {
		d.fail("feature kind %d with feature dim %d", kind, f)
		return nil, d.err
	}
	if f > 0 && n > maxFloats/f {
		d.fail("feature matrix %d x %d too large", n, f)
		return nil, d.err
	}
	switch kind {
	case featNone:
	case featBinary:
		// Decode the sparse rows first; allocate the dense matrix only
		// once they all parsed.
		rows := make([][]int32, n)
		for v := int64(0); v < n && d.err == nil; v++ {
			nnz := d.count("row nnz", 1, uint64(f))
			rows[v] = make([]int32, nnz)
			d.list(rows[v], f, true)
		}
		if d.err != nil {
			return nil, d.err
		}
		out.Features = make([]float32, n*f)
		for v, cols := range rows {
			for _, j := range cols {
				out.Features[int64(v)*f+int64(j)] = 1
			}
		}
	case featDense:
		if uint64(n*f) > d.left()/4 {
			d.fail("dense features truncated")
			return nil, d.err
		}
		out.Features = make([]float32, n*f)
		for i := range out.Features {
			out.Features[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[d.off:]))
			d.off += 4
		}
	default:
		d.fail("unknown feature kind %d", kind)
		return nil, d.err
	}
	out.FeatDim = int(f)
	if c > 0 {
		if uint64(n) > d.left() {
			d.fail("labels truncated")
			return nil, d.err
		}
		out.Labels = make([]int32, n)
		out.NumClasses = int(c)
		for v := range out.Labels {
			l := d.uv()
			if d.err == nil && l > uint64(c) {
				d.fail("label %d of node %d out of range", int64(l)-1, v)
			}
			out.Labels[v] = int32(l) - 1
		}
	}
	for _, s := range []*[]int32{&out.Train, &out.Val, &out.Test} {
		k := d.count("split size", 1, uint64(n))
		if d.err != nil {
			return nil, d.err
		}
		ids := make([]int32, k)
		d.list(ids, n, true)
		if k > 0 || c > 0 {
			*s = ids
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if d.off != len(p) {
		d.fail("%d trailing bytes", len(p)-d.off)
		return nil, d.err
	}
	if err := dataset.Validate(out); err != nil {
		return nil, corrupt(-1, "%v", err)
	}
	return out, nil
}
