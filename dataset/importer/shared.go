package importer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/excerpt"
	"github.com/strata-gnn/strata/internal/regfile"
)

// sharedMeta is the part of a shared dataset's meta.json the importer uses.
type sharedMeta struct {
	Name       string `json:"name"`
	NumNodes   int64  `json:"num_nodes"`
	NumEdges   int64  `json:"num_edges"`
	FeatDim    int64  `json:"feat_dim"`
	NumClasses int64  `json:"num_classes"`
	Directed   bool   `json:"directed"`
	Files      map[string]struct {
		Bytes  int64  `json:"bytes"`
		SHA256 string `json:"sha256"`
	} `json:"files"`
}

const maxMetaBytes = 1 << 20

func readSharedMeta(dir string) (*sharedMeta, error) {
	path := filepath.Join(dir, "meta.json")
	b, err := readBounded(path, maxMetaBytes)
	if err != nil {
		return nil, err
	}
	var m sharedMeta
	if err := json.Unmarshal(b, &m); err != nil {
		off, msg := excerpt.JSON(err, int64(len(b)))
		return nil, &ParseError{Path: path, Off: off, Msg: "bad meta.json: " + msg}
	}
	switch {
	case m.NumNodes < 0 || m.NumNodes > dataset.MaxNodes:
		return nil, fileErr(path, "num_nodes %d out of range", m.NumNodes)
	case m.NumEdges < 0 || m.NumEdges > math.MaxInt64/16:
		return nil, fileErr(path, "num_edges %d out of range", m.NumEdges)
	case m.FeatDim < 0 || (m.NumNodes > 0 && m.FeatDim > math.MaxInt64/8/m.NumNodes):
		return nil, fileErr(path, "feat_dim %d out of range", m.FeatDim)
	case m.NumClasses < 0 || m.NumClasses > math.MaxInt32:
		return nil, fileErr(path, "num_classes %d out of range", m.NumClasses)
	}
	return &m, nil
}

func readBounded(path string, limit int64) ([]byte, error) {
	b, err := regfile.ReadFile(path, limit)
	var tl *regfile.TooLargeError
	if errors.As(err, &tl) {
		return nil, fileErr(path, "larger than %d bytes", limit)
	}
	if err != nil {
		return nil, fmt.Errorf("importer: %w", err)
	}
	return b, nil
}

// sharedFile is one array file of a shared dataset, checked against
// meta.json's counts and the file's size before anything is read.
type sharedFile struct {
	name  string // key in meta.json's files, e.g. "labels.bin"
	path  string
	bytes int64 // decompressed size meta.json declares
	sum   []byte
}

