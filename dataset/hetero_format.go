package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/strata-gnn/strata/graph"
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
	path, b, err := readManifestFile(dir)
	if err != nil {
		return 0, err
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

func (m *HeteroManifest) header() (string, int, string, string) {
	return m.Magic, m.Version, m.Checksum, m.ManifestCRC32C
}

func heteroManifestCRC(m *HeteroManifest) (string, error) { return selfCRC(m) }

func (m *HeteroManifest) withoutCRC() any {
	c := *m
	c.ManifestCRC32C = ""
	return &c
}

// ReadHeteroManifest reads and fully checks dir/manifest.json of a typed
// dataset, as ReadManifest does for version 1.
func ReadHeteroManifest(dir string) (*HeteroManifest, error) {
	path, b, err := readManifestFile(dir)
	if err != nil {
		return nil, err
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
	var m HeteroManifest
	reads := fmt.Sprintf("versions %d and %d", FormatVersion, FormatVersionHetero)
	if err := decodeManifest(path, b, &m, FormatVersionHetero, reads); err != nil {
		return nil, err
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
		if err := checkArrayMeta(path, a, sp.dtype, sp.shape, targetNodes, fmt.Sprintf("%d (target nodes)", targetNodes)); err != nil {
			return err
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
			if m.ManifestCRC32C, err = selfCRC(m); err != nil {
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
	phase := opts.phases()
	m, err := ReadHeteroManifest(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(m.Arrays))
	for i := range m.Arrays {
		names[i] = m.Arrays[i].Name // check keeps them in their canonical order
	}
	arrs, err := openArrays(dir, m.Arrays, names, opts, phase)
	if err != nil {
		return nil, err
	}
	defer arrs.unmapUnlessKept()
	h := &Hetero{Name: m.Name, NumClasses: int(m.NumClasses), Target: -1,
		NodeTypes: make([]NodeType, len(m.NodeTypes)), EdgeTypes: make([]EdgeType, len(m.EdgeTypes))}
	index := make(map[string]int, len(m.NodeTypes))
	for t, nt := range m.NodeTypes {
		index[nt.Name] = t
		h.NodeTypes[t] = NodeType{Name: nt.Name, NumNodes: nt.NumNodes, FeatDim: int(nt.FeatDim),
			Features: typed[float32](arrs.get(nodeArray(t, "features")))}
	}
	for r, et := range m.EdgeTypes {
		s, d := index[et.Src], index[et.Dst]
		h.EdgeTypes[r] = EdgeType{Src: s, Dst: d, Rel: et.Rel, In: &graph.CSR{
			NumRows: m.NodeTypes[d].NumNodes, NumCols: m.NodeTypes[s].NumNodes,
			Indptr:  typed[int64](arrs.get(edgeArray(r, "indptr"))),
			Indices: typed[int32](arrs.get(edgeArray(r, "indices"))),
			Weights: typed[float32](arrs.get(edgeArray(r, "weights"))),
		}}
	}
	if m.NumClasses > 0 {
		h.Target = index[m.Target]
		h.Labels = typed[int32](arrs.get(ArrLabels))
		h.Train, h.Val, h.Test = typed[int32](arrs.get(ArrTrain)), typed[int32](arrs.get(ArrVal)), typed[int32](arrs.get(ArrTest))
	}
	if err := validateHetero(h, arrs.path); err != nil {
		return nil, err
	}
	phase("validate")
	h.release, _ = arrs.keep()
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
	st, err := statArrays(dir, m.Arrays)
	if err != nil {
		return nil, err
	}
	return &HeteroSummary{Dir: dir, Manifest: m, NumTrain: st.train, NumVal: st.val, NumTest: st.test, TotalBytes: st.total}, nil
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
