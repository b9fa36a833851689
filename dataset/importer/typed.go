package importer

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/strata-gnn/strata/dataset"
)

// Typed (heterogeneous) input layouts; LoadHetero reads them into a
// dataset.Hetero.
const (
	// TypedNPY is a folder per node type and per relation of .npy arrays:
	// nodes/<type>/ and edges/<src>___<rel>___<dst>/ (LoadTypedNPY).
	TypedNPY Kind = "npy-typed"
	// OGBHetero is OGB's heterogeneous raw layout, as ogbn-mag's
	// (LoadOGBHetero).
	OGBHetero Kind = "ogb-hetero"
)

// TypedKinds lists the typed layouts.
func TypedKinds() []Kind { return []Kind{TypedNPY, OGBHetero} }

// IsTyped reports whether kind is a typed layout (LoadHetero reads it,
// Load does not).
func IsTyped(kind Kind) bool { return kind == TypedNPY || kind == OGBHetero }

// detectTyped recognizes the typed layouts: OGB's raw/num-node-dict.csv
// (.gz) and the typed npy layout's nodes/ and edges/ folders.
func detectTyped(src string) (Kind, bool) {
	for _, p := range []string{"raw/num-node-dict.csv.gz", "raw/num-node-dict.csv", "num-node-dict.csv.gz", "num-node-dict.csv"} {
		if _, err := os.Stat(filepath.Join(src, p)); err == nil {
			return OGBHetero, true
		}
	}
	if fi, err := os.Stat(filepath.Join(src, "edges")); err == nil && fi.IsDir() {
		if fi, err := os.Stat(filepath.Join(src, "nodes")); err == nil && fi.IsDir() {
			return TypedNPY, true
		}
	}
	return "", false
}

// LoadHetero reads src in typed layout kind (detected when empty) into
// memory and validates the result.
func LoadHetero(kind Kind, src string, opts Options) (*dataset.Hetero, error) {
	if kind == "" {
		k, err := Detect(src)
		if err != nil {
			return nil, err
		}
		kind = k
	}
	switch kind {
	case TypedNPY:
		return LoadTypedNPY(src, opts)
	case OGBHetero:
		return LoadOGBHetero(src, opts)
	}
	return nil, fmt.Errorf("importer: %s is a homogeneous layout (%s): use Load (typed layouts: %v)", src, kind, TypedKinds())
}

// ImportHetero converts src (typed layout kind, detected when empty)
// into a typed Strata dataset directory (format version 2) at dst.
func ImportHetero(kind Kind, src, dst string, opts Options) error {
	h, err := LoadHetero(kind, src, opts)
	if err != nil {
		return err
	}
	return dataset.WriteHetero(dst, h, dataset.WriteOptions{Overwrite: opts.Overwrite, NoSync: opts.NoSync, Quiet: opts.Quiet})
}

// typedRel is one relation read from a typed layout, before the node
// counts are final.
type typedRel struct {
	src, rel, dst string
	path          string // where its edges came from, for errors
	s, d          []int32
	w             []float32
}

// splitRelName splits "src___rel___dst" into its parts, checking each is
// a valid type name.
func splitRelName(path, name string) (src, rel, dst string, err error) {
	parts := strings.Split(name, dataset.RelSep)
	if len(parts) != 3 {
		return "", "", "", fileErr(path, "relation folder %q: want src%srel%sdst", truncate(name, 64), dataset.RelSep, dataset.RelSep)
	}
	for _, p := range parts {
		if msg := dataset.CheckTypeName(p); msg != "" {
			return "", "", "", fileErr(path, "relation %q: %s", truncate(name, 64), msg)
		}
	}
	return parts[0], parts[1], parts[2], nil
}

