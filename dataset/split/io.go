package split

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/importer"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/internal/regfile"
)

// The edge split layout, a directory beside a dataset's arrays (usually
// DATASET/edge_split):
//
//	meta.json   {"format": "strata-edge-split", "version": 1, "directed": false,
//	             "seed": 0, "fractions": [0.85, 0.05, 0.1], "counts": [k0, k1, k2],
//	             "num_nodes": N, "num_edges": E, "graph_crc32c": "8 hex digits"}
//	train.npy   int64 [2, k0]: row 0 sources, row 1 destinations
//	val.npy     int64 [2, k1]
//	test.npy    int64 [2, k2]
const (
	EdgeSplitDir  = "edge_split"
	edgeFormat    = "strata-edge-split"
	edgeVersion   = 1
	maxMetaBytes  = 64 << 10
	metaFile      = "meta.json"
	npyHeaderSize = 128
)

var partFiles = [3]string{"train.npy", "val.npy", "test.npy"}

type meta struct {
	Format    string    `json:"format"`
	Version   int       `json:"version"`
	Directed  bool      `json:"directed"`
	Seed      uint64    `json:"seed"`
	Fractions []float64 `json:"fractions"`
	Counts    []int64   `json:"counts"`
	NumNodes  int64     `json:"num_nodes"`
	NumEdges  int64     `json:"num_edges"`
	GraphCRC  string    `json:"graph_crc32c"`
	// A typed dataset's split names its relation and counts the
	// destination type's nodes (num_nodes: the source type's).
	Relation    string `json:"relation,omitempty"`
	NumDstNodes int64  `json:"num_dst_nodes,omitempty"`
}

// WriteDir writes s as the edge split layout into dir, which must not
// exist yet (the dataset writer's Sidecar hook gives a fresh temporary
// dataset directory; use Replace to update a dataset in place).
func (s *EdgeSplit) WriteDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("split: %w", err)
	}
	for i, name := range partFiles {
		if err := atomicfile.Write(filepath.Join(dir, name), func(w io.Writer) error {
			return writeEdgeNPY(w, s.Src[i], s.Dst[i])
		}, atomicfile.Options{}); err != nil {
			return fmt.Errorf("split: %w", err)
		}
	}
	m := meta{Format: edgeFormat, Version: edgeVersion, Directed: s.Directed, Seed: s.Seed, Fractions: s.Fractions[:],
		NumNodes: s.NumNodes, NumEdges: s.NumEdges, GraphCRC: s.GraphCRC, Relation: s.Relation, NumDstNodes: s.NumDstNodes}
	for i := range 3 {
		m.Counts = append(m.Counts, int64(len(s.Src[i])))
	}
	if err := atomicfile.WriteJSON(filepath.Join(dir, metaFile), m); err != nil {
		return fmt.Errorf("split: %w", err)
	}
	return atomicfile.SyncDir(dir)
}

// Replace writes s as datasetDir/edge_split, replacing an old one
// atomically: the new directory is complete before it is renamed in.
func (s *EdgeSplit) Replace(datasetDir string) error {
	tmp, err := os.MkdirTemp(datasetDir, "."+EdgeSplitDir+".tmp-")
	if err != nil {
		return fmt.Errorf("split: %w", err)
	}
	defer os.RemoveAll(tmp)
	inner := filepath.Join(tmp, EdgeSplitDir)
	if err := s.WriteDir(inner); err != nil {
		return err
	}
	final := filepath.Join(datasetDir, EdgeSplitDir)
	old := tmp + ".old"
	if _, err := os.Stat(final); err == nil {
		if err := os.Rename(final, old); err != nil {
			return fmt.Errorf("split: %w", err)
		}
		defer os.RemoveAll(old)
	}
	if err := os.Rename(inner, final); err != nil {
		os.Rename(old, final) // put the old one back
		return fmt.Errorf("split: %w", err)
	}
	return atomicfile.SyncDir(datasetDir)
}

