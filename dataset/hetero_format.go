package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/excerpt"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/internal/regfile"
)

// FormatVersionHetero is the format version of typed (heterogeneous)
// datasets: node types, edge types, per-type features, labels on one
// target type. Version 1 (FormatVersion) stays the homogeneous format.
const FormatVersionHetero = 2

// ErrHeterogeneous is returned (wrapped) by ReadManifest, Open and Info
// for a typed dataset (format version 2), which OpenHetero reads.
var ErrHeterogeneous = errors.New("typed dataset (format version 2)")

// ErrHomogeneous is returned (wrapped) by OpenHetero and HeteroInfo for a
// version 1 dataset, which Open reads.
var ErrHomogeneous = errors.New("homogeneous dataset (format version 1)")

// peekVersion returns the magic and version a manifest declares, reading
// nothing else; ok is false when b is not a JSON object with them.
func peekVersion(b []byte) (magic string, version int, ok bool) {
	var p struct {
		Magic   string `json:"magic"`
		Version int    `json:"version"`
	}
	if json.Unmarshal(b, &p) != nil {
		return "", 0, false
	}
	return p.Magic, p.Version, true
}

// heteroVersionErr is ParseManifest's answer to a version 2 manifest.
func heteroVersionErr(path string) error {
	return fmt.Errorf("dataset: %s: %w: open it with OpenHetero (strata train --model rgcn or hsage)", path, ErrHeterogeneous)
}

// ManifestVersion returns the format version dir/manifest.json declares
// (after checking its size bound and magic), without checking the rest:
// enough to pick Open (1) or OpenHetero (2).
func ManifestVersion(dir string) (int, error) {
	path := filepath.Join(dir, ManifestFile)
	b, err := regfile.ReadFile(path, maxManifestBytes)
	var tl *regfile.TooLargeError
	if errors.As(err, &tl) {
		return 0, formatErr(path, -1, "manifest larger than %d bytes", maxManifestBytes)
	}
	if err != nil {
		return 0, fmt.Errorf("dataset: %w", err)
	}
	magic, v, ok := peekVersion(b)
	if !ok {
		return 0, formatErr(path, -1, "manifest is not a JSON object with a version")
	}
	if magic != Magic {
		return 0, formatErr(path, -1, "bad magic %q (want %q)", truncate(magic, 32), Magic)
	}
	return v, nil
}

// HeteroManifest is the manifest.json of a typed dataset (version 2).
type HeteroManifest struct {
	Magic     string         `json:"magic"`
	Version   int            `json:"version"`
	Name      string         `json:"name"`
	NodeTypes []NodeTypeMeta `json:"node_types"`
	EdgeTypes []EdgeTypeMeta `json:"edge_types"`
	// Target names the labeled node type ("" without labels).
	Target     string      `json:"target"`
	NumClasses int64       `json:"num_classes"`
	Checksum   string      `json:"checksum"`
	Arrays     []ArrayMeta `json:"arrays"`
	// ManifestCRC32C is the CRC-32C of the compact JSON encoding of this
	// manifest with ManifestCRC32C set to "", as in version 1.
	ManifestCRC32C string `json:"manifest_crc32c"`
}

// NodeTypeMeta describes one node type in a HeteroManifest.
type NodeTypeMeta struct {
	Name     string `json:"name"`
	NumNodes int64  `json:"num_nodes"`
	FeatDim  int64  `json:"feat_dim"`
}

// EdgeTypeMeta describes one relation in a HeteroManifest.
type EdgeTypeMeta struct {
	Src      string `json:"src"`
	Rel      string `json:"rel"`
	Dst      string `json:"dst"`
	NumEdges int64  `json:"num_edges"`
}

// Array returns the metadata of the named array, or nil.
func (m *HeteroManifest) Array(name string) *ArrayMeta {
	for i := range m.Arrays {
		if m.Arrays[i].Name == name {
			return &m.Arrays[i]
		}
	}
	return nil
}

func heteroManifestCRC(m *HeteroManifest) (string, error) {
	c := *m
	c.ManifestCRC32C = ""
	b, err := json.Marshal(&c)
	if err != nil {
		return "", err
	}
	return crcHex(crc32c(b)), nil
}

