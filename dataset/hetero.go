package dataset

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/strata-gnn/strata/graph"
)

// Hetero is a heterogeneous (typed) node-classification dataset held in
// memory (or memory-mapped): nodes of several types, each with its own
// features, and edges of several types (relations), with labels on one
// target node type. It is format version 2 on disk (WriteHetero,
// OpenHetero); see docs/dataset-format.md.
//
// Node IDs are local to their type: the nodes of type t are
// 0..NodeTypes[t].NumNodes-1. Where one ID space is needed (the graph with
// types erased, Erased and ToHomogeneous), the global ID of node i of type
// t is Offsets()[t] + i: the types' ranges one after the other, in order.
//
// Each relation is stored grouped by destination (EdgeType.In, the
// in-adjacency or CSC): row v, a node of type Dst, lists the Src nodes with
// an edge to v. That is what message passing and neighbor sampling read,
// so nothing is transposed at load time and every relation is a plain CSR
// whose rows are addressed directly (see the package documentation for why
// this layout was chosen).
type Hetero struct {
	Name      string
	NodeTypes []NodeType
	EdgeTypes []EdgeType
	// Target is the index in NodeTypes of the labeled node type; it is
	// only meaningful when NumClasses > 0.
	Target     int
	NumClasses int
	Labels     []int32 // len NodeTypes[Target].NumNodes, -1 = unlabeled; nil when NumClasses == 0
	Train      []int32 // target-type node IDs, strictly ascending
	Val        []int32
	Test       []int32

	release func() error
}

// NodeType is one node type: its name, node count and features.
type NodeType struct {
	Name     string
	NumNodes int64
	FeatDim  int       // 0 when the type has no features
	Features []float32 // NumNodes x FeatDim row-major; nil when FeatDim == 0
}

// EdgeType is one relation (Src, Rel, Dst), as PyG's edge-type triples:
// Src and Dst index Hetero.NodeTypes. In holds its edges grouped by
// destination: In.NumRows is the Dst type's node count, In.NumCols the
// Src type's, and row v lists (sorted) the Src nodes with an edge to v.
// In.Weights are optional per-edge weights.
type EdgeType struct {
	Src, Dst int
	Rel      string
	In       *graph.CSR
}

// Limits of a typed dataset (the manifest lists every type, and IDs are
// int32 even once the types are erased).
const (
	MaxNodeTypes = 256
	MaxEdgeTypes = 1024
	maxTypeName  = 64
)

// Close releases the memory mappings of a dataset returned by OpenHetero.
// After Close its slices must not be used. Safe to call more than once.
func (h *Hetero) Close() error {
	if h == nil || h.release == nil {
		return nil
	}
	r := h.release
	h.release = nil
	return r()
}

// Mapped reports whether the arrays are read-only memory mappings.
func (h *Hetero) Mapped() bool { return h != nil && h.release != nil }

// Offsets returns the start of every node type's range in the global ID
// space, and the total node count last (len(NodeTypes)+1 entries).
func (h *Hetero) Offsets() []int64 {
	off := make([]int64, len(h.NodeTypes)+1)
	for t, nt := range h.NodeTypes {
		off[t+1] = off[t] + nt.NumNodes
	}
	return off
}

// NumNodes returns the total node count over all types.
func (h *Hetero) NumNodes() int64 { return h.Offsets()[len(h.NodeTypes)] }

// NumEdges returns the total edge count over all relations.
func (h *Hetero) NumEdges() int64 {
	var e int64
	for _, et := range h.EdgeTypes {
		if et.In != nil {
			e += et.In.NumEdges()
		}
	}
	return e
}

// NodeType returns the index of the node type called name, or -1.
func (h *Hetero) NodeType(name string) int {
	return slices.IndexFunc(h.NodeTypes, func(nt NodeType) bool { return nt.Name == name })
}

// EdgeTypeName is relation r as "src___rel___dst", the folder name OGB
// gives it (ogbn-mag: "author___writes___paper").
func (h *Hetero) EdgeTypeName(r int) string {
	et := h.EdgeTypes[r]
	return h.NodeTypes[et.Src].Name + RelSep + et.Rel + RelSep + h.NodeTypes[et.Dst].Name
}

