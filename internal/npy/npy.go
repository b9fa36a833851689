package npy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/strata-gnn/strata/internal/atomicfile"
)

// Magic starts every .npy file.
const Magic = "\x93NUMPY"

// MaxHeader bounds a header's dictionary (NumPy writes about 100 bytes).
const MaxHeader = 1 << 16

// header returns the version 1.0 header of a C-order array of descr and
// shape, padded to a multiple of 64 bytes as NumPy pads it.
func header(descr string, shape []int) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, tuple)
	total := len(Magic) + 2 + 2 + len(dict) + 1
	pad := (64 - total%64) % 64
	var b bytes.Buffer
	b.WriteString(Magic)
	b.Write([]byte{1, 0})
	binary.Write(&b, binary.LittleEndian, uint16(len(dict)+pad+1))
	b.WriteString(dict)
	b.WriteString(strings.Repeat(" ", pad))
	b.WriteByte('\n')
	return b.Bytes()
}

// WriteFloat32 writes the rows x cols row-major matrix data to path as a
// float32 .npy file, replacing it atomically.
func WriteFloat32(path string, rows, cols int, data []float32) error {
	if rows < 0 || cols < 0 || int64(rows)*int64(cols) != int64(len(data)) {
		return fmt.Errorf("npy: %d values for a %d x %d matrix", len(data), rows, cols)
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		if _, err := w.Write(header("<f4", []int{rows, cols})); err != nil {
			return err
		}
		return writeWords(w, data, math.Float32bits)
	}, atomicfile.Options{})
}

// WriteFloat32Vector writes data to path as a float32 .npy file of shape
// (n,), replacing it atomically.
func WriteFloat32Vector(path string, data []float32) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		if _, err := w.Write(header("<f4", []int{len(data)})); err != nil {
			return err
		}
		return writeWords(w, data, math.Float32bits)
	}, atomicfile.Options{})
}

// WriteInt32 writes the vector data to path as an int32 .npy file of
// shape (n,), replacing it atomically.
func WriteInt32(path string, data []int32) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		if _, err := w.Write(header("<i4", []int{len(data)})); err != nil {
			return err
		}
		return writeWords(w, data, func(v int32) uint32 { return uint32(v) })
	}, atomicfile.Options{})
}

// writeWords writes data as little-endian 4-byte words (word(v) of each
// value v, which must be v's bits). On a little-endian host those are
// data's bytes as they lie in memory, written as they are (113 GB of
// embeddings take minutes to encode value by value on one core);
// elsewhere they are encoded a block at a time.
func writeWords[T float32 | int32](w io.Writer, data []T, word func(T) uint32) error {
	if littleEndian {
		return writeRaw(w, data, rawBlock)
	}
	return writeEncoded(w, data, word, encodeBlock)
}

// Values a write: rawBlock 64 MiB, encodeBlock the encoding buffer's.
const rawBlock, encodeBlock = 1 << 24, 1 << 18

// writeRaw writes data's bytes as they lie in memory, block values a
// write.
func writeRaw[T float32 | int32](w io.Writer, data []T, block int) error {
	for off := 0; off < len(data); off += block {
		part := data[off:min(off+block, len(data))]
		if _, err := w.Write(unsafe.Slice((*byte)(unsafe.Pointer(&part[0])), 4*len(part))); err != nil {
			return err
		}
	}
	return nil
}