// LoadShared reads a dataset in the layout of the shared datasets folder:
// meta.json plus gzip-compressed little-endian arrays (edges.bin.gz,
// features.bin.gz, labels.bin.gz, {train,val,test}.idx.gz and for Geom-GCN
// sets splits/{train,val,test}_K.idx.gz). Each decompressed file must have
// exactly the size the counts imply and the sha256 listed in meta.json.
// opts.Split selects a Geom-GCN split (0 = the top-level files).
//
// meta.json must agree with its file list: labels.bin listed iff
// num_classes > 0, features.bin iff feat_dim > 0, split files only with
// labels (nothing listed is dropped silently). Every file to be read is
// checked against the counts and against its actual size before anything
// is allocated.
func LoadShared(dir string, opts Options) (*dataset.Dataset, error) {
	m, err := readSharedMeta(dir)
	if err != nil {
		return nil, err
	}
	metaPath := filepath.Join(dir, "meta.json")
	n := m.NumNodes
	_, hasLabels := m.Files["labels.bin"]
	_, hasFeats := m.Files["features.bin"]
	switch {
	case hasLabels && m.NumClasses == 0:
		return nil, fileErr(metaPath, "lists labels.bin but num_classes is 0: num_classes must cover the labels")
	case !hasLabels && m.NumClasses > 0:
		return nil, fileErr(metaPath, "num_classes is %d but no labels.bin is listed", m.NumClasses)
	case hasFeats && m.FeatDim == 0:
		return nil, fileErr(metaPath, "lists features.bin but feat_dim is 0")
	case !hasFeats && m.FeatDim > 0:
		return nil, fileErr(metaPath, "feat_dim is %d but no features.bin is listed", m.FeatDim)
	}
	names := [3]string{"train.idx", "val.idx", "test.idx"}
	if opts.Split != 0 {
		if opts.Split < 0 || opts.Split > 99 {
			return nil, fmt.Errorf("importer: split %d out of range", opts.Split)
		}
		for i, s := range []string{"train", "val", "test"} {
			names[i] = fmt.Sprintf("splits/%s_%d.idx", s, opts.Split)
		}
		if _, ok := m.Files[names[0]]; !ok {
			return nil, fmt.Errorf("importer: %s has no split %d (no %s in meta.json)", dir, opts.Split, names[0])
		}
	}
	for _, nm := range names {
		if _, ok := m.Files[nm]; ok && !hasLabels {
			return nil, fileErr(metaPath, "lists %s but no labels.bin: a split needs labels", nm)
		}
	}

	// Check every file against the counts and its size first.
	var edgesF, featsF, labelsF *sharedFile
	var splitF [3]*sharedFile
	if edgesF, err = checkSharedFile(dir, "edges.bin", m, 2*m.NumEdges, false); err != nil {
		return nil, err
	}
	if hasFeats {
		if featsF, err = checkSharedFile(dir, "features.bin", m, n*m.FeatDim, false); err != nil {
			return nil, err
		}
	}
	if hasLabels {
		if labelsF, err = checkSharedFile(dir, "labels.bin", m, n, false); err != nil {
			return nil, err
		}
		for i, nm := range names {
			if _, ok := m.Files[nm]; ok {
				if splitF[i], err = checkSharedFile(dir, nm, m, n, true); err != nil {
					return nil, err
				}
			}
		}
	}
	// A per-node file of the right size vouches for num_nodes; otherwise
	// the edges must (see boundNodes).
	if featsF == nil && labelsF == nil {
		if err := boundNodes(metaPath, n, m.NumEdges); err != nil {
			return nil, err
		}
	}
	if opts.limitNodes > 0 && n > opts.limitNodes {
		return nil, fileErr(metaPath, "num_nodes %d exceeds the limit %d", n, opts.limitNodes)
	}

	name := defaultName(dir, opts)
	d := &dataset.Dataset{Name: name, Directed: m.Directed}
	// Edges: int32 (src, dst) pairs.
	edges, err := readSharedArray[int32](edgesF, opts.Quiet)
	if err != nil {
		return nil, err
	}
	epath := filepath.Join(dir, "edges.bin.gz")
	if err := checkMemory(epath, n, m.NumEdges, opts); err != nil {
		return nil, err
	}
	src := make([]int32, m.NumEdges)
	dst := make([]int32, m.NumEdges)
	for i := int64(0); i < m.NumEdges; i++ {
		s, t := edges[2*i], edges[2*i+1]
		if s < 0 || int64(s) >= n {
			return nil, offErr(edgesF.path, 8*i, "source node %d of edge %d out of range [0, %d)", s, i, n)
		}
		if t < 0 || int64(t) >= n {
			return nil, offErr(edgesF.path, 8*i+4, "destination node %d of edge %d out of range [0, %d)", t, i, n)
		}
		src[i], dst[i] = s, t
	}
	edges = nil
	sym := opts.Symmetrize && m.Directed
	d.Graph = buildCSR(n, src, dst, sym)
	if sym {
		d.Directed = false
	}

	if featsF != nil {
		if d.Features, err = readSharedArray[float32](featsF, opts.Quiet); err != nil {
			return nil, err
		}
		d.FeatDim = int(m.FeatDim)
	}
	if labelsF != nil {
		if d.Labels, err = readSharedArray[int32](labelsF, opts.Quiet); err != nil {
			return nil, err
		}
		d.NumClasses = int(m.NumClasses)
		out := [3]*[]int32{&d.Train, &d.Val, &d.Test}
		for i, sf := range splitF {
			if sf == nil {
				continue
			}
			if *out[i], err = readSharedArray[int32](sf, opts.Quiet); err != nil {
				return nil, err
			}
		}
	}
	if err := dataset.Validate(d); err != nil {
		return nil, fmt.Errorf("importer: %s: %w", dir, err)
	}
	return d, nil
}