// subdirs lists the folders in dir, sorted; a missing dir is no folders.
func subdirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if notExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("importer: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

// typedNode is one node type read from a typed layout.
type typedNode struct {
	name    string
	n       int64 // -1 until known
	vouched bool  // n comes from a per-node file or a stated count
	feat    []float32
	dim     int
	labels  []int32
	classes int
	dir     string // nodes/<type> (npy) or "", for splits
}

// assemble builds the typed dataset: node counts settled (inferred from
// the edges where nothing states them, bounded like the homogeneous
// importers), relations built grouped by destination, the labeled type
// the target.
func assemble(name string, nodes []*typedNode, rels []*typedRel, opts Options, splits func(target *typedNode, n int64) ([3][]int32, error)) (*dataset.Hetero, error) {
	index := map[string]int{}
	for i, nt := range nodes {
		index[nt.name] = i
	}
	maxID := make([]int64, len(nodes))
	for i := range maxID {
		maxID[i] = -1
	}
	var edges int64
	for _, r := range rels {
		for _, side := range []struct {
			t   string
			ids []int32
		}{{r.src, r.s}, {r.dst, r.d}} {
			t, ok := index[side.t]
			if !ok {
				return nil, fileErr(r.path, "relation %s%s%s%s%s names node type %q, which is not one", r.src, dataset.RelSep, r.rel, dataset.RelSep, r.dst, side.t)
			}
			for _, v := range side.ids {
				maxID[t] = max(maxID[t], int64(v))
			}
		}
		edges += int64(len(r.s))
	}
	var total int64
	for i, nt := range nodes {
		if nt.n < 0 {
			nt.n = maxID[i] + 1
		}
		if maxID[i] >= nt.n {
			for _, r := range rels {
				for k, side := range [][]int32{r.s, r.d} {
					t := []string{r.src, r.dst}[k]
					if t != nt.name {
						continue
					}
					if j := slices.IndexFunc(side, func(v int32) bool { return int64(v) >= nt.n }); j >= 0 {
						return nil, fileErr(r.path, "edge %d: %s ID %d out of range [0, %d) (node type %q)", j, []string{"source", "destination"}[k], side[j], nt.n, nt.name)
					}
				}
			}
		}
		if !nt.vouched {
			if err := boundNodes(nt.name, nt.n, edges); err != nil {
				return nil, err
			}
		}
		total += nt.n
		if total > dataset.MaxNodes {
			return nil, fmt.Errorf("importer: %s: more than %d nodes over all types", name, int64(dataset.MaxNodes))
		}
		if opts.limitNodes > 0 && nt.n > opts.limitNodes {
			return nil, fmt.Errorf("importer: node type %q: %d nodes exceed the limit %d", nt.name, nt.n, opts.limitNodes)
		}
	}
	if err := checkMemory(name, total, edges, opts); err != nil {
		return nil, err
	}
	h := &dataset.Hetero{Name: name, Target: -1}
	var target *typedNode
	for i, nt := range nodes {
		h.NodeTypes = append(h.NodeTypes, dataset.NodeType{Name: nt.name, NumNodes: nt.n, FeatDim: nt.dim, Features: nt.feat})
		if nt.classes > 0 {
			if target != nil {
				return nil, fmt.Errorf("importer: %s: node types %q and %q are both labeled; a typed dataset has one target type", name, target.name, nt.name)
			}
			target = nt
			h.Target, h.NumClasses, h.Labels = i, nt.classes, nt.labels
		}
	}
	slices.SortStableFunc(rels, func(a, b *typedRel) int {
		return cmp.Or(cmp.Compare(a.src, b.src), cmp.Compare(a.rel, b.rel), cmp.Compare(a.dst, b.dst))
	})
	for i, r := range rels {
		if i > 0 && rels[i-1].src == r.src && rels[i-1].rel == r.rel && rels[i-1].dst == r.dst {
			return nil, fileErr(r.path, "relation %s%s%s%s%s given twice", r.src, dataset.RelSep, r.rel, dataset.RelSep, r.dst)
		}
		s, d := index[r.src], index[r.dst]
		in, err := dataset.RelationFromEdges(nodes[s].n, nodes[d].n, r.s, r.d, r.w)
		if err != nil {
			return nil, fmt.Errorf("importer: %s: %w", r.path, err)
		}
		r.s, r.d, r.w = nil, nil, nil
		h.EdgeTypes = append(h.EdgeTypes, dataset.EdgeType{Src: s, Dst: d, Rel: r.rel, In: in})
	}
	if target != nil {
		sp, err := splits(target, target.n)
		if err != nil {
			return nil, err
		}
		h.Train, h.Val, h.Test = sp[0], sp[1], sp[2]
	}
	if err := dataset.ValidateHetero(h); err != nil {
		return nil, fmt.Errorf("importer: %s: %w", name, err)
	}
	return h, nil
}

// Typed npy layout file names, besides the homogeneous npy layout's
// (features, labels, splits, edges).
var (
	npyNumNodesNames = []string{"num_nodes.npy"}
	npyWeightNames   = []string{"weights.npy", "edge_weight.npy"}
)

// LoadTypedNPY reads a typed layout of .npy arrays, one folder per node
// type and one per relation:
//
//	nodes/<type>/features.npy (node_feat.npy, x.npy)  float32/float64 [N_t, F_t] (optional)
//	nodes/<type>/labels.npy (node_label.npy, y.npy)   int [N_t], -1 = unlabeled; one type only (the target)
//	nodes/<type>/train_idx.npy, val_idx.npy, test_idx.npy  the target's splits: IDs or bool masks
//	nodes/<type>/num_nodes.npy                        int, shape () or (1,): the count when nothing else gives it
//	edges/<src>___<rel>___<dst>/edge_index.npy (edges.npy)  int [2, E] or [E, 2]: row 0 sources (type src), row 1 destinations (type dst)
//	edges/<src>___<rel>___<dst>/weights.npy (edge_weight.npy)  float [E] (optional)
//
// IDs are local to their type. A type's node count is its feature (or
// label) row count, else num_nodes.npy, else the largest ID the edges
// give it + 1. Node types are every folder under nodes/ and every type a
// relation names, sorted by name; relations are sorted by (src, rel,
// dst); repeated edges are merged (weights summed).
func LoadTypedNPY(dir string, opts Options) (*dataset.Hetero, error) {
	relDirs, err := subdirs(filepath.Join(dir, "edges"))
	if err != nil {
		return nil, err
	}
	if len(relDirs) == 0 {
		return nil, fmt.Errorf("importer: %s: no relation folders under edges/ (want edges/src%srel%sdst/edge_index.npy)", dir, dataset.RelSep, dataset.RelSep)
	}
	nodeDirs, err := subdirs(filepath.Join(dir, "nodes"))
	if err != nil {
		return nil, err
	}
	byName := map[string]*typedNode{}
	var nodes []*typedNode
	addType := func(name string) *typedNode {
		if nt := byName[name]; nt != nil {
			return nt
		}
		nt := &typedNode{name: name, n: -1}
		byName[name] = nt
		nodes = append(nodes, nt)
		return nt
	}
	for _, nd := range nodeDirs {
		p := filepath.Join(dir, "nodes", nd)
		if msg := dataset.CheckTypeName(nd); msg != "" {
			return nil, fileErr(p, "node type folder: %s", msg)
		}
		nt := addType(nd)
		nt.dir = p
		if err := readTypedNPYNode(nt, opts); err != nil {
			return nil, err
		}
	}
	var rels []*typedRel
	for _, rd := range relDirs {
		p := filepath.Join(dir, "edges", rd)
		s, r, d, err := splitRelName(p, rd)
		if err != nil {
			return nil, err
		}
		addType(s)
		addType(d)
		epath, err := firstExisting(p, npyEdgeNames)
		if err != nil {
			return nil, err
		}
		if epath == "" {
			return nil, fmt.Errorf("importer: %s: no %s", p, strings.Join(npyEdgeNames, " or "))
		}
		src, dst, err := readNPYEdges(epath, -1)
		if err != nil {
			return nil, err
		}
		tr := &typedRel{src: s, rel: r, dst: d, path: epath, s: src, d: dst}
		wpath, err := firstExisting(p, npyWeightNames)
		if err != nil {
			return nil, err
		}
		if wpath != "" {
			nf, err := openNPY(wpath)
			if err != nil {
				return nil, err
			}
			if len(nf.h.Shape) != 1 || nf.h.Shape[0] != int64(len(src)) {
				nf.Close()
				return nil, offErr(wpath, 0, "weights must have shape [%d] (one per edge), got %v", len(src), nf.h.Shape)
			}
			tr.w, err = nf.readFloat32s()
			nf.Close()
			if err != nil {
				return nil, err
			}
		}
		rels = append(rels, tr)
	}
	slices.SortFunc(nodes, func(a, b *typedNode) int { return cmp.Compare(a.name, b.name) })
	return assemble(defaultName(dir, opts), nodes, rels, opts, func(target *typedNode, n int64) ([3][]int32, error) {
		var out [3][]int32
		for i, names := range npySplitNames {
			p, err := firstExisting(target.dir, names)
			if err != nil || p == "" {
				return out, err
			}
			if out[i], err = readNPYSplit(p, n); err != nil {
				return out, err
			}
		}
		return out, nil
	})
}

// readTypedNPYNode reads a node type's folder: features, labels, count.
func readTypedNPYNode(nt *typedNode, opts Options) error {
	fpath, err := firstExisting(nt.dir, npyFeatureNames)
	if err != nil {
		return err
	}
	if p := fpath; p != "" {
		nf, err := openNPY(p)
		if err != nil {
			return err
		}
		if len(nf.h.Shape) != 2 || nf.h.Shape[0] > dataset.MaxNodes {
			nf.Close()
			return offErr(p, 0, "features must be [N, F] with N <= %d, got shape %v", int64(dataset.MaxNodes), nf.h.Shape)
		}
		feat, err := nf.readFloat32s()
		nf.Close()
		if err != nil {
			return err
		}
		nt.n, nt.vouched, nt.dim = nf.h.Shape[0], true, int(nf.h.Shape[1])
		if nt.dim > 0 {
			nt.feat = feat
		}
	}
	lpath, err := firstExisting(nt.dir, npyLabelNames)
	if err != nil {
		return err
	}
	if p := lpath; p != "" {
		labels, classes, err := readNPYLabels(p)
		if err != nil {
			return err
		}
		if nt.n >= 0 && int64(len(labels)) != nt.n {
			return offErr(p, 0, "has %d labels, features have %d rows", len(labels), nt.n)
		}
		nt.n, nt.vouched = int64(len(labels)), true
		if classes > 0 {
			nt.labels, nt.classes = labels, classes
		}
	}
	cpath, err := firstExisting(nt.dir, npyNumNodesNames)
	if err != nil {
		return err
	}
	if p := cpath; p != "" {
		nf, err := openNPY(p)
		if err != nil {
			return err
		}
		defer nf.Close()
		if nf.n != 1 || len(nf.h.Shape) > 1 {
			return offErr(p, 0, "num_nodes must hold one integer (shape () or (1,)), got shape %v", nf.h.Shape)
		}
		v, err := nf.readInt32s(0, int64(dataset.MaxNodes)+1)
		if err != nil {
			return err
		}
		if nt.n >= 0 && int64(v[0]) != nt.n {
			return offErr(p, nf.h.DataOff, "says %d nodes, the type's features or labels have %d", v[0], nt.n)
		}
		if opts.limitNodes > 0 && int64(v[0]) > opts.limitNodes {
			return offErr(p, nf.h.DataOff, "node count %d exceeds the limit %d", v[0], opts.limitNodes)
		}
		nt.n, nt.vouched = int64(v[0]), true
	}
	return nil
}
