package partition

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/internal/excerpt"
	"github.com/strata-gnn/strata/internal/regfile"
	"github.com/strata-gnn/strata/partition/book"
)

// The partition file (FileName in an output directory) stores a book, the
// renumbering and run metadata. Layout, all little-endian:
//
//	header (32 bytes):
//	  0  magic     "STRATAPB"
//	  8  version   uint32 (FileVersion)
//	  12 flags     uint32 (must be 0)
//	  16 k         uint32, 1..MaxParts
//	  20 ncon      uint32, 1..8
//	  24 nodes     uint32, 0..2^31-1
//	  28 crc       uint32: CRC-32C of bytes 0..28
//	section meta:     uint32 length L (<= maxMetaBytes), L bytes of JSON, uint32 CRC-32C of the L bytes
//	section offsets:  (k+1) int64, then CRC-32C
//	section weights:  k*ncon int64 part weights, then CRC-32C
//	section newToOld: nodes int32 (the old ID of every new ID), then CRC-32C
//
// The file size is fully determined by the header and L, and is checked
// before anything is allocated.
const (
	FileName    = "partition.bin"
	FileMagic   = "STRATAPB"
	FileVersion = 1

	headerSize   = 32
	maxMetaBytes = 1 << 20
)

// ErrCorruption is wrapped by every error about a malformed partition file.
var ErrCorruption = errors.New("partition: corrupt or invalid partition file")

// ErrUnsupportedVersion is wrapped (with ErrCorruption) when a file has a
// version this build does not read.
var ErrUnsupportedVersion = errors.New("partition: unsupported partition file version")

// FormatError reports a problem at a byte offset of a partition file (Off
// < 0: the file as a whole).
type FormatError struct {
	Path string
	Off  int64
	Msg  string
	Err  error // optional cause besides ErrCorruption
}

func (e *FormatError) Error() string {
	if e.Off >= 0 {
		return fmt.Sprintf("partition: %s: at byte %d: %s", e.Path, e.Off, e.Msg)
	}
	return fmt.Sprintf("partition: %s: %s", e.Path, e.Msg)
}

// Unwrap matches ErrCorruption and the optional cause.
func (e *FormatError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrCorruption, e.Err}
	}
	return []error{ErrCorruption}
}

func formatErr(path string, off int64, format string, args ...any) *FormatError {
	return &FormatError{Path: path, Off: off, Msg: fmt.Sprintf(format, args...)}
}

// Meta is the run metadata stored with a partition.
type Meta struct {
	Dataset string `json:"dataset,omitempty"`
	// DatasetFingerprint is dataset.Dataset.Fingerprint of the dataset
	// that was partitioned (the original IDs); CheckDataset compares it.
	// Files written before it existed lack it.
	DatasetFingerprint string `json:"dataset_fingerprint,omitempty"`
	// OutputFingerprint is that of the renumbered dataset Run writes
	// beside the file (DatasetDir); Load compares it.
	OutputFingerprint string `json:"output_fingerprint,omitempty"`

	Method      Method    `json:"method"`
	Seed        uint64    `json:"seed"`
	Imbalance   float64   `json:"imbalance"`
	Constraints []string  `json:"constraints"`
	Balance     []float64 `json:"balance"`
	Edges       int64     `json:"edges"`
	EdgeCut     int64     `json:"edge_cut"`
	Millis      int64     `json:"partition_ms"`
}

