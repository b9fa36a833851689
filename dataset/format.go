package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"path/filepath"

	"github.com/strata-gnn/strata/internal/excerpt"
	"github.com/strata-gnn/strata/internal/regfile"
)

// On-disk format constants. See docs/dataset-format.md.
const (
	Magic         = "STRATA-DS"
	FormatVersion = 1
	ManifestFile  = "manifest.json"
	ChecksumAlgo  = "crc32c"

	// maxManifestBytes bounds the manifest read before parsing.
	maxManifestBytes = 1 << 20
	// MaxNodes is the largest node count: node IDs are int32.
	MaxNodes = math.MaxInt32
)

// DType names an array element type in the manifest.
type DType string

// Element types used by the format.
const (
	Int32   DType = "int32"
	Int64   DType = "int64"
	Float32 DType = "float32"
)

// Size returns the element size in bytes (0 for an unknown type).
func (t DType) Size() int64 {
	switch t {
	case Int32, Float32:
		return 4
	case Int64:
		return 8
	}
	return 0
}

// Array names, in the order they are listed in the manifest. The file of an
// array is "<name>.bin".
const (
	ArrIndptr   = "indptr"
	ArrIndices  = "indices"
	ArrWeights  = "weights"
	ArrFeatures = "features"
	ArrLabels   = "labels"
	ArrTrain    = "train"
	ArrVal      = "val"
	ArrTest     = "test"
)

var arrayOrder = []string{ArrIndptr, ArrIndices, ArrWeights, ArrFeatures, ArrLabels, ArrTrain, ArrVal, ArrTest}

var arrayDType = map[string]DType{
	ArrIndptr: Int64, ArrIndices: Int32, ArrWeights: Float32, ArrFeatures: Float32,
	ArrLabels: Int32, ArrTrain: Int32, ArrVal: Int32, ArrTest: Int32,
}

// ArrayFile returns the file name holding the named array.
func ArrayFile(name string) string { return name + ".bin" }

// ArrayMeta describes one array file in the manifest.
type ArrayMeta struct {
	Name  string  `json:"name"`
	DType DType   `json:"dtype"`
	Shape []int64 `json:"shape"`
	Bytes int64   `json:"bytes"`
	// BlockBytes is the checksum block size (a power of two); CRC32C holds
	// the CRC-32C of each consecutive BlockBytes-long block of the file (the
	// last block may be shorter) as 8 lower-case hex digits, so a damaged
	// byte can be located to its block and blocks verify in parallel.
	BlockBytes int64    `json:"block_bytes"`
	CRC32C     []string `json:"crc32c"`
}

// Checksum block size bounds. Writers pick the smallest power of two >=
// minBlock that keeps an array at or under targetBlocks blocks.
const (
	minBlock     = 4 << 20
	targetBlocks = 1024
	minReadBlock = 4 << 10
	maxReadBlock = 1 << 40
)

// blockSizeFor returns the checksum block size a writer uses for n bytes.
func blockSizeFor(n int64) int64 {
	b := int64(minBlock)
	for b*targetBlocks < n {
		b *= 2
	}
	return b
}

func numBlocks(n, block int64) int64 { return (n + block - 1) / block }