// writeEncoded writes word(v) of each value little-endian, block values
// a write.
func writeEncoded[T float32 | int32](w io.Writer, data []T, word func(T) uint32, block int) error {
	buf := make([]byte, 4*min(len(data), block))
	for off := 0; off < len(data); off += block {
		part := data[off:min(off+block, len(data))]
		b := buf[:4*len(part)]
		for i, v := range part {
			binary.LittleEndian.PutUint32(b[4*i:], word(v))
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// littleEndian says whether this host stores words little-endian, as
// .npy's "<f4" and "<i4" are.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// Error reports a malformed .npy file: what is wrong, at which byte.
type Error struct {
	Off int64
	Msg string
}

func (e *Error) Error() string { return fmt.Sprintf("npy: at byte %d: %s", e.Off, e.Msg) }

// Header is a parsed .npy header.
type Header struct {
	Descr        string
	FortranOrder bool
	Shape        []int64
	DataOffset   int64 // where the data starts
}

// ParseHeader parses the header at the start of b.
func ParseHeader(b []byte) (*Header, error) {
	if len(b) < 10 || string(b[:6]) != Magic {
		return nil, &Error{0, "not a .npy file (no \\x93NUMPY magic)"}
	}
	var n, start int64
	switch b[6] {
	case 1:
		n, start = int64(binary.LittleEndian.Uint16(b[8:10])), 10
	case 2, 3:
		if len(b) < 12 {
			return nil, &Error{8, "header length cut short"}
		}
		n, start = int64(binary.LittleEndian.Uint32(b[8:12])), 12
	default:
		return nil, &Error{6, fmt.Sprintf("format version %d.%d, want 1.0, 2.0 or 3.0", b[6], b[7])}
	}
	if n > MaxHeader {
		return nil, &Error{8, fmt.Sprintf("header of %d bytes, more than %d", n, MaxHeader)}
	}
	if int64(len(b)) < start+n {
		return nil, &Error{int64(len(b)), fmt.Sprintf("header of %d bytes cut short", n)}
	}
	h := &Header{DataOffset: start + n}
	if err := h.parseDict(string(b[start:start+n]), start); err != nil {
		return nil, err
	}
	return h, nil
}

// parseDict reads {'descr': '<i8', 'fortran_order': False, 'shape': (3,), }.
func (h *Header) parseDict(s string, off int64) error {
	p := &lit{s: s, off: off}
	if !p.eat('{') {
		return p.fail("want '{'")
	}
	seen := map[string]bool{}
	for {
		if p.eat('}') {
			break
		}
		key, ok := p.str()
		if !ok {
			return p.fail("want a quoted key")
		}
		if seen[key] {
			return p.fail(fmt.Sprintf("key %q twice", key))
		}
		seen[key] = true
		if !p.eat(':') {
			return p.fail("want ':'")
		}
		switch key {
		case "descr":
			if h.Descr, ok = p.str(); !ok {
				return p.fail("descr: want a quoted string")
			}
		case "fortran_order":
			switch {
			case p.word("False"):
			case p.word("True"):
				h.FortranOrder = true
			default:
				return p.fail("fortran_order: want True or False")
			}
		case "shape":
			if h.Shape, ok = p.tuple(); !ok {
				return p.fail("shape: want a tuple of non-negative integers")
			}
		default:
			return p.fail(fmt.Sprintf("unknown key %q", key))
		}
		if !p.eat(',') {
			if p.eat('}') {
				break
			}
			return p.fail("want ',' or '}'")
		}
	}
	if !seen["descr"] || !seen["fortran_order"] || !seen["shape"] {
		return &Error{off, "header lacks descr, fortran_order or shape"}
	}
	return nil
}

// lit is a cursor over a Python literal.
type lit struct {
	s   string
	i   int
	off int64
}

func (p *lit) fail(msg string) error { return &Error{p.off + int64(p.i), msg} }

func (p *lit) ws() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

func (p *lit) eat(c byte) bool {
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *lit) word(w string) bool {
	p.ws()
	if strings.HasPrefix(p.s[p.i:], w) {
		p.i += len(w)
		return true
	}
	return false
}

func (p *lit) str() (string, bool) {
	p.ws()
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", false
	}
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 || end > 64 {
		return "", false
	}
	v := p.s[p.i+1 : p.i+1+end]
	p.i += end + 2
	return v, true
}

func (p *lit) tuple() ([]int64, bool) {
	if !p.eat('(') {
		return nil, false
	}
	var out []int64
	for {
		if p.eat(')') {
			return out, true
		}
		p.ws()
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		if j == p.i || j-p.i > 18 || len(out) >= 32 {
			return nil, false
		}
		v, err := strconv.ParseInt(p.s[p.i:j], 10, 64)
		if err != nil {
			return nil, false
		}
		out = append(out, v)
		p.i = j
		if !p.eat(',') {
			if p.eat(')') {
				return out, true
			}
			return nil, false
		}
	}
}

// ParseInts returns the integer vector in b, a whole .npy file of int32
// or int64 values (little-endian) of shape (n,) or (n, 1).
func ParseInts(b []byte) ([]int64, error) { return parseInts(b, 1) }

// ParseIntMatrix returns the n x cols integer matrix in b (row-major), a
// whole .npy file of int32 or int64 values (little-endian, C order) of
// shape (n, cols); cols 1 takes a vector (n,) too.
func ParseIntMatrix(b []byte, cols int) ([]int64, error) { return parseInts(b, cols) }

func parseInts(b []byte, cols int) ([]int64, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return nil, err
	}
	size := int64(0)
	switch h.Descr {
	case "<i4", "|i4":
		size = 4
	case "<i8", "|i8":
		size = 8
	default:
		return nil, &Error{h.DataOffset, fmt.Sprintf("dtype %q, want int32 or int64 ('<i4' or '<i8')", h.Descr)}
	}
	var n int64
	switch {
	case cols == 1 && len(h.Shape) == 1:
		n = h.Shape[0]
	case cols == 1 && len(h.Shape) == 2 && h.Shape[1] == 1:
		n = h.Shape[0]
	case cols == 1:
		return nil, &Error{h.DataOffset, fmt.Sprintf("shape %v, want a vector (n,) or (n, 1)", h.Shape)}
	case len(h.Shape) != 2 || h.Shape[1] != int64(cols) || h.Shape[0] < 0 || h.Shape[0] > math.MaxInt64/int64(cols):
		return nil, &Error{h.DataOffset, fmt.Sprintf("shape %v, want a matrix (n, %d)", h.Shape, cols)}
	case h.FortranOrder:
		return nil, &Error{h.DataOffset, "Fortran order: want C order (np.ascontiguousarray)"}
	default:
		n = h.Shape[0] * int64(cols)
	}
	data := int64(len(b)) - h.DataOffset
	if n < 0 || n > data/size || n*size != data {
		return nil, &Error{h.DataOffset, fmt.Sprintf("shape %v of %d-byte values needs %d bytes, the file has %d after the header", h.Shape, size, n*size, data)}
	}
	out := make([]int64, n)
	raw := b[h.DataOffset:]
	for i := range out {
		if size == 4 {
			out[i] = int64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
		} else {
			out[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
		}
	}
	return out, nil
}