// Saved is the content of a partition file.
type Saved struct {
	Book        *book.Book
	NewToOld    []int32 // old ID of every new ID
	OldToNew    []int32 // derived on read (the inverse of NewToOld)
	PartWeights []int64 // k*ncon, part p constraint c at p*ncon+c
	NCon        int
	Meta        Meta
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode returns the file bytes of s.
func (s *Saved) Encode() ([]byte, error) {
	if s.Book == nil {
		return nil, inputErr("saved partition without a book")
	}
	k := s.Book.K()
	n := s.Book.NumNodes()
	if k < 1 || k > MaxParts {
		return nil, inputErr("k = %d not in [1, %d]", k, MaxParts)
	}
	if s.NCon < 1 || s.NCon > maxConstraints {
		return nil, inputErr("%d constraints, want 1..%d", s.NCon, maxConstraints)
	}
	if int64(len(s.NewToOld)) != n {
		return nil, inputErr("newToOld has %d entries for %d nodes", len(s.NewToOld), n)
	}
	if len(s.PartWeights) != k*s.NCon {
		return nil, inputErr("%d part weights, want k*ncon = %d", len(s.PartWeights), k*s.NCon)
	}
	if _, err := Inverse(s.NewToOld); err != nil {
		return nil, err
	}
	meta, err := json.Marshal(&s.Meta)
	if err != nil {
		return nil, fmt.Errorf("partition: encoding metadata: %w", err)
	}
	if len(meta) > maxMetaBytes {
		return nil, inputErr("metadata is %d bytes, at most %d", len(meta), maxMetaBytes)
	}
	var buf bytes.Buffer
	buf.Grow(int(fileSize(int64(k), int64(s.NCon), n, int64(len(meta)))))
	h := make([]byte, headerSize)
	copy(h, FileMagic)
	le := binary.LittleEndian
	le.PutUint32(h[8:], FileVersion)
	le.PutUint32(h[12:], 0)
	le.PutUint32(h[16:], uint32(k))
	le.PutUint32(h[20:], uint32(s.NCon))
	le.PutUint32(h[24:], uint32(n))
	le.PutUint32(h[28:], crc32.Checksum(h[:28], castagnoli))
	buf.Write(h)
	var l [4]byte
	le.PutUint32(l[:], uint32(len(meta)))
	buf.Write(l[:])
	writeSection(&buf, meta)
	writeSection(&buf, appendInts(nil, s.Book.Offsets()))
	writeSection(&buf, appendInts(nil, s.PartWeights))
	nb := make([]byte, 0, 4*len(s.NewToOld))
	for _, v := range s.NewToOld {
		nb = le.AppendUint32(nb, uint32(v))
	}
	writeSection(&buf, nb)
	return buf.Bytes(), nil
}

func appendInts(b []byte, x []int64) []byte {
	for _, v := range x {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func writeSection(buf *bytes.Buffer, b []byte) {
	buf.Write(b)
	var c [4]byte
	binary.LittleEndian.PutUint32(c[:], crc32.Checksum(b, castagnoli))
	buf.Write(c[:])
}

// fileSize is the exact size of a file with the given header values and
// metadata length.
func fileSize(k, ncon, n, metaLen int64) int64 {
	return headerSize + 4 + metaLen + 4 + (k+1)*8 + 4 + k*ncon*8 + 4 + n*4 + 4
}

// WriteFile stores s at path atomically (internal/atomicfile): it writes a
// temporary file in the same directory, fsyncs it (unless noSync), and
// renames it over path.
func WriteFile(path string, s *Saved, noSync bool) error {
	b, err := s.Encode()
	if err != nil {
		return err
	}
	err = atomicfile.Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}, atomicfile.Options{NoSync: noSync})
	if err != nil {
		return fmt.Errorf("partition: %w", err)
	}
	return nil
}

// ReadFile reads and fully checks a partition file: magic, version, header
// checksum, the exact file size, every section's checksum, the offsets
// (starting at 0, non-decreasing, ending at the node count), the part
// weights (non-negative) and that newToOld is a permutation. Errors about
// content are *FormatError wrapping ErrCorruption.
func ReadFile(path string) (*Saved, error) {
	f, st, err := regfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("partition: %w", err)
	}
	defer f.Close()
	h := make([]byte, headerSize+4)
	if _, err := io.ReadFull(f, h); err != nil {
		return nil, formatErr(path, 0, "file of %d bytes is shorter than the %d-byte header", st.Size(), len(h))
	}
	k, ncon, n, metaLen, err := parseHeader(path, h)
	if err != nil {
		return nil, err
	}
	if want := fileSize(k, ncon, n, metaLen); st.Size() != want {
		return nil, formatErr(path, -1, "file is %d bytes, header says %d", st.Size(), want)
	}
	b := make([]byte, st.Size())
	copy(b, h)
	if _, err := io.ReadFull(f, b[len(h):]); err != nil {
		return nil, formatErr(path, int64(len(h)), "reading: %v", err)
	}
	return Parse(path, b)
}