// checkSharedFile finds dir/name.gz (or dir/name) and checks meta.json's
// entry for it: exactly want 4-byte elements (at most want when upTo), a
// well-formed sha256, and a file that can hold that much (deflate expands
// at most ~1032:1), so nothing is allocated on the word of meta.json alone.
func checkSharedFile(dir, name string, m *sharedMeta, want int64, upTo bool) (*sharedFile, error) {
	metaPath := filepath.Join(dir, "meta.json")
	fm, ok := m.Files[name]
	if !ok {
		return nil, fileErr(metaPath, "no entry for %s", name)
	}
	// The README promises gzip everywhere, but the Geom-GCN split files
	// ship uncompressed: accept both.
	path, err := findFile(dir, name)
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, fmt.Errorf("importer: %s listed in meta.json but missing in %s (no %s.gz or %s)", name, dir, name, name)
	}
	const es = 4
	if fm.Bytes < 0 || fm.Bytes%es != 0 || (!upTo && fm.Bytes != want*es) || (upTo && fm.Bytes > want*es) {
		return nil, fileErr(path, "meta.json declares %d bytes, counts imply %d", fm.Bytes, want*es)
	}
	sum, err := hex.DecodeString(fm.SHA256)
	if err != nil || len(sum) != sha256.Size {
		return nil, fileErr(metaPath, "bad sha256 for %s", name)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("importer: %w", err)
	}
	if fm.Bytes > maxInflate(path, fi.Size()) {
		if name == "labels.bin" || name == "features.bin" {
			return nil, fileErr(path, "num_nodes %d needs %d bytes, more than a %d-byte file can hold", m.NumNodes, fm.Bytes, fi.Size())
		}
		return nil, fileErr(path, "meta.json declares %d bytes, more than a %d-byte file can hold", fm.Bytes, fi.Size())
	}
	return &sharedFile{name: name, path: path, bytes: fm.Bytes, sum: sum}, nil
}

// readSharedArray reads a checked file, which must decompress to exactly
// the declared size and match its sha256.
func readSharedArray[T int32 | float32](sf *sharedFile, quiet bool) ([]T, error) {
	const es = 4
	in, err := openInput(sf.path, quiet)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	out := make([]T, sf.bytes/es)
	var buf []byte
	if len(out) > 0 {
		buf = unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), len(out)*es)
	}
	h := sha256.New()
	n, err := io.ReadFull(io.TeeReader(in.r, h), buf)
	if err != nil {
		return nil, offErr(sf.path, int64(n), "decompressed data ends after %d bytes, want %d (%v)", n, len(buf), err)
	}
	var one [1]byte
	if k, _ := io.ReadFull(in.r, one[:]); k != 0 {
		return nil, offErr(sf.path, int64(len(buf)), "decompressed data longer than the %d bytes meta.json declares", len(buf))
	}
	if got := h.Sum(nil); !bytes.Equal(got, sf.sum) {
		return nil, fileErr(sf.path, "sha256 of decompressed data is %x, meta.json says %x", got, sf.sum)
	}
	if !hostLE {
		swap4(buf)
	}
	return out, nil
}

// maxInflate bounds the decompressed size of a file of size bytes.
func maxInflate(path string, size int64) int64 {
	if strings.HasSuffix(path, ".gz") {
		return size*1032 + 1<<10
	}
	return size
}
