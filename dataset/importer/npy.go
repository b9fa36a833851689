package importer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/regfile"
)

// maxNPYHeader bounds the header dictionary; NumPy writes ~100 bytes.
const maxNPYHeader = 64 << 10

// npyHeader is a parsed .npy header.
type npyHeader struct {
	Descr   string // "<f4", "<f8", "<i4", "<i8", "|b1", "|u1"
	Fortran bool
	Shape   []int64
	DataOff int64 // byte offset of the payload
}

// itemSize returns the element size of a supported descr, or 0.
func npyItemSize(descr string) int64 {
	switch descr {
	case "<f4", "<i4":
		return 4
	case "<f8", "<i8":
		return 8
	case "|b1", "|u1":
		return 1
	}
	return 0
}

// count returns the number of elements (shape product) or -1 on overflow.
func (h *npyHeader) count() int64 {
	n := int64(1)
	for _, d := range h.Shape {
		if d != 0 && n > math.MaxInt64/d {
			return -1
		}
		n *= d
	}
	return n
}

// parseNPYHeader parses the start of a .npy file: magic "\x93NUMPY",
// version (1.0, 2.0 or 3.0), header length, and the header dictionary. b
// must hold at least the whole header; path is for errors.
func parseNPYHeader(path string, b []byte) (*npyHeader, error) {
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return nil, offErr(path, 0, "not a .npy file (bad magic)")
	}
	major := b[6]
	var hlen, start int64
	switch major {
	case 1:
		hlen, start = int64(binary.LittleEndian.Uint16(b[8:10])), 10
	case 2, 3:
		if len(b) < 12 {
			return nil, offErr(path, int64(len(b)), "truncated header")
		}
		hlen, start = int64(binary.LittleEndian.Uint32(b[8:12])), 12
	default:
		return nil, offErr(path, 6, "unsupported .npy version %d.%d", major, b[7])
	}
	if hlen > maxNPYHeader {
		return nil, offErr(path, 8, "header length %d exceeds %d", hlen, maxNPYHeader)
	}
	if int64(len(b)) < start+hlen {
		return nil, offErr(path, int64(len(b)), "truncated header (want %d bytes)", start+hlen)
	}
	h, msg, at := parseNPYDict(b[start : start+hlen])
	if msg != "" {
		return nil, offErr(path, start+int64(at), "bad header: %s", msg)
	}
	h.DataOff = start + hlen
	if npyItemSize(h.Descr) == 0 {
		return nil, offErr(path, start, "unsupported dtype %q (want little-endian <f4 <f8 <i4 <i8, or |b1 |u1)", truncate(h.Descr, 16))
	}
	if h.Fortran && len(h.Shape) > 1 {
		return nil, offErr(path, start, "Fortran-order arrays are not supported; save with C order")
	}
	if h.count() < 0 {
		return nil, offErr(path, start, "shape %v overflows", h.Shape)
	}
	return h, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// parseNPYDict parses the Python literal {'descr': ..., 'fortran_order':
// ..., 'shape': (...)}. It returns an error message and the offset where
// parsing failed.
func parseNPYDict(s []byte) (h *npyHeader, msg string, at int) {
	p := &pyLit{s: s}
	h = &npyHeader{}
	p.ws()
	if !p.eat('{') {
		return nil, "want '{'", p.i
	}
	seen := map[string]bool{}
	for {
		p.ws()
		if p.eat('}') {
			break
		}
		key, ok := p.str()
		if !ok {
			return nil, "want a quoted key", p.i
		}
		p.ws()
		if !p.eat(':') {
			return nil, "want ':'", p.i
		}
		p.ws()
		if seen[key] {
			return nil, fmt.Sprintf("key %q repeated", truncate(key, 20)), p.i
		}
		seen[key] = true
		switch key {
		case "descr":
			if h.Descr, ok = p.str(); !ok {
				return nil, "descr: want a string", p.i
			}
		case "fortran_order":
			switch {
			case p.word("True"):
				h.Fortran = true
			case p.word("False"):
			default:
				return nil, "fortran_order: want True or False", p.i
			}
		case "shape":
			if h.Shape, ok = p.tuple(); !ok {
				return nil, "shape: want a tuple of non-negative integers", p.i
			}
		default:
			return nil, fmt.Sprintf("unknown key %q", truncate(key, 20)), p.i
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		p.ws()
		if !p.eat('}') {
			return nil, "want ',' or '}'", p.i
		}
		break
	}
	p.ws()
	if p.i != len(s) {
		return nil, "trailing bytes after '}'", p.i
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return nil, "missing key " + k, p.i
		}
	}
	return h, "", 0
}