// ReadHeteroManifest reads and fully checks dir/manifest.json of a typed
// dataset, as ReadManifest does for version 1.
func ReadHeteroManifest(dir string) (*HeteroManifest, error) {
	path := filepath.Join(dir, ManifestFile)
	b, err := regfile.ReadFile(path, maxManifestBytes)
	var tl *regfile.TooLargeError
	if errors.As(err, &tl) {
		return nil, formatErr(path, -1, "manifest larger than %d bytes", maxManifestBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	return ParseHeteroManifest(path, b)
}

// ParseHeteroManifest decodes and checks a version 2 manifest: magic,
// version, self-checksum, type names and counts, and every array's dtype,
// shape, size and block checksums against them; path is used in errors.
func ParseHeteroManifest(path string, b []byte) (*HeteroManifest, error) {
	if _, v, ok := peekVersion(b); ok && v == FormatVersion {
		return nil, fmt.Errorf("dataset: %s: %w: open it with Open", path, ErrHomogeneous)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m HeteroManifest
	if err := dec.Decode(&m); err != nil {
		off, msg := excerpt.JSON(err, int64(len(b)))
		return nil, &FormatError{Path: path, Off: off, Msg: "bad manifest: " + msg}
	}
	if dec.More() {
		return nil, formatErr(path, dec.InputOffset(), "trailing data after manifest")
	}
	if m.Magic != Magic {
		return nil, formatErr(path, -1, "bad magic %q (want %q)", truncate(m.Magic, 32), Magic)
	}
	if m.Version != FormatVersionHetero {
		return nil, &FormatError{Path: path, Off: -1, Err: ErrUnsupportedVersion,
			Msg: fmt.Sprintf("unsupported format version %d (this build reads versions %d and %d)", m.Version, FormatVersion, FormatVersionHetero)}
	}
	want, err := heteroManifestCRC(&m)
	if err != nil {
		return nil, formatErr(path, -1, "re-encoding manifest: %v", err)
	}
	if m.ManifestCRC32C != want {
		return nil, formatErr(path, -1, "manifest checksum mismatch: stored %q, computed %q", truncate(m.ManifestCRC32C, 16), want)
	}
	if err := m.check(path); err != nil {
		return nil, err
	}
	return &m, nil
}

// arraySpec is what the counts say an array of a typed dataset must be.
type arraySpec struct {
	rank     int // canonical position: node arrays, edge arrays, labels, splits
	dtype    DType
	shape    []int64 // nil for splits ([k], 0 <= k <= target nodes)
	required bool
}

// heteroSpecs lists every array a typed dataset with these counts may
// hold, by name; the order of rank is the order arrays are listed and
// written in.
func heteroSpecs(nodes []NodeTypeMeta, edges []EdgeTypeMeta, numDst []int64, classes, targetNodes int64) map[string]arraySpec {
	specs := make(map[string]arraySpec, len(nodes)+3*len(edges)+4)
	rank := 0
	add := func(name string, dt DType, shape []int64, req bool) {
		specs[name] = arraySpec{rank: rank, dtype: dt, shape: shape, required: req}
		rank++
	}
	for t, nt := range nodes {
		add(nodeArray(t, "features"), Float32, []int64{nt.NumNodes, nt.FeatDim}, nt.FeatDim > 0)
	}
	for r, et := range edges {
		add(edgeArray(r, "indptr"), Int64, []int64{numDst[r] + 1}, true)
		add(edgeArray(r, "indices"), Int32, []int64{et.NumEdges}, true)
		add(edgeArray(r, "weights"), Float32, []int64{et.NumEdges}, false)
	}
	if classes > 0 {
		add(ArrLabels, Int32, []int64{targetNodes}, true)
		for _, s := range []string{ArrTrain, ArrVal, ArrTest} {
			add(s, Int32, nil, false)
		}
	}
	return specs
}

// check verifies the counts and every array against them.
func (m *HeteroManifest) check(path string) error {
	if m.Checksum != ChecksumAlgo {
		return formatErr(path, -1, "unknown checksum algorithm %q (want %q)", truncate(m.Checksum, 32), ChecksumAlgo)
	}
	if len(m.NodeTypes) == 0 || len(m.NodeTypes) > MaxNodeTypes {
		return formatErr(path, -1, "%d node types, want 1 to %d", len(m.NodeTypes), MaxNodeTypes)
	}
	if len(m.EdgeTypes) > MaxEdgeTypes {
		return formatErr(path, -1, "%d edge types, want at most %d", len(m.EdgeTypes), MaxEdgeTypes)
	}
	index := make(map[string]int, len(m.NodeTypes))
	var total int64
	for t, nt := range m.NodeTypes {
		if msg := CheckTypeName(nt.Name); msg != "" {
			return formatErr(path, -1, "node type %d: %s", t, msg)
		}
		if _, dup := index[nt.Name]; dup {
			return formatErr(path, -1, "node type %q listed twice", nt.Name)
		}
		index[nt.Name] = t
		if nt.NumNodes < 0 || nt.NumNodes > MaxNodes-total {
			return formatErr(path, -1, "node type %q: num_nodes %d out of range (the types' total must stay in [0, %d])", nt.Name, nt.NumNodes, int64(MaxNodes))
		}
		total += nt.NumNodes
		if nt.FeatDim < 0 || nt.FeatDim > math.MaxInt32 || (nt.NumNodes > 0 && nt.FeatDim > math.MaxInt64/8/nt.NumNodes) {
			return formatErr(path, -1, "node type %q: feat_dim %d out of range", nt.Name, nt.FeatDim)
		}
	}
	numDst := make([]int64, len(m.EdgeTypes))
	seen := map[string]bool{}
	for r, et := range m.EdgeTypes {
		_, okS := index[et.Src]
		d, okD := index[et.Dst]
		if !okS || !okD {
			return formatErr(path, -1, "edge type %d (%q, %q, %q): source and destination must be node types", r, truncate(et.Src, 32), truncate(et.Rel, 32), truncate(et.Dst, 32))
		}
		if msg := CheckTypeName(et.Rel); msg != "" {
			return formatErr(path, -1, "edge type %d: relation %s", r, msg)
		}
		full := et.Src + RelSep + et.Rel + RelSep + et.Dst
		if seen[full] {
			return formatErr(path, -1, "edge type %s listed twice", full)
		}
		seen[full] = true
		if et.NumEdges < 0 || et.NumEdges > math.MaxInt64/8 {
			return formatErr(path, -1, "edge type %s: num_edges %d out of range", full, et.NumEdges)
		}
		numDst[r] = m.NodeTypes[d].NumNodes
	}
	if m.NumClasses < 0 || m.NumClasses > math.MaxInt32 {
		return formatErr(path, -1, "num_classes %d out of range", m.NumClasses)
	}
	var targetNodes int64
	if m.NumClasses > 0 {
		t, ok := index[m.Target]
		if !ok {
			return formatErr(path, -1, "target %q is not a node type", truncate(m.Target, 32))
		}
		targetNodes = m.NodeTypes[t].NumNodes
	} else if m.Target != "" {
		return formatErr(path, -1, "target %q but no labels (num_classes 0)", truncate(m.Target, 32))
	}
	specs := heteroSpecs(m.NodeTypes, m.EdgeTypes, numDst, m.NumClasses, targetNodes)
	prev := -1
	present := make(map[string]bool, len(m.Arrays))
	for i := range m.Arrays {
		a := &m.Arrays[i]
		sp, ok := specs[a.Name]
		if !ok {
			return formatErr(path, -1, "unknown array %q", truncate(a.Name, 32))
		}
		if present[a.Name] {
			return formatErr(path, -1, "array %q listed twice", a.Name)
		}
		if sp.rank < prev {
			return formatErr(path, -1, "array %q listed out of order", a.Name)
		}
		prev = sp.rank
		present[a.Name] = true
		if a.DType != sp.dtype {
			return formatErr(path, -1, "array %q has dtype %q, want %q", a.Name, truncate(string(a.DType), 16), sp.dtype)
		}
		want := sp.shape
		if want == nil { // a split
			if len(a.Shape) != 1 || a.Shape[0] < 0 || a.Shape[0] > targetNodes {
				return formatErr(path, -1, "array %q has shape %v, want [k] with 0 <= k <= %d (target nodes)", a.Name, a.Shape, targetNodes)
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
		if a.Bytes != n*sp.dtype.Size() {
			return formatErr(path, -1, "array %q declares %d bytes, shape %v needs %d", a.Name, a.Bytes, want, n*sp.dtype.Size())
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
	}
	for name, sp := range specs {
		if sp.required && !present[name] {
			return formatErr(path, -1, "required array %q missing", name)
		}
	}
	return nil
}

// heteroOutArrays lists the arrays of h a writer stores, in manifest order.
func heteroOutArrays(h *Hetero) []outArray {
	var arrs []outArray
	for t, nt := range h.NodeTypes {
		if nt.Features != nil {
			arrs = append(arrs, makeOut(nodeArray(t, "features"), nt.Features, nt.NumNodes, int64(nt.FeatDim)))
		}
	}
	for r, et := range h.EdgeTypes {
		g := et.In
		e := int64(len(g.Indices))
		arrs = append(arrs, makeOut(edgeArray(r, "indptr"), g.Indptr, g.NumRows+1), makeOut(edgeArray(r, "indices"), g.Indices, e))
		if g.Weights != nil {
			arrs = append(arrs, makeOut(edgeArray(r, "weights"), g.Weights, e))
		}
	}
	if h.Labels != nil {
		arrs = append(arrs, makeOut(ArrLabels, h.Labels, int64(len(h.Labels))))
		for _, s := range []struct {
			name string
			ids  []int32
		}{{ArrTrain, h.Train}, {ArrVal, h.Val}, {ArrTest, h.Test}} {
			if s.ids != nil {
				arrs = append(arrs, makeOut(s.name, s.ids, int64(len(s.ids))))
			}
		}
	}
	return arrs
}

// heteroManifest is the manifest of h without its arrays.
func heteroManifest(h *Hetero) *HeteroManifest {
	m := &HeteroManifest{Magic: Magic, Version: FormatVersionHetero, Name: h.Name,
		NumClasses: int64(h.NumClasses), Checksum: ChecksumAlgo,
		NodeTypes: make([]NodeTypeMeta, len(h.NodeTypes)), EdgeTypes: make([]EdgeTypeMeta, len(h.EdgeTypes))}
	for t, nt := range h.NodeTypes {
		m.NodeTypes[t] = NodeTypeMeta{Name: nt.Name, NumNodes: nt.NumNodes, FeatDim: int64(nt.FeatDim)}
	}
	for r, et := range h.EdgeTypes {
		m.EdgeTypes[r] = EdgeTypeMeta{Src: h.NodeTypes[et.Src].Name, Rel: et.Rel, Dst: h.NodeTypes[et.Dst].Name, NumEdges: et.In.NumEdges()}
	}
	if h.Labels != nil {
		m.Target = h.NodeTypes[h.Target].Name
	}
	return m
}

// WriteHetero stores h as a typed dataset directory (format version 2) at
// dir, atomically and with the same guarantees as Write: validated first,
// arrays checksummed and fsynced in a temporary sibling directory, the
// manifest last, then renamed to dir.
func WriteHetero(dir string, h *Hetero, opts WriteOptions) error {
	if err := ValidateHetero(h); err != nil {
		return fmt.Errorf("dataset: refusing to write invalid typed dataset: %w", err)
	}
	m := heteroManifest(h)
	arrs := heteroOutArrays(h)
	return writeDir(dir, arrs, opts,
		func(arrays []ArrayMeta) ([]byte, error) {
			m.Arrays = arrays
			var err error
			if m.ManifestCRC32C, err = heteroManifestCRC(m); err != nil {
				return nil, err
			}
			return json.MarshalIndent(m, "", "  ")
		})
}

// OpenHetero reads the typed dataset directory dir, with Open's checks
// and options: the manifest (ParseHeteroManifest), every array file's
// size before anything is mapped, every block checksum (unless
// SkipChecksums), and the structure (ValidateHetero), errors naming the
// file and byte offset. The arrays are read-only memory mappings unless
// NoMmap; Close releases them.
func OpenHetero(dir string, opts OpenOptions) (*Hetero, error) {
	m, err := ReadHeteroManifest(dir)
	if err != nil {
		return nil, err
	}
	arrs := make(map[string]*loaded, len(m.Arrays))
	ordered := make([]*loaded, 0, len(m.Arrays))
	ok := false
	defer func() {
		if !ok {
			for _, a := range arrs {
				if a.mapped {
					munmap(a.data)
				}
			}
		}
	}()
	var total int64
	for i := range m.Arrays {
		a := &m.Arrays[i]
		l, err := loadArray(filepath.Join(dir, ArrayFile(a.Name)), a, !opts.NoMmap)
		if err != nil {
			return nil, err
		}
		arrs[a.Name] = l
		ordered = append(ordered, l)
		total += a.Bytes
	}
	if !opts.SkipChecksums {
		var bar *progress.Bar
		if !opts.Quiet && total >= progressMin {
			bar = progress.New(total, "verifying "+filepath.Base(dir))
		}
		err := verifyChecksums(ordered, bar)
		bar.Finish()
		if err != nil {
			return nil, err
		}
	}
	h := &Hetero{Name: m.Name, NumClasses: int(m.NumClasses), Target: -1,
		NodeTypes: make([]NodeType, len(m.NodeTypes)), EdgeTypes: make([]EdgeType, len(m.EdgeTypes))}
	index := make(map[string]int, len(m.NodeTypes))
	for t, nt := range m.NodeTypes {
		index[nt.Name] = t
		h.NodeTypes[t] = NodeType{Name: nt.Name, NumNodes: nt.NumNodes, FeatDim: int(nt.FeatDim),
			Features: typed[float32](arrs[nodeArray(t, "features")])}
	}
	for r, et := range m.EdgeTypes {
		s, d := index[et.Src], index[et.Dst]
		h.EdgeTypes[r] = EdgeType{Src: s, Dst: d, Rel: et.Rel, In: &graph.CSR{
			NumRows: m.NodeTypes[d].NumNodes, NumCols: m.NodeTypes[s].NumNodes,
			Indptr:  typed[int64](arrs[edgeArray(r, "indptr")]),
			Indices: typed[int32](arrs[edgeArray(r, "indices")]),
			Weights: typed[float32](arrs[edgeArray(r, "weights")]),
		}}
	}
	if m.NumClasses > 0 {
		h.Target = index[m.Target]
		h.Labels = typed[int32](arrs[ArrLabels])
		h.Train, h.Val, h.Test = typed[int32](arrs[ArrTrain]), typed[int32](arrs[ArrVal]), typed[int32](arrs[ArrTest])
	}
	if err := validateHetero(h, func(name string) string { return filepath.Join(dir, ArrayFile(name)) }); err != nil {
		return nil, err
	}
	var maps [][]byte
	for _, l := range arrs {
		if l.mapped {
			maps = append(maps, l.data)
		}
	}
	if len(maps) > 0 {
		h.release = func() error {
			var first error
			for _, b := range maps {
				if err := munmap(b); err != nil && first == nil {
					first = fmt.Errorf("dataset: munmap: %w", err)
				}
			}
			return first
		}
	}
	ok = true
	return h, nil
}

// HeteroSummary describes a typed dataset directory without loading its
// arrays (strata info).
type HeteroSummary struct {
	Dir        string
	Manifest   *HeteroManifest
	NumTrain   int64
	NumVal     int64
	NumTest    int64
	TotalBytes int64
}

// HeteroInfo reads dir's manifest and checks that every array file exists
// with the declared size; it reads no array data (use OpenHetero for that).
func HeteroInfo(dir string) (*HeteroSummary, error) {
	m, err := ReadHeteroManifest(dir)
	if err != nil {
		return nil, err
	}
	s := &HeteroSummary{Dir: dir, Manifest: m}
	for _, a := range m.Arrays {
		path := filepath.Join(dir, ArrayFile(a.Name))
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("dataset: %w", err)
		}
		if fi.Size() != a.Bytes {
			return nil, formatErr(path, min(fi.Size(), a.Bytes), "file has %d bytes, manifest declares %d", fi.Size(), a.Bytes)
		}
		s.TotalBytes += a.Bytes
		switch a.Name {
		case ArrTrain:
			s.NumTrain = a.Shape[0]
		case ArrVal:
			s.NumVal = a.Shape[0]
		case ArrTest:
			s.NumTest = a.Shape[0]
		}
	}
	return s, nil
}

// String formats the summary for humans (strata info).
func (s *HeteroSummary) String() string {
	m := s.Manifest
	var b strings.Builder
	var nodes, edges int64
	for _, nt := range m.NodeTypes {
		nodes += nt.NumNodes
	}
	for _, et := range m.EdgeTypes {
		edges += et.NumEdges
	}
	fmt.Fprintf(&b, "dataset     %s (%s, format v%d, typed)\n", m.Name, s.Dir, m.Version)
	fmt.Fprintf(&b, "nodes       %d in %d types\n", nodes, len(m.NodeTypes))
	for _, nt := range m.NodeTypes {
		mark := ""
		if nt.Name == m.Target {
			mark = "  (target)"
		}
		fmt.Fprintf(&b, "  %-20s %d nodes, %d features%s\n", nt.Name, nt.NumNodes, nt.FeatDim, mark)
	}
	fmt.Fprintf(&b, "edges       %d in %d types\n", edges, len(m.EdgeTypes))
	for r, et := range m.EdgeTypes {
		w := ""
		if m.Array(edgeArray(r, "weights")) != nil {
			w = ", weighted"
		}
		fmt.Fprintf(&b, "  %-40s %d%s\n", et.Src+RelSep+et.Rel+RelSep+et.Dst, et.NumEdges, w)
	}
	fmt.Fprintf(&b, "classes     %d\n", m.NumClasses)
	fmt.Fprintf(&b, "split       train %d / val %d / test %d\n", s.NumTrain, s.NumVal, s.NumTest)
	fmt.Fprintf(&b, "size        %d bytes\n", s.TotalBytes)
	return b.String()
}
