package dataset

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"strings"
	"unsafe"

	"github.com/strata-gnn/strata/graph"
)

// FingerprintVersion is the version of the fingerprint definition; it is
// part of every fingerprint ("v1:..."), so a later definition can never be
// mistaken for this one.
const FingerprintVersion = 1

// Fingerprint identifies the content of the dataset described by m: the
// counts, the direction flag and every array's dtype, shape, size and block
// checksums (the name is left out: renaming a dataset does not change it).
// It reads nothing but the manifest. See Dataset.Fingerprint and
// docs/dataset-format.md.
func (m *Manifest) Fingerprint() string {
	byName := make(map[string]*ArrayMeta, len(m.Arrays))
	for i := range m.Arrays {
		byName[m.Arrays[i].Name] = &m.Arrays[i]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "strata-dataset-fingerprint %d\nnum_nodes %d\nnum_edges %d\ndirected %t\nfeat_dim %d\nnum_classes %d\n",
		FingerprintVersion, m.NumNodes, m.NumEdges, m.Directed, m.FeatDim, m.NumClasses)
	for _, name := range arrayOrder {
		a := byName[name]
		if a == nil {
			continue
		}
		fmt.Fprintf(&b, "array %s %s %v %d %d %s\n", a.Name, a.DType, a.Shape, a.Bytes, a.BlockBytes, strings.Join(a.CRC32C, ","))
	}
	sum := sha256.Sum256([]byte(b.String()))
	return fmt.Sprintf("v%d:%s", FingerprintVersion, hex.EncodeToString(sum[:16]))
}

// Fingerprint identifies the dataset's content (see
// Manifest.Fingerprint): two datasets with the same fingerprint have the
// same graph, direction, features, labels and splits. Partition files
// record it so a partition is never applied to another dataset of the same
// size.
//
// For a dataset returned by Open it is computed from the manifest alone
// (no array is read), as long as the dataset's arrays and counts are still
// the ones Open returned. Any other dataset (built-in, imported,
// generated, or an opened one whose fields were replaced) is hashed from
// its arrays: the block checksums a writer would store, so Write followed
// by Open gives the same value. Modifying arrays in place after Open (only
// possible with NoMmap) is not detected. A nil dataset or graph gives "".
func (d *Dataset) Fingerprint() string {
	if d == nil || d.Graph == nil {
		return ""
	}
	if d.opened.fp != "" && d.opened.id == d.identity() {
		return d.opened.fp
	}
	return d.inMemoryManifest().Fingerprint()
}

// openedFP is the manifest fingerprint of a dataset returned by Open, with
// the identity of what Open returned; readOnly says every array is a
// read-only mapping (nobody can change its contents).
type openedFP struct {
	fp       string
	id       identity
	readOnly bool
}

// Validated reports whether d is exactly what Open returned after
// validating it (the same arrays and counts) and its arrays are read-only
// mappings, so that Validate would pass without being run again: trainers
// skip their own pass over the edges then. False for any other dataset.
func (d *Dataset) Validated() bool {
	return d != nil && d.Graph != nil && d.opened.readOnly && d.opened.id == d.identity()
}

// sliceID identifies a slice by its first element and length.
type sliceID struct {
	p unsafe.Pointer
	n int
}

// identity captures which arrays and counts a Dataset holds.
type identity struct {
	g                   *graph.CSR
	rows, cols          int64
	directed            bool
	featDim, numClasses int
	arrays              [8]sliceID
}

func sid[T any](s []T) sliceID { return sliceID{unsafe.Pointer(unsafe.SliceData(s)), len(s)} }

func (d *Dataset) identity() identity {
	g := d.Graph
	return identity{
		g: g, rows: g.NumRows, cols: g.NumCols, directed: d.Directed, featDim: d.FeatDim, numClasses: d.NumClasses,
		arrays: [8]sliceID{sid(g.Indptr), sid(g.Indices), sid(g.Weights), sid(d.Features), sid(d.Labels),
			sid(d.Train), sid(d.Val), sid(d.Test)},
	}
}

// inMemoryManifest builds the manifest Write would store for d (block
// checksums included), without writing anything.
func (d *Dataset) inMemoryManifest() *Manifest {
	n := d.Graph.NumRows
	m := &Manifest{
		Magic: Magic, Version: FormatVersion, Name: d.Name,
		NumNodes: n, NumEdges: int64(len(d.Graph.Indices)), Directed: d.Directed,
		FeatDim: int64(d.FeatDim), NumClasses: int64(d.NumClasses), Checksum: ChecksumAlgo,
	}
	for _, a := range outArrays(d) {
		block := blockSizeFor(int64(len(a.data)))
		m.Arrays = append(m.Arrays, ArrayMeta{Name: a.name, DType: arrayDType[a.name], Shape: a.shape,
			Bytes: int64(len(a.data)), BlockBytes: block, CRC32C: blockCRCs(a, int(block))})
	}
	return m
}

// blockCRCs returns the CRC-32C of every block of a's file bytes.
func blockCRCs(a outArray, block int) []string {
	var buf []byte
	if a.conv != nil {
		buf = make([]byte, min(block, len(a.data)))
	}
	crcs := make([]string, 0, numBlocks(int64(len(a.data)), int64(block)))
	for off := 0; off < len(a.data); off += block {
		chunk := a.data[off:min(off+block, len(a.data))]
		if a.conv != nil {
			chunk = buf[:len(chunk)]
			a.conv(chunk, off/a.esize, len(chunk)/a.esize)
		}
		crcs = append(crcs, crcHex(crc32.Checksum(chunk, castagnoli)))
	}
	return crcs
}