// EdgeType returns the index of the relation named name: its full
// "src___rel___dst" form, or the bare relation name when exactly one
// relation carries it. It returns -1 when none does and -2 when a bare
// name is ambiguous.
func (h *Hetero) EdgeType(name string) int {
	found := -1
	for r := range h.EdgeTypes {
		if h.EdgeTypeName(r) == name {
			return r
		}
		if h.EdgeTypes[r].Rel == name {
			if found >= 0 {
				found = -2
			} else if found == -1 {
				found = r
			}
		}
	}
	return found
}

// RelSep joins the parts of a relation's full name ("author___writes___paper"),
// as OGB's folder names do; type and relation names cannot contain it.
const RelSep = "___"

// CheckTypeName reports why s cannot name a node type or relation, or "":
// 1 to 64 bytes of letters, digits, '_', '-' and '.', starting with a
// letter or digit, not ending with '_' and not containing "___" (so
// "src___rel___dst" splits back into its parts, and a name is never "."
// or ".." where an importer reads it as a folder name).
func CheckTypeName(s string) string {
	if len(s) == 0 || len(s) > maxTypeName {
		return fmt.Sprintf("name %q: want 1 to %d bytes", truncate(s, 32), maxTypeName)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Sprintf("name %q: byte %d is not a letter, digit, '_', '-' or '.'", truncate(s, 32), i)
		}
	}
	if c := s[0]; c == '_' || c == '-' || c == '.' {
		return fmt.Sprintf("name %q: must start with a letter or digit", s)
	}
	if s[len(s)-1] == '_' || strings.Contains(s, RelSep) {
		return fmt.Sprintf("name %q: must not end with '_' or contain %q", s, RelSep)
	}
	return ""
}

// Array names of a typed dataset, as the manifest lists them.
func nodeArray(t int, what string) string { return fmt.Sprintf("node%d.%s", t, what) }
func edgeArray(r int, what string) string { return fmt.Sprintf("edge%d.%s", r, what) }

// ValidateHetero checks an in-memory typed dataset: type names valid and
// unique, counts in range (the total node count too, since erasing the
// types makes IDs global), every relation a valid CSR of the right shape
// whose rows end at its edge count, weights and features finite, labels in
// [-1, NumClasses) on the target type, split IDs in range and strictly
// ascending. Errors are *FormatError naming the array (e.g.
// "edge2.indices") and the byte offset of the bad element in its file.
func ValidateHetero(h *Hetero) error {
	return validateHetero(h, func(name string) string { return name })
}

