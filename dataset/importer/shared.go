package importer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/strata-gnn/strata/dataset"
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
		off := int64(-1)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = se.Offset
		}
		return nil, &ParseError{Path: path, Off: off, Msg: "bad meta.json: " + err.Error()}
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
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("importer: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("importer: reading %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fileErr(path, "larger than %d bytes", limit)
	}
	return b, nil
}

// LoadShared reads a dataset in the layout of the shared datasets folder:
// meta.json plus gzip-compressed little-endian arrays (edges.bin.gz,
// features.bin.gz, labels.bin.gz, {train,val,test}.idx.gz and for Geom-GCN
// sets splits/{train,val,test}_K.idx.gz). Each decompressed file must have
// exactly the size the counts imply and the sha256 listed in meta.json.
// opts.Split selects a Geom-GCN split (0 = the top-level files).
func LoadShared(dir string, opts Options) (*dataset.Dataset, error) {
	m, err := readSharedMeta(dir)
	if err != nil {
		return nil, err
	}
	n := m.NumNodes
	name := defaultName(dir, opts)
	d := &dataset.Dataset{Name: name, Directed: m.Directed}
	if err := boundSharedNodes(dir, m); err != nil {
		return nil, err
	}

	// Edges: int32 (src, dst) pairs.
	edges, err := readSharedArray[int32](dir, "edges.bin", m, 2*m.NumEdges, false, opts.Quiet)
	if err != nil {
		return nil, err
	}
	src := make([]int32, m.NumEdges)
	dst := make([]int32, m.NumEdges)
	epath := filepath.Join(dir, "edges.bin.gz")
	for i := int64(0); i < m.NumEdges; i++ {
		s, t := edges[2*i], edges[2*i+1]
		if s < 0 || int64(s) >= n {
			return nil, offErr(epath, 8*i, "source node %d of edge %d out of range [0, %d)", s, i, n)
		}
		if t < 0 || int64(t) >= n {
			return nil, offErr(epath, 8*i+4, "destination node %d of edge %d out of range [0, %d)", t, i, n)
		}
		src[i], dst[i] = s, t
	}
	edges = nil
	sym := opts.Symmetrize && m.Directed
	d.Graph = buildCSR(n, src, dst, sym)
	if sym {
		d.Directed = false
	}

	if m.FeatDim > 0 {
		if d.Features, err = readSharedArray[float32](dir, "features.bin", m, n*m.FeatDim, false, opts.Quiet); err != nil {
			return nil, err
		}
		d.FeatDim = int(m.FeatDim)
	}
	if _, ok := m.Files["labels.bin"]; ok && m.NumClasses > 0 {
		if d.Labels, err = readSharedArray[int32](dir, "labels.bin", m, n, false, opts.Quiet); err != nil {
			return nil, err
		}
		d.NumClasses = int(m.NumClasses)
	}
	if d.Labels != nil {
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
		out := [3]*[]int32{&d.Train, &d.Val, &d.Test}
		for i, nm := range names {
			if _, ok := m.Files[nm]; !ok {
				continue
			}
			ids, err := readSharedArray[int32](dir, nm, m, n, true, opts.Quiet)
			if err != nil {
				return nil, err
			}
			*out[i] = ids
		}
	}
	if err := dataset.Validate(d); err != nil {
		return nil, fmt.Errorf("importer: %s: %w", dir, err)
	}
	return d, nil
}

// readSharedArray reads dir/name.gz (or dir/name), which must decompress to exactly want
// elements (at most want when upTo is set) and match meta.json's sha256.
// Sizes are checked against the counts before allocating.
func readSharedArray[T int32 | float32](dir, name string, m *sharedMeta, want int64, upTo bool, quiet bool) ([]T, error) {
	// The README promises gzip everywhere, but the Geom-GCN split files
	// ship uncompressed: accept both.
	path := findFile(dir, name)
	if path == "" {
		path = filepath.Join(dir, name+".gz")
	}
	fm, ok := m.Files[name]
	if !ok {
		return nil, fileErr(filepath.Join(dir, "meta.json"), "no entry for %s", name)
	}
	const es = 4
	if fm.Bytes < 0 || fm.Bytes%es != 0 || (!upTo && fm.Bytes != want*es) || (upTo && fm.Bytes > want*es) {
		return nil, fileErr(path, "meta.json declares %d bytes, counts imply %d", fm.Bytes, want*es)
	}
	sum, err := hex.DecodeString(fm.SHA256)
	if err != nil || len(sum) != sha256.Size {
		return nil, fileErr(filepath.Join(dir, "meta.json"), "bad sha256 for %s", name)
	}
	// Bound the declared size by the compressed size (deflate expands at
	// most ~1032:1) before allocating.
	if fi, err := os.Stat(path); err == nil && fm.Bytes > maxInflate(path, fi.Size()) {
		return nil, fileErr(path, "meta.json declares %d bytes, more than a %d-byte file can hold", fm.Bytes, fi.Size())
	}
	in, err := openInput(path, quiet)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("importer: %s listed in meta.json but missing: %w", path, err)
		}
		return nil, err
	}
	defer in.Close()
	out := make([]T, fm.Bytes/es)
	var buf []byte
	if len(out) > 0 {
		buf = unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), len(out)*es)
	}
	h := sha256.New()
	n, err := io.ReadFull(io.TeeReader(in.r, h), buf)
	if err != nil {
		return nil, offErr(path, int64(n), "decompressed data ends after %d bytes, want %d (%v)", n, len(buf), err)
	}
	var one [1]byte
	if k, _ := io.ReadFull(in.r, one[:]); k != 0 {
		return nil, offErr(path, int64(len(buf)), "decompressed data longer than the %d bytes meta.json declares", len(buf))
	}
	if got := h.Sum(nil); !bytes.Equal(got, sum) {
		return nil, fileErr(path, "sha256 of decompressed data is %x, meta.json says %s", got, fm.SHA256)
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

// boundSharedNodes checks num_nodes against the files before anything of
// that size is allocated: a per-node file (labels, features) must be able
// to hold it, otherwise the edges must (see boundNodes).
func boundSharedNodes(dir string, m *sharedMeta) error {
	for _, pf := range []struct {
		name  string
		bytes int64
	}{{"labels.bin", 4 * m.NumNodes}, {"features.bin", 4 * m.NumNodes * max(m.FeatDim, 1)}} {
		if _, ok := m.Files[pf.name]; !ok {
			continue
		}
		p := findFile(dir, pf.name)
		if p == "" {
			return fmt.Errorf("importer: %s listed in meta.json but missing in %s", pf.name, dir)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("importer: %w", err)
		}
		if pf.bytes > maxInflate(p, fi.Size()) {
			return fileErr(p, "num_nodes %d needs %d bytes, more than a %d-byte file can hold", m.NumNodes, pf.bytes, fi.Size())
		}
		return nil
	}
	return boundNodes(filepath.Join(dir, "meta.json"), m.NumNodes, m.NumEdges)
}