// writeEdgeNPY writes int64 [2, k] in .npy version 1.0.
func writeEdgeNPY(w io.Writer, src, dst []int32) error {
	h := fmt.Sprintf("{'descr': '<i8', 'fortran_order': False, 'shape': (2, %d), }", len(src))
	pad := npyHeaderSize - 10 - len(h) - 1
	for pad < 0 {
		pad += 64
	}
	h += string(bytes.Repeat([]byte{' '}, pad)) + "\n"
	head := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	if _, err := w.Write(append(head, h...)); err != nil {
		return err
	}
	buf := make([]byte, 0, 64<<10)
	for _, part := range [][]int32{src, dst} {
		for _, v := range part {
			buf = binary.LittleEndian.AppendUint64(buf, uint64(v))
			if len(buf) == cap(buf) {
				if _, err := w.Write(buf); err != nil {
					return err
				}
				buf = buf[:0]
			}
		}
	}
	_, err := w.Write(buf)
	return err
}

// ReadEdges reads datasetDir/edge_split and checks it against d: made for
// the same graph (node and edge counts, direction, structure checksum),
// the counts meta.json states, every edge in d's graph, in the canonical
// direction (src < dst when undirected), and no edge in two parts or
// twice in one. Problems are *dataset.FormatError naming the file.
func ReadEdges(datasetDir string, d *dataset.Dataset) (*EdgeSplit, error) {
	g := d.Graph
	return readSplit(datasetDir, splitGraph{nSrc: g.NumRows, nDst: g.NumRows, numEdges: g.NumEdges(), directed: d.Directed,
		oneSpace: true, crc: func() string { return GraphCRC(g) }, has: func(u, v int32) bool { return hasEdge(g, u, v) }})
}

// ReadRelationEdges reads datasetDir/edge_split, a split of relation rel
// of the typed dataset h (RelationEdges, 'strata split --link-relation'),
// with ReadEdges' checks against that relation: its name, the two types'
// node counts, its edge count, direction and checksum, every edge one of
// the relation's (source IDs below the source type's count, destination
// IDs below the destination type's), no edge twice.
func ReadRelationEdges(datasetDir string, h *dataset.Hetero, rel int) (*EdgeSplit, error) {
	r, err := newRelation(h, rel)
	if err != nil {
		return nil, err
	}
	in := h.EdgeTypes[rel].In
	return readSplit(datasetDir, splitGraph{relation: r.name, nSrc: r.nSrc, nDst: r.nDst, numEdges: in.NumEdges(),
		directed: r.directed, oneSpace: r.sameType, crc: func() string { return GraphCRC(in) }, has: r.has})
}

// splitGraph is what a stored split is checked against: a homogeneous
// graph (relation "") or one relation of a typed dataset.
type splitGraph struct {
	relation   string
	nSrc, nDst int64
	numEdges   int64
	directed   bool
	oneSpace   bool // sources and destinations share IDs: self-loops and u < v apply
	crc        func() string
	has        func(u, v int32) bool
}

