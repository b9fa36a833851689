package importer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// The Parquet library trusts the sizes a file states: a footer length, a
// Thrift list or string length, a page size or a compressed page's
// decompressed size would be allocated before anything checks it against
// the file. So every such size is checked here first, against the bytes
// that hold it and against the limits below, before the library sees the
// file (the footer) or a column chunk (its pages).
const (
	// maxFooter bounds the Parquet footer (file metadata).
	maxFooter = 64 << 20
	// footerElemCost is the memory charged per Thrift list element of the
	// footer (the largest metadata struct the library decodes into is
	// 560 bytes) and maxFooterMemory what the footer may cost in total.
	footerElemCost  = 1 << 10
	maxFooterMemory = 1 << 30
	// maxPage bounds a page's uncompressed size.
	maxPage = 256 << 20
	// maxPageHeader bounds one page header (statistics included).
	maxPageHeader = 16 << 20
	// maxThriftDepth bounds the nesting of Thrift structs and lists.
	maxThriftDepth = 32
)

// errShort means the Thrift walker ran out of bytes.
var errShort = errors.New("truncated")

// thriftWalker checks a Thrift compact-protocol struct: every declared
// list, map and string length fits in the remaining bytes, nesting is
// bounded, and types are known. It records the integer and boolean fields
// of the top two levels as (parent field, field) -> value.
type thriftWalker struct {
	b     []byte
	i     int
	elems int64
	rec   map[[2]int16]int64
}

func (w *thriftWalker) byte1() (byte, error) {
	if w.i >= len(w.b) {
		return 0, errShort
	}
	c := w.b[w.i]
	w.i++
	return c, nil
}

func (w *thriftWalker) uvarint() (uint64, error) {
	v, n := binary.Uvarint(w.b[w.i:])
	if n == 0 {
		return 0, errShort
	}
	if n < 0 {
		return 0, errors.New("varint overflows 64 bits")
	}
	w.i += n
	return v, nil
}

func (w *thriftWalker) zigzag() (int64, error) {
	u, err := w.uvarint()
	if err != nil {
		return 0, err
	}
	return int64(u>>1) ^ -int64(u&1), nil
}

// length reads a size that must fit in what is left (each element or
// byte takes at least one byte).
func (w *thriftWalker) length(what string) (int, error) {
	u, err := w.uvarint()
	if err != nil {
		return 0, err
	}
	if u > uint64(len(w.b)-w.i) {
		if u > 1<<31 {
			return 0, fmt.Errorf("%s length %d", what, u)
		}
		return 0, fmt.Errorf("%s length %d exceeds the %d bytes left: %w", what, u, len(w.b)-w.i, errShort)
	}
	return int(u), nil
}

func (w *thriftWalker) structure(depth int, parent int16) error {
	if depth > maxThriftDepth {
		return fmt.Errorf("nesting deeper than %d", maxThriftDepth)
	}
	var id int16
	for {
		h, err := w.byte1()
		if err != nil {
			return err
		}
		if h == 0 {
			return nil
		}
		typ := h & 0x0f
		if d := h >> 4; d != 0 {
			id += int16(d)
		} else {
			v, err := w.zigzag()
			if err != nil {
				return err
			}
			id = int16(v)
		}
		if err := w.value(typ, depth, parent, id); err != nil {
			return err
		}
	}
}

func (w *thriftWalker) value(typ byte, depth int, parent, id int16) error {
	record := func(v int64) {
		if w.rec != nil && depth <= 1 {
			w.rec[[2]int16{parent, id}] = v
		}
	}
	switch typ {
	case 1, 2: // bool true / false (in a struct field: no payload)
		if id >= 0 {
			record(int64(2 - typ))
			return nil
		}
		_, err := w.byte1() // a list element
		return err
	case 3:
		_, err := w.byte1()
		return err
	case 4, 5, 6:
		v, err := w.zigzag()
		record(v)
		return err
	case 7:
		if len(w.b)-w.i < 8 {
			return errShort
		}
		w.i += 8
		return nil
	case 8:
		n, err := w.length("string")
		if err != nil {
			return err
		}
		w.i += n
		return nil
	case 9, 10:
		h, err := w.byte1()
		if err != nil {
			return err
		}
		n := int(h >> 4)
		if n == 15 {
			if n, err = w.length("list"); err != nil {
				return err
			}
		} else if n > len(w.b)-w.i {
			return errShort
		}
		return w.elements(n, []byte{h & 0x0f}, depth)
	case 11:
		n, err := w.length("map")
		if err != nil || n == 0 {
			return err
		}
		h, err := w.byte1()
		if err != nil {
			return err
		}
		return w.elements(n, []byte{h >> 4, h & 0x0f}, depth)
	case 12:
		return w.structure(depth+1, id)
	case 13: // UUID
		if len(w.b)-w.i < 16 {
			return errShort
		}
		w.i += 16
		return nil
	}
	return fmt.Errorf("unknown Thrift type %d", typ)
}