// pyLit is a cursor over a Python literal.
type pyLit struct {
	s []byte
	i int
}

func (p *pyLit) ws() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\n' || p.s[p.i] == '\t' || p.s[p.i] == '\r') {
		p.i++
	}
}

func (p *pyLit) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *pyLit) word(w string) bool {
	if bytes.HasPrefix(p.s[p.i:], []byte(w)) {
		p.i += len(w)
		return true
	}
	return false
}

func (p *pyLit) str() (string, bool) {
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", false
	}
	q := p.s[p.i]
	j := bytes.IndexByte(p.s[p.i+1:], q)
	if j < 0 {
		return "", false
	}
	v := string(p.s[p.i+1 : p.i+1+j])
	p.i += j + 2
	return v, true
}

func (p *pyLit) tuple() ([]int64, bool) {
	if !p.eat('(') {
		return nil, false
	}
	dims := []int64{}
	for {
		p.ws()
		if p.eat(')') {
			return dims, true
		}
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		// Python 2 wrote longs as "3L".
		v, ok := parseInt(p.s[p.i:j])
		if !ok || v < 0 || len(dims) >= 32 {
			return nil, false
		}
		p.i = j
		p.eat('L')
		dims = append(dims, v)
		p.ws()
		if p.eat(',') {
			continue
		}
		p.ws()
		if !p.eat(')') {
			return nil, false
		}
		return dims, true
	}
}

// npyFile is an opened .npy file whose size has been checked against its
// header.
type npyFile struct {
	path string
	f    *os.File
	h    *npyHeader
	n    int64 // element count
}

func openNPY(path string) (*npyFile, error) {
	f, fi, err := regfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("importer: %w", err)
	}
	head := make([]byte, min(fi.Size(), maxNPYHeader+12))
	if _, err := io.ReadFull(f, head); err != nil {
		f.Close()
		return nil, offErr(path, 0, "reading header: %v", err)
	}
	h, err := parseNPYHeader(path, head)
	if err != nil {
		f.Close()
		return nil, err
	}
	n := h.count()
	is := npyItemSize(h.Descr)
	if n > (math.MaxInt64-h.DataOff)/is || h.DataOff+n*is != fi.Size() {
		f.Close()
		return nil, offErr(path, min(fi.Size(), h.DataOff), "file has %d bytes, header (shape %v, %s) implies %d", fi.Size(), h.Shape, h.Descr, h.DataOff+n*is)
	}
	if _, err := f.Seek(h.DataOff, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("importer: %w", err)
	}
	return &npyFile{path: path, f: f, h: h, n: n}, nil
}

func (nf *npyFile) Close() error { return nf.f.Close() }

// readRaw reads the payload straight into dst's bytes.
func (nf *npyFile) readRaw(dst []byte) error {
	if k, err := io.ReadFull(nf.f, dst); err != nil {
		return offErr(nf.path, nf.h.DataOff+int64(k), "reading data: %v", err)
	}
	return nil
}