// Manifest is the content of manifest.json.
type Manifest struct {
	Magic      string      `json:"magic"`
	Version    int         `json:"version"`
	Name       string      `json:"name"`
	NumNodes   int64       `json:"num_nodes"`
	NumEdges   int64       `json:"num_edges"`
	Directed   bool        `json:"directed"`
	FeatDim    int64       `json:"feat_dim"`
	NumClasses int64       `json:"num_classes"`
	Checksum   string      `json:"checksum"`
	Arrays     []ArrayMeta `json:"arrays"`
	// ManifestCRC32C is the CRC-32C of the compact JSON encoding of this
	// manifest with ManifestCRC32C set to "" (guards the counts and flags,
	// which no array checksum covers).
	ManifestCRC32C string `json:"manifest_crc32c"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crcHex(c uint32) string { return fmt.Sprintf("%08x", c) }

// manifestCRC computes the self-checksum of m (ignoring m.ManifestCRC32C).
func manifestCRC(m *Manifest) (string, error) { return selfCRC(m) }

// header is what both manifest versions (Manifest, HeteroManifest) carry
// for the checks they share: the magic, the version, the checksum
// algorithm, the self-checksum, and a copy with the self-checksum blanked
// that the self-checksum covers.
type header interface {
	header() (magic string, version int, algo, crc string)
	withoutCRC() any
}

func (m *Manifest) header() (string, int, string, string) {
	return m.Magic, m.Version, m.Checksum, m.ManifestCRC32C
}

func (m *Manifest) withoutCRC() any {
	c := *m
	c.ManifestCRC32C = ""
	return &c
}

// selfCRC is the CRC-32C of the compact JSON encoding of m with its
// manifest_crc32c blanked.
func selfCRC(m header) (string, error) {
	b, err := json.Marshal(m.withoutCRC())
	if err != nil {
		return "", err
	}
	return crcHex(crc32.Checksum(b, castagnoli)), nil
}

// Array returns the metadata of the named array, or nil.
func (m *Manifest) Array(name string) *ArrayMeta {
	for i := range m.Arrays {
		if m.Arrays[i].Name == name {
			return &m.Arrays[i]
		}
	}
	return nil
}

// ReadManifest reads and fully checks dir/manifest.json: magic, version,
// self-checksum, counts and the declared shape and size of every array. It
// does not look at the array files.
func ReadManifest(dir string) (*Manifest, error) {
	path, b, err := readManifestFile(dir)
	if err != nil {
		return nil, err
	}
	return ParseManifest(path, b)
}

// readManifestFile reads dir/manifest.json within its size bound (either
// version); path is the file's, for errors.
func readManifestFile(dir string) (path string, b []byte, err error) {
	path = filepath.Join(dir, ManifestFile)
	b, err = regfile.ReadFile(path, maxManifestBytes)
	var tl *regfile.TooLargeError
	if errors.As(err, &tl) {
		return path, nil, formatErr(path, -1, "manifest larger than %d bytes", maxManifestBytes)
	}
	if err != nil {
		return path, nil, fmt.Errorf("dataset: %w", err)
	}
	return path, b, nil
}

// ParseManifest decodes and checks a manifest; path is used in errors.
func ParseManifest(path string, b []byte) (*Manifest, error) {
	if _, v, ok := peekVersion(b); ok && v == FormatVersionHetero {
		return nil, heteroVersionErr(path) // a typed dataset: OpenHetero reads it
	}
	var m Manifest
	if err := decodeManifest(path, b, &m, FormatVersion, fmt.Sprintf("version %d", FormatVersion)); err != nil {
		return nil, err
	}
	if err := m.check(path); err != nil {
		return nil, err
	}
	return &m, nil
}

// decodeManifest decodes b into m (unknown fields and trailing data are
// errors) and checks what every version shares: the magic, that the
// version is version (reads says which this build reads, for the error),
// the self-checksum and the checksum algorithm.
func decodeManifest(path string, b []byte, m header, version int, reads string) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		// The decoder's messages may quote the input (unknown field
		// names, huge numbers): show a bounded, escaped excerpt.
		off, msg := excerpt.JSON(err, int64(len(b)))
		return &FormatError{Path: path, Off: off, Msg: "bad manifest: " + msg}
	}
	if dec.More() {
		return formatErr(path, dec.InputOffset(), "trailing data after manifest")
	}
	magic, v, algo, crc := m.header()
	if magic != Magic {
		return formatErr(path, -1, "bad magic %q (want %q)", truncate(magic, 32), Magic)
	}
	if v != version {
		return &FormatError{Path: path, Off: -1, Err: ErrUnsupportedVersion,
			Msg: fmt.Sprintf("unsupported format version %d (this build reads %s)", v, reads)}
	}
	want, err := selfCRC(m)
	if err != nil {
		return formatErr(path, -1, "re-encoding manifest: %v", err)
	}
	if crc != want {
		return formatErr(path, -1, "manifest checksum mismatch: stored %q, computed %q", truncate(crc, 16), want)
	}
	if algo != ChecksumAlgo {
		return formatErr(path, -1, "unknown checksum algorithm %q (want %q)", truncate(algo, 32), ChecksumAlgo)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// check verifies counts and that every array's declared dtype, shape and
// byte length agree with the counts.
func (m *Manifest) check(path string) error {
	if m.NumNodes < 0 || m.NumNodes > MaxNodes {
		return formatErr(path, -1, "num_nodes %d out of range [0, %d]", m.NumNodes, int64(MaxNodes))
	}
	if m.NumEdges < 0 || m.NumEdges > math.MaxInt64/8 {
		return formatErr(path, -1, "num_edges %d out of range", m.NumEdges)
	}
	if m.FeatDim < 0 || (m.NumNodes > 0 && m.FeatDim > math.MaxInt64/8/m.NumNodes) {
		return formatErr(path, -1, "feat_dim %d out of range", m.FeatDim)
	}
	if m.NumClasses < 0 || m.NumClasses > math.MaxInt32 {
		return formatErr(path, -1, "num_classes %d out of range", m.NumClasses)
	}
	seen := map[string]bool{}
	for i := range m.Arrays {
		a := &m.Arrays[i]
		dt, ok := arrayDType[a.Name]
		if !ok {
			return formatErr(path, -1, "unknown array %q", truncate(a.Name, 32))
		}
		if seen[a.Name] {
			return formatErr(path, -1, "array %q listed twice", a.Name)
		}
		seen[a.Name] = true
		var want []int64 // nil for a split
		switch a.Name {
		case ArrIndptr:
			want = []int64{m.NumNodes + 1}
		case ArrIndices, ArrWeights:
			want = []int64{m.NumEdges}
		case ArrFeatures:
			want = []int64{m.NumNodes, m.FeatDim}
		case ArrLabels:
			want = []int64{m.NumNodes}
		}
		if err := checkArrayMeta(path, a, dt, want, m.NumNodes, "num_nodes"); err != nil {
			return err
		}
	}
	for _, req := range []string{ArrIndptr, ArrIndices} {
		if !seen[req] {
			return formatErr(path, -1, "required array %q missing", req)
		}
	}
	if (m.FeatDim > 0) != seen[ArrFeatures] {
		return formatErr(path, -1, "feat_dim %d but features array present=%v", m.FeatDim, seen[ArrFeatures])
	}
	if (m.NumClasses > 0) != seen[ArrLabels] {
		return formatErr(path, -1, "num_classes %d but labels array present=%v", m.NumClasses, seen[ArrLabels])
	}
	for _, s := range []string{ArrTrain, ArrVal, ArrTest} {
		if seen[s] && !seen[ArrLabels] {
			return formatErr(path, -1, "split %q present without labels", s)
		}
	}
	return nil
}

// checkArrayMeta checks one array's manifest entry against what the
// counts say it must be: dtype dt and shape want, or for a split (want
// nil) shape [k] with 0 <= k <= maxSplit (splitBound names that bound);
// the byte length that shape needs, and its block checksums' layout.
func checkArrayMeta(path string, a *ArrayMeta, dt DType, want []int64, maxSplit int64, splitBound string) error {
	if a.DType != dt {
		return formatErr(path, -1, "array %q has dtype %q, want %q", a.Name, truncate(string(a.DType), 16), dt)
	}
	if want == nil {
		if len(a.Shape) != 1 || a.Shape[0] < 0 || a.Shape[0] > maxSplit {
			return formatErr(path, -1, "array %q has shape %v, want [k] with 0 <= k <= %s", a.Name, a.Shape, splitBound)
		}
		want = []int64{a.Shape[0]}
	}
	if !equalShape(a.Shape, want) {
		return formatErr(path, -1, "array %q has shape %v, want %v", a.Name, a.Shape, want)
	}
	n := int64(1)
	for _, d := range want {
		n *= d
	}
	if a.Bytes != n*dt.Size() {
		return formatErr(path, -1, "array %q declares %d bytes, shape %v needs %d", a.Name, a.Bytes, want, n*dt.Size())
	}
	if a.BlockBytes < minReadBlock || a.BlockBytes > maxReadBlock || a.BlockBytes&(a.BlockBytes-1) != 0 {
		return formatErr(path, -1, "array %q has block_bytes %d, want a power of two in [%d, %d]", a.Name, a.BlockBytes, minReadBlock, int64(maxReadBlock))
	}
	if nb := numBlocks(a.Bytes, a.BlockBytes); int64(len(a.CRC32C)) != nb {
		return formatErr(path, -1, "array %q lists %d block checksums, want %d", a.Name, len(a.CRC32C), nb)
	}
	for _, c := range a.CRC32C {
		if len(c) != 8 || !isHex(c) {
			return formatErr(path, -1, "array %q has malformed crc32c %q", a.Name, truncate(c, 16))
		}
	}
	return nil
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