func validateHetero(h *Hetero, loc func(string) string) error {
	if h == nil {
		return formatErr("dataset", -1, "nil typed dataset")
	}
	if len(h.NodeTypes) == 0 || len(h.NodeTypes) > MaxNodeTypes {
		return formatErr("node_types", -1, "%d node types, want 1 to %d", len(h.NodeTypes), MaxNodeTypes)
	}
	if len(h.EdgeTypes) > MaxEdgeTypes {
		return formatErr("edge_types", -1, "%d edge types, want at most %d", len(h.EdgeTypes), MaxEdgeTypes)
	}
	var total int64
	names := map[string]bool{}
	for t, nt := range h.NodeTypes {
		if msg := CheckTypeName(nt.Name); msg != "" {
			return formatErr("node_types", -1, "node type %d: %s", t, msg)
		}
		if names[nt.Name] {
			return formatErr("node_types", -1, "node type %q listed twice", nt.Name)
		}
		names[nt.Name] = true
		if nt.NumNodes < 0 || nt.NumNodes > MaxNodes-total {
			return formatErr("node_types", -1, "node type %q has %d nodes: the types' total must stay in [0, %d]", nt.Name, nt.NumNodes, int64(MaxNodes))
		}
		total += nt.NumNodes
		path := loc(nodeArray(t, "features"))
		if nt.FeatDim < 0 || (nt.NumNodes > 0 && int64(nt.FeatDim) > math.MaxInt64/8/nt.NumNodes) {
			return formatErr(path, -1, "node type %q: feat dim %d out of range", nt.Name, nt.FeatDim)
		}
		if (nt.FeatDim > 0) != (nt.Features != nil) {
			return formatErr(path, -1, "node type %q: feat dim %d but features present=%v", nt.Name, nt.FeatDim, nt.Features != nil)
		}
		if nt.Features != nil {
			if int64(len(nt.Features)) != nt.NumNodes*int64(nt.FeatDim) {
				return formatErr(path, -1, "node type %q: %d feature values, want %d x %d", nt.Name, len(nt.Features), nt.NumNodes, nt.FeatDim)
			}
			if err := checkFinite(path, nt.Features); err != nil {
				return err
			}
		}
	}
	rels := map[string]bool{}
	for r, et := range h.EdgeTypes {
		if et.Src < 0 || et.Src >= len(h.NodeTypes) || et.Dst < 0 || et.Dst >= len(h.NodeTypes) {
			return formatErr("edge_types", -1, "edge type %d: node types %d -> %d out of range [0, %d)", r, et.Src, et.Dst, len(h.NodeTypes))
		}
		if msg := CheckTypeName(et.Rel); msg != "" {
			return formatErr("edge_types", -1, "edge type %d: relation %s", r, msg)
		}
		full := h.EdgeTypeName(r)
		if rels[full] {
			return formatErr("edge_types", -1, "edge type %s listed twice", full)
		}
		rels[full] = true
		g := et.In
		ipath := loc(edgeArray(r, "indptr"))
		if g == nil {
			return formatErr(ipath, -1, "edge type %s has no graph", full)
		}
		nd, ns := h.NodeTypes[et.Dst].NumNodes, h.NodeTypes[et.Src].NumNodes
		if g.NumRows != nd || g.NumCols != ns {
			return formatErr(ipath, -1, "edge type %s: graph is %d x %d, want %d x %d (destinations x sources)", full, g.NumRows, g.NumCols, nd, ns)
		}
		if int64(len(g.Indptr)) != nd+1 {
			return formatErr(ipath, -1, "edge type %s: indptr has %d entries, want %d", full, len(g.Indptr), nd+1)
		}
		if err := checkIndptr(ipath, g.Indptr, int64(len(g.Indices))); err != nil {
			return err
		}
		if err := checkIDs(loc(edgeArray(r, "indices")), g.Indices, ns); err != nil {
			return err
		}
		if g.Weights != nil {
			wpath := loc(edgeArray(r, "weights"))
			if len(g.Weights) != len(g.Indices) {
				return formatErr(wpath, -1, "edge type %s: %d weights for %d edges", full, len(g.Weights), len(g.Indices))
			}
			if err := checkFinite(wpath, g.Weights); err != nil {
				return err
			}
		}
	}
	if h.NumClasses < 0 || int64(h.NumClasses) > math.MaxInt32 {
		return formatErr(loc(ArrLabels), -1, "num classes %d out of range", h.NumClasses)
	}
	if (h.NumClasses > 0) != (h.Labels != nil) {
		return formatErr(loc(ArrLabels), -1, "num classes %d but labels present=%v", h.NumClasses, h.Labels != nil)
	}
	if h.Labels == nil {
		if h.Train != nil || h.Val != nil || h.Test != nil {
			return formatErr(loc(ArrTrain), -1, "split present without labels")
		}
		return nil
	}
	if h.Target < 0 || h.Target >= len(h.NodeTypes) {
		return formatErr(loc(ArrLabels), -1, "target node type %d out of range [0, %d)", h.Target, len(h.NodeTypes))
	}
	n := h.NodeTypes[h.Target].NumNodes
	if int64(len(h.Labels)) != n {
		return formatErr(loc(ArrLabels), -1, "%d labels for the %d nodes of target type %q", len(h.Labels), n, h.NodeTypes[h.Target].Name)
	}
	for i, l := range h.Labels {
		if l < -1 || int64(l) >= int64(h.NumClasses) {
			return formatErr(loc(ArrLabels), int64(i)*4, "label %d of node %d out of range [-1, %d)", l, i, h.NumClasses)
		}
	}
	for _, s := range []struct {
		name string
		ids  []int32
	}{{ArrTrain, h.Train}, {ArrVal, h.Val}, {ArrTest, h.Test}} {
		if s.ids != nil {
			if err := checkSplit(loc(s.name), s.ids, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// RelationFromEdges builds a relation's graph (EdgeType.In) from an edge
// list: edge i goes from src[i] (a node of a type with numSrc nodes) to
// dst[i] (numDst nodes). Rows are destinations, each sorted by source;
// repeated (src, dst) pairs are merged into one edge whose weight is the
// sum of theirs, added in input order. w may be nil (no weights). IDs are
// checked; an error names the first bad edge. The result depends only on
// the input.
func RelationFromEdges(numSrc, numDst int64, src, dst []int32, w []float32) (*graph.CSR, error) {
	if numSrc < 0 || numSrc > MaxNodes || numDst < 0 || numDst > MaxNodes {
		return nil, formatErr("edges", -1, "node counts %d -> %d out of range [0, %d]", numSrc, numDst, int64(MaxNodes))
	}
	if len(src) != len(dst) || (w != nil && len(w) != len(src)) {
		return nil, formatErr("edges", -1, "%d sources, %d destinations and %d weights", len(src), len(dst), len(w))
	}
	for i := range src {
		if src[i] < 0 || int64(src[i]) >= numSrc || dst[i] < 0 || int64(dst[i]) >= numDst {
			return nil, formatErr("edges", -1, "edge %d: %d -> %d out of range [0, %d) -> [0, %d)", i, src[i], dst[i], numSrc, numDst)
		}
	}
	indptr := make([]int64, numDst+1)
	for _, d := range dst {
		indptr[d+1]++
	}
	for v := int64(0); v < numDst; v++ {
		indptr[v+1] += indptr[v]
	}
	// Counting sort by destination keeps input order within a row, so the
	// stable sort by source below sums repeated pairs in input order.
	type entry struct {
		s int32
		w float32
	}
	ents := make([]entry, len(src))
	pos := slices.Clone(indptr[:numDst])
	for i, d := range dst {
		e := entry{s: src[i]}
		if w != nil {
			e.w = w[i]
		}
		ents[pos[d]] = e
		pos[d]++
	}
	indices := make([]int32, 0, len(src))
	var weights []float32
	if w != nil {
		weights = make([]float32, 0, len(src))
	}
	out := make([]int64, numDst+1)
	for v := int64(0); v < numDst; v++ {
		row := ents[indptr[v]:indptr[v+1]]
		slices.SortStableFunc(row, func(a, b entry) int { return int(a.s) - int(b.s) })
		for i := 0; i < len(row); {
			j, sum := i, 0.0
			for ; j < len(row) && row[j].s == row[i].s; j++ {
				sum += float64(row[j].w)
			}
			indices = append(indices, row[i].s)
			if w != nil {
				weights = append(weights, float32(sum))
			}
			i = j
		}
		out[v+1] = int64(len(indices))
	}
	return &graph.CSR{NumRows: numDst, NumCols: numSrc, Indptr: out, Indices: slices.Clip(indices), Weights: slices.Clip(weights)}, nil
}

// Erased returns h with its types erased: one node type "node" holding
// every node under its global ID (Offsets), one relation "edge" holding
// every relation's edges (a pair joined by several relations keeps one
// edge per relation), features zero-padded to the widest type's
// dimension (a type's features fill the first columns of its rows; a
// type without features is all zeros), and the target type's labels and
// splits at their global IDs. The same model trained on h and on
// h.Erased() shows what the types are worth. Weights are kept only when
// every relation has them.
func (h *Hetero) Erased() (*Hetero, error) {
	if err := ValidateHetero(h); err != nil {
		return nil, err
	}
	off := h.Offsets()
	n := off[len(h.NodeTypes)]
	dim := 0
	for _, nt := range h.NodeTypes {
		dim = max(dim, nt.FeatDim)
	}
	out := &Hetero{Name: h.Name + "-erased", NumClasses: h.NumClasses}
	node := NodeType{Name: "node", NumNodes: n, FeatDim: dim}
	if dim > 0 {
		node.Features = make([]float32, n*int64(dim))
		for t, nt := range h.NodeTypes {
			for i := int64(0); i < nt.NumNodes; i++ {
				row := node.Features[(off[t]+i)*int64(dim):]
				copy(row[:nt.FeatDim], nt.Features[i*int64(nt.FeatDim):(i+1)*int64(nt.FeatDim)])
			}
		}
	}
	out.NodeTypes = []NodeType{node}
	var src, dst []int32
	var w []float32
	weighted := len(h.EdgeTypes) > 0
	for _, et := range h.EdgeTypes {
		weighted = weighted && et.In.Weights != nil
	}
	for _, et := range h.EdgeTypes {
		g := et.In
		for v := int64(0); v < g.NumRows; v++ {
			for e := g.Indptr[v]; e < g.Indptr[v+1]; e++ {
				src = append(src, int32(off[et.Src]+int64(g.Indices[e])))
				dst = append(dst, int32(off[et.Dst]+v))
				if weighted {
					w = append(w, g.Weights[e])
				}
			}
		}
	}
	g, err := erasedGraph(n, src, dst, w)
	if err != nil {
		return nil, err
	}
	out.EdgeTypes = []EdgeType{{Src: 0, Dst: 0, Rel: "edge", In: g}}
	if h.Labels != nil {
		base := off[h.Target]
		out.Labels = make([]int32, n)
		for i := range out.Labels {
			out.Labels[i] = -1
		}
		copy(out.Labels[base:], h.Labels)
		shift := func(ids []int32) []int32 {
			if ids == nil {
				return nil
			}
			s := make([]int32, len(ids))
			for i, v := range ids {
				s[i] = int32(base + int64(v))
			}
			return s
		}
		out.Train, out.Val, out.Test = shift(h.Train), shift(h.Val), shift(h.Test)
	}
	return out, nil
}

// erasedGraph groups the edges by destination without merging repeats
// (each relation's edge stays), rows sorted by source: FromEdges with the
// roles swapped builds exactly that.
func erasedGraph(n int64, src, dst []int32, w []float32) (*graph.CSR, error) {
	var opts []graph.Option
	if w != nil {
		opts = append(opts, graph.WithWeights(w))
	}
	in, err := graph.FromEdges(n, dst, src, opts...)
	if err != nil {
		return nil, fmt.Errorf("dataset: erasing types: %w", err)
	}
	return in, nil
}

// ToHomogeneous returns h with its types erased (Erased) as a version 1
// Dataset: the out-adjacency of every edge under global IDs, marked
// directed (the trainers then read its in-adjacency, which is the erased
// relation itself). Homogeneous trainers (sage, gcn, gat) run on it.
func (h *Hetero) ToHomogeneous() (*Dataset, error) {
	e, err := h.Erased()
	if err != nil {
		return nil, err
	}
	nt, in := e.NodeTypes[0], e.EdgeTypes[0].In
	out, err := graph.Transpose(in)
	if err != nil {
		return nil, fmt.Errorf("dataset: erasing types: %w", err)
	}
	d := &Dataset{Name: e.Name, Graph: out, Directed: true, FeatDim: nt.FeatDim, Features: nt.Features,
		NumClasses: e.NumClasses, Labels: e.Labels, Train: e.Train, Val: e.Val, Test: e.Test}
	if err := Validate(d); err != nil {
		return nil, err
	}
	return d, nil
}

// AddReverse returns h with every relation made usable in both
// directions, as PyG's ToUndirected does: a relation (a, rel, b) between
// two different types gains the relation (b, "rev_"+rel, a) with the same
// edges reversed (and their weights), unless h already has a relation of
// that name (or is itself "rev_"+rel of the opposite relation); a
// relation within one type ((paper, cites, paper)) gets the
// reverse of each of its edges added to it (repeats merged, weights
// summed). Without reverse relations a type that is only ever a source
// (ogbn-mag's authors) receives no messages. Arrays of h are shared, not
// copied, where they do not change.
func (h *Hetero) AddReverse() (*Hetero, error) {
	if err := ValidateHetero(h); err != nil {
		return nil, err
	}
	out := *h
	out.release = nil
	out.EdgeTypes = slices.Clone(h.EdgeTypes)
	have := map[string]bool{}
	for r := range h.EdgeTypes {
		have[h.EdgeTypeName(r)] = true
	}
	for r, et := range h.EdgeTypes {
		g := et.In
		if et.Src == et.Dst {
			both, err := graph.Symmetrize(g, graph.ReduceSum)
			if err != nil {
				return nil, fmt.Errorf("dataset: reversing %s: %w", h.EdgeTypeName(r), err)
			}
			out.EdgeTypes[r].In = both
			continue
		}
		rel := "rev_" + et.Rel
		name := h.NodeTypes[et.Dst].Name + RelSep + rel + RelSep + h.NodeTypes[et.Src].Name
		orig, isRev := strings.CutPrefix(et.Rel, "rev_")
		if have[name] || isRev && have[h.NodeTypes[et.Dst].Name+RelSep+orig+RelSep+h.NodeTypes[et.Src].Name] {
			continue // reversed already (or itself the reverse of one)
		}
		if msg := CheckTypeName(rel); msg != "" {
			return nil, formatErr("edge_types", -1, "reverse of %s: %s", h.EdgeTypeName(r), msg)
		}
		rev, err := graph.Transpose(g)
		if err != nil {
			return nil, fmt.Errorf("dataset: reversing %s: %w", h.EdgeTypeName(r), err)
		}
		have[name] = true
		out.EdgeTypes = append(out.EdgeTypes, EdgeType{Src: et.Dst, Dst: et.Src, Rel: rel, In: rev})
	}
	if err := ValidateHetero(&out); err != nil {
		return nil, err
	}
	return &out, nil
}