func readSplit(datasetDir string, g splitGraph) (*EdgeSplit, error) {
	dir := filepath.Join(datasetDir, EdgeSplitDir)
	mpath := filepath.Join(dir, metaFile)
	b, err := regfile.ReadFile(mpath, maxMetaBytes)
	if err != nil {
		var tl *regfile.TooLargeError
		if errors.As(err, &tl) {
			return nil, bad(mpath, "larger than %d bytes", maxMetaBytes)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("split: %s: no edge split (make one with 'strata split --edge-split')", datasetDir)
		}
		return nil, fmt.Errorf("split: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m meta
	if err := dec.Decode(&m); err != nil {
		return nil, bad(mpath, "not a valid edge split description: %v", err)
	}
	if m.Format != edgeFormat {
		return nil, bad(mpath, "format %.32q, want %q", m.Format, edgeFormat)
	}
	if m.Version != edgeVersion {
		return nil, &dataset.FormatError{Path: mpath, Off: -1, Err: dataset.ErrUnsupportedVersion,
			Msg: fmt.Sprintf("unsupported edge split version %d (this build reads version %d)", m.Version, edgeVersion)}
	}
	if len(m.Fractions) != 3 || len(m.Counts) != 3 {
		return nil, bad(mpath, "want 3 fractions and 3 counts")
	}
	switch {
	case m.Relation == g.relation:
	case g.relation == "":
		return nil, bad(mpath, "made for relation %.200q of a typed dataset; this dataset is homogeneous", m.Relation)
	case m.Relation == "":
		return nil, bad(mpath, "made for a homogeneous graph, not relation %s (make one with 'strata split --edge-split ... --link-relation %s')", g.relation, g.relation)
	default:
		return nil, bad(mpath, "made for relation %.200q, not %s (remake it with 'strata split --edge-split ... --link-relation %s')", m.Relation, g.relation, g.relation)
	}
	wantDst := int64(0) // meta.json counts the destination type's nodes for a relation only
	if g.relation != "" {
		wantDst = g.nDst
	}
	if crc := g.crc(); m.NumNodes != g.nSrc || m.NumDstNodes != wantDst || m.NumEdges != g.numEdges || m.Directed != g.directed || m.GraphCRC != crc {
		what := fmt.Sprintf("%d nodes", g.nSrc)
		was := fmt.Sprintf("%d nodes", m.NumNodes)
		if g.relation != "" {
			what, was = fmt.Sprintf("%d+%d nodes", g.nSrc, g.nDst), fmt.Sprintf("%d+%d nodes", m.NumNodes, m.NumDstNodes)
		}
		return nil, bad(mpath, "made for another graph (%s, %d edges, directed %v, crc %.16q; this one: %s, %d, %v, %s)",
			was, m.NumEdges, m.Directed, m.GraphCRC, what, g.numEdges, g.directed, crc)
	}
	s := &EdgeSplit{Directed: m.Directed, Seed: m.Seed, NumNodes: m.NumNodes, NumEdges: m.NumEdges, GraphCRC: m.GraphCRC,
		Relation: m.Relation, NumDstNodes: m.NumDstNodes}
	copy(s.Fractions[:], m.Fractions)
	var all []int64
	for i, name := range partFiles {
		p := filepath.Join(dir, name)
		src, dst, err := importer.ReadEdgeIndexNPY(p, max(g.nSrc, g.nDst))
		if err != nil {
			return nil, err
		}
		if int64(len(src)) != m.Counts[i] {
			return nil, bad(p, "%d edges, meta.json says %d", len(src), m.Counts[i])
		}
		for j := range src {
			u, v := src[j], dst[j]
			if int64(u) >= g.nSrc || int64(v) >= g.nDst {
				return nil, bad(p, "edge %d (%d -> %d): IDs outside the relation's %d source and %d destination nodes", j, u, v, g.nSrc, g.nDst)
			}
			if g.oneSpace && (!g.directed && u >= v || u == v) {
				return nil, bad(p, "edge %d (%d -> %d): want src %s dst", j, u, v, map[bool]string{true: "!=", false: "<"}[g.directed])
			}
			if !g.has(u, v) {
				return nil, bad(p, "edge %d (%d -> %d) is not in the graph", j, u, v)
			}
			all = append(all, int64(u)<<32|int64(v))
		}
		s.Src[i], s.Dst[i] = src, dst
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			return nil, bad(dir, "edge %d -> %d is listed twice", all[i]>>32, all[i]&0xffffffff)
		}
	}
	return s, nil
}

// hasEdge looks v up in u's row (sorted in every dataset an importer
// writes; a linear scan confirms a miss on unsorted rows).
func hasEdge(g *graph.CSR, u, v int32) bool {
	row := g.Neighbors(u)
	if _, ok := slices.BinarySearch(row, v); ok {
		return true
	}
	return slices.Contains(row, v)
}

func bad(path, format string, args ...any) error {
	return &dataset.FormatError{Path: path, Off: -1, Msg: fmt.Sprintf(format, args...)}
}