// parseHeader checks the fixed header plus the metadata length that
// follows it, and returns k, ncon, nodes and that length.
func parseHeader(path string, h []byte) (k, ncon, n, metaLen int64, err error) {
	le := binary.LittleEndian
	if len(h) < headerSize+4 {
		return 0, 0, 0, 0, formatErr(path, 0, "%d bytes, shorter than the %d-byte header", len(h), headerSize+4)
	}
	if string(h[:8]) != FileMagic {
		return 0, 0, 0, 0, formatErr(path, 0, "bad magic %q, want %q", h[:8], FileMagic)
	}
	if v := le.Uint32(h[8:]); v != FileVersion {
		return 0, 0, 0, 0, &FormatError{Path: path, Off: 8, Err: ErrUnsupportedVersion,
			Msg: fmt.Sprintf("version %d, this build reads version %d", v, FileVersion)}
	}
	if got, want := le.Uint32(h[28:]), crc32.Checksum(h[:28], castagnoli); got != want {
		return 0, 0, 0, 0, formatErr(path, 28, "header checksum %08x, computed %08x", got, want)
	}
	if fl := le.Uint32(h[12:]); fl != 0 {
		return 0, 0, 0, 0, formatErr(path, 12, "unknown flags %#x", fl)
	}
	k, ncon, n = int64(le.Uint32(h[16:])), int64(le.Uint32(h[20:])), int64(le.Uint32(h[24:]))
	if k < 1 || k > MaxParts {
		return 0, 0, 0, 0, formatErr(path, 16, "k = %d not in [1, %d]", k, MaxParts)
	}
	if ncon < 1 || ncon > maxConstraints {
		return 0, 0, 0, 0, formatErr(path, 20, "%d constraints, want 1..%d", ncon, maxConstraints)
	}
	if n > math.MaxInt32 {
		return 0, 0, 0, 0, formatErr(path, 24, "%d nodes exceed %d", n, math.MaxInt32)
	}
	metaLen = int64(le.Uint32(h[headerSize:]))
	if metaLen > maxMetaBytes {
		return 0, 0, 0, 0, formatErr(path, headerSize, "metadata length %d exceeds %d", metaLen, maxMetaBytes)
	}
	return k, ncon, n, metaLen, nil
}