// chunks reads the payload in pieces, calling fn with each piece and the
// index of its first element.
func (nf *npyFile) chunks(fn func(b []byte, first int64) error) error {
	is := npyItemSize(nf.h.Descr)
	buf := make([]byte, min(nf.n*is, (1<<20)/is*is))
	for first := int64(0); first < nf.n; {
		k := min(int64(len(buf))/is, nf.n-first)
		b := buf[:k*is]
		if err := nf.readRaw(b); err != nil {
			return err
		}
		if err := fn(b, first); err != nil {
			return err
		}
		first += k
	}
	return nil
}

// readFloat32s reads a float array (<f4 or <f8) as float32, rejecting
// non-finite values by byte offset.
func (nf *npyFile) readFloat32s() ([]float32, error) {
	out := make([]float32, nf.n)
	switch nf.h.Descr {
	case "<f4":
		if err := nf.readRaw(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), 4*len(out))); err != nil {
			return nil, err
		}
		if !hostLE {
			swap4(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), 4*len(out)))
		}
		for i, v := range out {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, offErr(nf.path, nf.h.DataOff+4*int64(i), "non-finite value %v at element %d", v, i)
			}
		}
	case "<f8":
		err := nf.chunks(func(b []byte, first int64) error {
			for i := 0; i < len(b)/8; i++ {
				v := math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
				if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > math.MaxFloat32 {
					return offErr(nf.path, nf.h.DataOff+8*(first+int64(i)), "value %v at element %d is not a finite float32", v, first+int64(i))
				}
				out[first+int64(i)] = float32(v)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	default:
		return nil, offErr(nf.path, 0, "dtype %s is not a float type", nf.h.Descr)
	}
	return out, nil
}

// readInt32s reads an integer array (<i4 or <i8) as int32, checking every
// value lies in [lo, hi).
func (nf *npyFile) readInt32s(lo, hi int64) ([]int32, error) {
	out := make([]int32, nf.n)
	bad := func(v, i int64, es int64) error {
		return offErr(nf.path, nf.h.DataOff+es*i, "value %d at element %d out of range [%d, %d)", v, i, lo, hi)
	}
	switch nf.h.Descr {
	case "<i4":
		b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), 4*len(out))
		if err := nf.readRaw(b); err != nil {
			return nil, err
		}
		if !hostLE {
			swap4(b)
		}
		for i, v := range out {
			if int64(v) < lo || int64(v) >= hi {
				return nil, bad(int64(v), int64(i), 4)
			}
		}
	case "<i8":
		err := nf.chunks(func(b []byte, first int64) error {
			for i := 0; i < len(b)/8; i++ {
				v := int64(binary.LittleEndian.Uint64(b[8*i:]))
				if v < lo || v >= hi {
					return bad(v, first+int64(i), 8)
				}
				out[first+int64(i)] = int32(v)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	default:
		return nil, offErr(nf.path, 0, "dtype %s is not an integer type (want <i4 or <i8)", nf.h.Descr)
	}
	return out, nil
}

// File names accepted in an npy directory, in order of preference.
var (
	npyEdgeNames    = []string{"edge_index.npy", "edges.npy"}
	npyFeatureNames = []string{"features.npy", "node_feat.npy", "x.npy"}
	npyLabelNames   = []string{"labels.npy", "node_label.npy", "y.npy"}
	npySplitNames   = [3][]string{
		{"train_idx.npy", "train.npy", "train_mask.npy"},
		{"val_idx.npy", "valid_idx.npy", "val.npy", "val_mask.npy"},
		{"test_idx.npy", "test.npy", "test_mask.npy"},
	}
)

// firstExisting returns the first of dir/names that exists ("" if none);
// one that exists but is not a regular file is an error (findRegular).
func firstExisting(dir string, names []string) (string, error) {
	paths := make([]string, len(names))
	for i, nm := range names {
		paths[i] = filepath.Join(dir, nm)
	}
	return findRegular(paths...)
}

// LoadNPY reads a directory of .npy arrays:
//
//	edge_index.npy or edges.npy  int32/int64 [2, E] (row 0 = sources) or [E, 2]
//	features.npy (node_feat.npy, x.npy)  float32/float64 [N, F]   (optional)
//	labels.npy (node_label.npy, y.npy)   int [N] or [N, 1], -1 = unlabeled (optional)
//	train_idx.npy, val_idx.npy, test_idx.npy  int node IDs [k], or bool masks [N] (optional)
//
// A [2, 2] edge array is read as [2, E]. The node count is the feature (or
// label) row count, else opts.NumNodes, else the largest ID + 1.
func LoadNPY(dir string, opts Options) (*dataset.Dataset, error) {
	epath, err := firstExisting(dir, npyEdgeNames)
	if err != nil {
		return nil, err
	}
	if epath == "" {
		return nil, fmt.Errorf("importer: %s: no %s", dir, strings.Join(npyEdgeNames, " or "))
	}
	d := &dataset.Dataset{Name: defaultName(dir, opts), Directed: !opts.Symmetrize}
	n := int64(-1)
	fpath, err := firstExisting(dir, npyFeatureNames)
	if err != nil {
		return nil, err
	}
	if p := fpath; p != "" {
		nf, err := openNPY(p)
		if err != nil {
			return nil, err
		}
		if len(nf.h.Shape) != 2 || nf.h.Shape[0] > dataset.MaxNodes {
			nf.Close()
			return nil, offErr(p, 0, "features must be [N, F] with N <= %d, got shape %v", int64(dataset.MaxNodes), nf.h.Shape)
		}
		d.Features, err = nf.readFloat32s()
		nf.Close()
		if err != nil {
			return nil, err
		}
		n, d.FeatDim = nf.h.Shape[0], int(nf.h.Shape[1])
		if d.FeatDim == 0 {
			d.Features = nil
		}
	}
	lpath, err := firstExisting(dir, npyLabelNames)
	if err != nil {
		return nil, err
	}
	if p := lpath; p != "" {
		labels, classes, err := readNPYLabels(p)
		if err != nil {
			return nil, err
		}
		if n >= 0 && int64(len(labels)) != n {
			return nil, offErr(p, 0, "has %d labels, features have %d rows", len(labels), n)
		}
		n = int64(len(labels))
		if classes > 0 {
			d.Labels, d.NumClasses = labels, classes
		}
	}
	if n < 0 && opts.NumNodes > 0 {
		if opts.NumNodes > dataset.MaxNodes {
			return nil, fmt.Errorf("importer: node count %d out of range", opts.NumNodes)
		}
		if err := checkMemory(epath, opts.NumNodes, 0, opts); err != nil {
			return nil, err
		}
		n = opts.NumNodes
	}
	src, dst, err := readNPYEdges(epath, n)
	if err != nil {
		return nil, err
	}
	if n < 0 {
		n = 0
		for i := range src {
			n = max(n, int64(src[i])+1, int64(dst[i])+1)
		}
		if err := boundNodes(epath, n, int64(len(src))); err != nil {
			return nil, err
		}
	}
	if err := checkMemory(epath, n, int64(len(src)), opts); err != nil {
		return nil, err
	}
	d.Graph = buildCSR(n, src, dst, opts.Symmetrize)
	src, dst = nil, nil
	if d.Labels != nil {
		out := [3]*[]int32{&d.Train, &d.Val, &d.Test}
		for i, names := range npySplitNames {
			p, err := firstExisting(dir, names)
			if err != nil {
				return nil, err
			}
			if p == "" {
				continue
			}
			if *out[i], err = readNPYSplit(p, n); err != nil {
				return nil, err
			}
		}
	}
	if err := dataset.Validate(d); err != nil {
		return nil, fmt.Errorf("importer: %s: %w", dir, err)
	}
	return d, nil
}

func readNPYEdges(path string, n int64) (src, dst []int32, err error) {
	nf, err := openNPY(path)
	if err != nil {
		return nil, nil, err
	}
	defer nf.Close()
	sh := nf.h.Shape
	if len(sh) != 2 || (sh[0] != 2 && sh[1] != 2) {
		return nil, nil, offErr(path, 0, "edges must have shape [2, E] or [E, 2], got %v", sh)
	}
	hi := int64(dataset.MaxNodes)
	if n >= 0 {
		hi = n
	}
	all, err := nf.readInt32s(0, hi)
	if err != nil {
		return nil, nil, err
	}
	if sh[0] == 2 {
		e := sh[1]
		return all[:e:e], all[e:], nil
	}
	e := sh[0]
	src, dst = make([]int32, e), make([]int32, e)
	for i := int64(0); i < e; i++ {
		src[i], dst[i] = all[2*i], all[2*i+1]
	}
	return src, dst, nil
}

// readNPYLabels reads int labels (-1 = unlabeled) or float labels (NaN =
// unlabeled, otherwise integral), shape [N] or [N, 1].
func readNPYLabels(path string) ([]int32, int, error) {
	nf, err := openNPY(path)
	if err != nil {
		return nil, 0, err
	}
	defer nf.Close()
	sh := nf.h.Shape
	if !(len(sh) == 1 || (len(sh) == 2 && sh[1] == 1)) || sh[0] > dataset.MaxNodes {
		return nil, 0, offErr(path, 0, "labels must have shape [N] or [N, 1] (single-label), got %v", sh)
	}
	var labels []int32
	switch nf.h.Descr {
	case "<i4", "<i8":
		if labels, err = nf.readInt32s(-1, math.MaxInt32); err != nil {
			return nil, 0, err
		}
	case "<f4", "<f8":
		labels = make([]int32, nf.n)
		is := npyItemSize(nf.h.Descr)
		err = nf.chunks(func(b []byte, first int64) error {
			for i := int64(0); i < int64(len(b))/is; i++ {
				var v float64
				if is == 4 {
					v = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
				} else {
					v = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
				}
				switch {
				case math.IsNaN(v) || v == -1:
					labels[first+i] = -1
				case v >= 0 && v < 1<<30 && v == math.Trunc(v):
					labels[first+i] = int32(v)
				default:
					return offErr(path, nf.h.DataOff+is*(first+i), "label %v at element %d is not a class index", v, first+i)
				}
			}
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
	default:
		return nil, 0, offErr(path, 0, "labels have dtype %s, want an integer or float type", nf.h.Descr)
	}
	classes := int32(0)
	for _, l := range labels {
		classes = max(classes, l+1)
	}
	return labels, int(classes), nil
}

// readNPYSplit reads node IDs (sorted; duplicates rejected) or a bool mask
// of length n.
func readNPYSplit(path string, n int64) ([]int32, error) {
	nf, err := openNPY(path)
	if err != nil {
		return nil, err
	}
	defer nf.Close()
	if len(nf.h.Shape) != 1 {
		return nil, offErr(path, 0, "split must be 1-D, got shape %v", nf.h.Shape)
	}
	if nf.h.Descr == "|b1" || nf.h.Descr == "|u1" {
		if nf.n != n {
			return nil, offErr(path, 0, "mask has %d entries, want one per node (%d)", nf.n, n)
		}
		ids := []int32{}
		err := nf.chunks(func(b []byte, first int64) error {
			for i, c := range b {
				switch c {
				case 0:
				case 1:
					ids = append(ids, int32(first+int64(i)))
				default:
					return offErr(path, nf.h.DataOff+first+int64(i), "mask value %d at element %d is not 0 or 1", c, first+int64(i))
				}
			}
			return nil
		})
		return ids, err
	}
	if nf.n > n {
		return nil, offErr(path, 0, "%d IDs for %d nodes", nf.n, n)
	}
	ids, err := nf.readInt32s(0, n)
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			return nil, fileErr(path, "node ID %d listed twice", ids[i])
		}
	}
	return ids, nil
}