func (w *thriftWalker) elements(n int, types []byte, depth int) error {
	if depth+1 > maxThriftDepth {
		return fmt.Errorf("nesting deeper than %d", maxThriftDepth)
	}
	w.elems += int64(n) * int64(len(types))
	if w.elems*footerElemCost > maxFooterMemory {
		return fmt.Errorf("more than %d list elements", maxFooterMemory/footerElemCost)
	}
	for range n {
		for _, t := range types {
			if err := w.value(t, depth+1, -1, -1); err != nil {
				return err
			}
		}
	}
	return nil
}

// preflightParquet checks the magic numbers and the footer of a Parquet
// file of size bytes before the library reads it.
func preflightParquet(path string, r io.ReaderAt, size int64) (footerLen int64, err error) {
	if size < 12 {
		return 0, offErr(path, 0, "%d bytes: too short for a Parquet file", size)
	}
	var head, tail [8]byte
	if _, err := r.ReadAt(head[:4], 0); err != nil {
		return 0, offErr(path, 0, "reading: %v", err)
	}
	if _, err := r.ReadAt(tail[:], size-8); err != nil {
		return 0, offErr(path, size-8, "reading: %v", err)
	}
	if string(head[:4]) != "PAR1" {
		return 0, offErr(path, 0, "not a Parquet file (no PAR1 magic)")
	}
	switch string(tail[4:]) {
	case "PAR1":
	case "PARE":
		return 0, &UnsupportedError{Path: path, Msg: "encrypted Parquet files are not supported"}
	default:
		return 0, offErr(path, size-4, "no PAR1 magic at the end of the file (truncated?)")
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n > size-12 || n > maxFooter {
		return 0, offErr(path, size-8, "footer length %d does not fit the file (%d bytes) or exceeds %d", n, size, maxFooter)
	}
	start := size - 8 - n
	footer := make([]byte, n)
	if _, err := r.ReadAt(footer, start); err != nil {
		return 0, offErr(path, start, "reading the footer: %v", err)
	}
	w := &thriftWalker{b: footer}
	if err := w.structure(0, 0); err != nil {
		return 0, offErr(path, start+int64(w.i), "malformed footer: %v", err)
	}
	return n, nil
}

// pageCheck holds what checkChunk learned about one column chunk.
type pageCheck struct {
	values int64 // sum of the data pages' value counts
}

// Parquet page types and codecs (parquet.thrift).
const (
	pageData       = 0
	pageIndex      = 1
	pageDictionary = 2
	pageDataV2     = 3

	codecNone   = 0
	codecSnappy = 1
	codecGzip   = 2
	codecBrotli = 4
	codecZstd   = 6
	codecLZ4Raw = 7
)

func codecSupported(c int32) bool {
	switch c {
	case codecNone, codecSnappy, codecGzip, codecBrotli, codecZstd, codecLZ4Raw:
		return true
	}
	return false
}

// checkChunk walks the pages of the column chunk at [base, base+size) of
// r: every header is well formed, every page fits, no page claims more
// than maxPage bytes or more values than the chunk declares (maxValues),
// and every compressed page decompresses to at most its stated size.
func checkChunk(path string, r io.ReaderAt, base, size int64, codec int32, maxValues int64) (pageCheck, error) {
	var pc pageCheck
	off := int64(0)
	var hdr []byte
	for off < size {
		left := size - off
		window := min(left, 64<<10)
		var w *thriftWalker
		for {
			if int64(cap(hdr)) < window {
				hdr = make([]byte, window)
			}
			hdr = hdr[:window]
			if _, err := r.ReadAt(hdr, base+off); err != nil {
				return pc, offErr(path, base+off, "reading a page header: %v", err)
			}
			w = &thriftWalker{b: hdr, rec: map[[2]int16]int64{}}
			err := w.structure(0, 0)
			if err == nil {
				break
			}
			if errors.Is(err, errShort) && window < min(left, maxPageHeader) {
				window = min(left, maxPageHeader, 4*window)
				continue
			}
			return pc, offErr(path, base+off+int64(w.i), "malformed page header: %v", err)
		}
		get := func(parent, id int16) (int64, bool) { v, ok := w.rec[[2]int16{parent, id}]; return v, ok }
		at := base + off
		typ, ok1 := get(0, 1)
		unc, ok2 := get(0, 2)
		comp, ok3 := get(0, 3)
		if !ok1 || !ok2 || !ok3 {
			return pc, offErr(path, at, "page header without type or sizes")
		}
		bodyOff := off + int64(w.i)
		if comp < 0 || comp > size-bodyOff {
			return pc, offErr(path, at, "page of %d bytes does not fit its column chunk (%d bytes left)", comp, size-bodyOff)
		}
		if unc < 0 || unc > maxPage {
			return pc, offErr(path, at, "page claims %d uncompressed bytes (limit %d)", unc, maxPage)
		}
		levels := int64(0) // v2: level bytes stored uncompressed before the data
		compressed := codec != codecNone
		switch typ {
		case pageData:
			n, ok := get(5, 1)
			if !ok || n < 0 || n > maxValues-pc.values {
				return pc, offErr(path, at, "data page with %d values (the column chunk declares %d in all)", n, maxValues)
			}
			pc.values += n
		case pageDataV2:
			n, ok := get(8, 1)
			nulls, _ := get(8, 2)
			rows, _ := get(8, 3)
			dl, _ := get(8, 5)
			rl, _ := get(8, 6)
			if isc, ok := get(8, 7); ok && isc == 0 {
				compressed = false
			}
			if !ok || n < 0 || n > maxValues-pc.values || nulls < 0 || nulls > n || rows < 0 || rows > n {
				return pc, offErr(path, at, "data page v2 with %d values, %d nulls, %d rows (the column chunk declares %d values)", n, nulls, rows, maxValues)
			}
			if dl < 0 || rl < 0 || dl+rl > comp || dl+rl > unc {
				return pc, offErr(path, at, "data page v2 level lengths %d and %d do not fit the page", rl, dl)
			}
			levels = dl + rl
			pc.values += n
		case pageDictionary:
			n, ok := get(7, 1)
			if !ok || n < 0 || n > unc {
				return pc, offErr(path, at, "dictionary page with %d values in %d bytes", n, unc)
			}
		case pageIndex:
		default:
			return pc, offErr(path, at, "unknown page type %d", typ)
		}
		if compressed && typ != pageIndex {
			body := make([]byte, comp-levels)
			if _, err := r.ReadAt(body, base+bodyOff+levels); err != nil {
				return pc, offErr(path, at, "reading a page: %v", err)
			}
			if err := checkDecompressed(codec, body, unc-levels); err != nil {
				return pc, offErr(path, at, "compressed page: %v", err)
			}
		}
		off = bodyOff + comp
	}
	return pc, nil
}

// checkDecompressed checks that body decompresses (codec) to at most want
// bytes, streaming where the codec allows so a decompression bomb costs
// no memory.
func checkDecompressed(codec int32, body []byte, want int64) error {
	limited := func(r io.Reader) error {
		n, err := io.Copy(io.Discard, io.LimitReader(r, want+1))
		if err != nil {
			return err
		}
		if n > want {
			return fmt.Errorf("decompresses to more than the %d bytes stated", want)
		}
		return nil
	}
	switch codec {
	case codecSnappy:
		n, err := snappy.DecodedLen(body)
		if err != nil {
			return err
		}
		if int64(n) > want {
			return fmt.Errorf("decompresses to %d bytes, more than the %d stated", n, want)
		}
		return nil
	case codecGzip:
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer zr.Close()
		return limited(zr)
	case codecZstd:
		var h zstd.Header
		if err := h.Decode(body); err != nil {
			return err
		}
		if h.HasFCS && h.FrameContentSize > uint64(want) {
			return fmt.Errorf("zstd frame declares %d bytes, more than the %d stated", h.FrameContentSize, want)
		}
		zr, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(uint64(max(want, zstd.MinWindowSize))), zstd.WithDecoderMaxMemory(uint64(max(want, 1))))
		if err != nil {
			return err
		}
		defer zr.Close()
		return limited(zr)
	case codecBrotli:
		return limited(brotli.NewReader(bytes.NewReader(body)))
	case codecLZ4Raw:
		// The library doubles its buffer on any error, so a corrupt block
		// must be caught here: it has to decode into exactly want bytes.
		dst := make([]byte, want)
		if _, err := lz4.UncompressBlock(body, dst); err != nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("unsupported codec %d", codec)
}