// Parse decodes and checks the bytes of a partition file (see ReadFile);
// path is used in errors.
func Parse(path string, b []byte) (*Saved, error) {
	k, ncon, n, metaLen, err := parseHeader(path, b)
	if err != nil {
		return nil, err
	}
	if want := fileSize(k, ncon, n, metaLen); int64(len(b)) != want {
		return nil, formatErr(path, -1, "file is %d bytes, header says %d", len(b), want)
	}
	le := binary.LittleEndian
	off := int64(headerSize + 4)
	section := func(size int64, name string) ([]byte, error) {
		data := b[off : off+size]
		got := le.Uint32(b[off+size:])
		if want := crc32.Checksum(data, castagnoli); got != want {
			return nil, formatErr(path, off+size, "%s checksum %08x, computed %08x", name, got, want)
		}
		off += size + 4
		return data, nil
	}
	metaOff := off
	mb, err := section(metaLen, "metadata")
	if err != nil {
		return nil, err
	}
	s := &Saved{NCon: int(ncon)}
	dec := json.NewDecoder(bytes.NewReader(mb))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s.Meta); err != nil {
		off, msg := excerpt.JSON(err, metaLen)
		if off < 0 {
			off = 0
		}
		return nil, formatErr(path, metaOff+off, "bad metadata: %s", msg)
	}
	if dec.More() {
		return nil, formatErr(path, metaOff+dec.InputOffset(), "trailing data after metadata")
	}
	offOff := off
	ob, err := section((k+1)*8, "offsets")
	if err != nil {
		return nil, err
	}
	offsets := make([]int64, k+1)
	for i := range offsets {
		offsets[i] = int64(le.Uint64(ob[8*i:]))
		at := offOff + 8*int64(i)
		switch {
		case i == 0 && offsets[0] != 0:
			return nil, formatErr(path, at, "offsets[0] = %d, want 0", offsets[0])
		case i > 0 && offsets[i] < offsets[i-1]:
			return nil, formatErr(path, at, "offsets[%d] = %d decreases (offsets[%d] = %d)", i, offsets[i], i-1, offsets[i-1])
		case offsets[i] > n:
			return nil, formatErr(path, at, "offsets[%d] = %d exceeds the node count %d", i, offsets[i], n)
		}
	}
	if offsets[k] != n {
		return nil, formatErr(path, offOff+8*k, "offsets[%d] = %d, want the node count %d", k, offsets[k], n)
	}
	if s.Book, err = book.New(offsets); err != nil {
		return nil, formatErr(path, offOff, "%v", err)
	}
	wOff := off
	wb, err := section(k*ncon*8, "part weights")
	if err != nil {
		return nil, err
	}
	s.PartWeights = make([]int64, k*ncon)
	for i := range s.PartWeights {
		s.PartWeights[i] = int64(le.Uint64(wb[8*i:]))
		if s.PartWeights[i] < 0 {
			return nil, formatErr(path, wOff+8*int64(i), "part weight %d is negative", s.PartWeights[i])
		}
	}
	pOff := off
	pb, err := section(n*4, "newToOld")
	if err != nil {
		return nil, err
	}
	s.NewToOld = make([]int32, n)
	s.OldToNew = make([]int32, n)
	for i := range s.OldToNew {
		s.OldToNew[i] = -1
	}
	for u := range s.NewToOld {
		v := int32(le.Uint32(pb[4*u:]))
		at := pOff + 4*int64(u)
		if v < 0 || int64(v) >= n {
			return nil, formatErr(path, at, "new node %d maps to old node %d, not in [0, %d)", u, v, n)
		}
		if s.OldToNew[v] >= 0 {
			return nil, formatErr(path, at, "old node %d appears twice (new nodes %d and %d)", v, s.OldToNew[v], u)
		}
		s.NewToOld[u] = v
		s.OldToNew[v] = int32(u)
	}
	return s, nil
}

// ErrOtherDataset is matched (errors.Is) by the errors of CheckDataset and
// Load when a partition file was made for another dataset.
var ErrOtherDataset = errors.New("partition: made for another dataset")

// MismatchError says that the partition file at Path was made for another
// dataset than the one it is applied to; Msg says how they differ (node
// counts, fingerprints or names).
type MismatchError struct {
	Path string
	Msg  string
}

func (e *MismatchError) Error() string { return fmt.Sprintf("partition: %s: %s", e.Path, e.Msg) }

// Is makes errors.Is(err, ErrOtherDataset) hold.
func (e *MismatchError) Is(target error) bool { return target == ErrOtherDataset }

// CheckDataset checks that s, read from path, partitions ds (the dataset
// with the original IDs): the node counts must agree and, when the file
// records one, the fingerprints (dataset.Dataset.Fingerprint), so a
// partition of another dataset of the same size is refused, naming both
// fingerprints. Files written before fingerprints were recorded fall back
// to comparing the dataset names; legacy reports that case so a caller can
// warn that the check was weaker. Errors are *MismatchError.
func (s *Saved) CheckDataset(path string, ds *dataset.Dataset) (legacy bool, err error) {
	bad := func(format string, args ...any) error {
		return &MismatchError{Path: path, Msg: fmt.Sprintf(format, args...)}
	}
	if n := s.Book.NumNodes(); n != ds.NumNodes() {
		return false, bad("has %d nodes, dataset %q has %d", n, ds.Name, ds.NumNodes())
	}
	if want := s.Meta.DatasetFingerprint; want != "" {
		if got := ds.Fingerprint(); got != want {
			return false, bad("made for the dataset with fingerprint %s (%q), not %s (%q)", want, s.Meta.Dataset, got, ds.Name)
		}
		return false, nil
	}
	if m := s.Meta.Dataset; m != "" && ds.Name != "" && m != ds.Name {
		return true, bad("made for dataset %q, not %q", m, ds.Name)
	}
	return true, nil
}
