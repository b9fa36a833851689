package nn

import (
	"fmt"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Typed (heterogeneous) model kinds accepted by HeteroConfig.Kind.
const (
	KindRGCN  = "rgcn"
	KindHSAGE = "hsage"
)

// HeteroRel is one relation of a typed graph: messages flow from nodes of
// type Src to nodes of type Dst. Name keys its parameters (use the full
// "src___rel___dst" name, which is unique).
type HeteroRel struct {
	Src, Dst int
	Name     string
}

// HeteroSchema is the typed graph a model is built for: node type names
// and input widths (a type without features has width 0 and reads a
// constant 1-wide input of ones, so its root weight is a learned vector
// shared by all its nodes), the relations, and the target node type whose
// classes the model predicts.
type HeteroSchema struct {
	NodeTypes []string
	InDims    []int
	Rels      []HeteroRel
	Target    int
	// Outputs lists more node types whose last-layer outputs the model
	// computes (ForwardTypes), besides Target: e.g. both endpoint types
	// of a relation whose links are predicted from their embeddings.
	Outputs []int
}

// InWidth is the width of type t's input rows (1 for a type without
// features).
func (s *HeteroSchema) InWidth(t int) int { return max(s.InDims[t], 1) }

// HeteroConfig describes a typed model. Unlike Config there are no
// implicit defaults beyond Layers (2) and Hidden (64): the dropout rates
// are taken as given.
type HeteroConfig struct {
	Kind         string // "rgcn" or "hsage"
	Schema       HeteroSchema
	Hidden       int
	OutDim       int // classes of the target type
	Layers       int
	Dropout      float32 // on the input of every layer after the first
	InputDropout float32 // on the input features
	Seed         uint64  // parameter initialization
}

func (c *HeteroConfig) fill() error {
	bad := func(format string, args ...any) error { return &ConfigError{Msg: fmt.Sprintf(format, args...)} }
	if c.Kind != KindRGCN && c.Kind != KindHSAGE {
		return bad("unknown typed model kind %q (want rgcn or hsage)", c.Kind)
	}
	if c.Layers == 0 {
		c.Layers = 2
	}
	if c.Hidden == 0 {
		c.Hidden = 64
	}
	s := &c.Schema
	const maxDim = 1 << 20
	switch {
	case len(s.NodeTypes) == 0 || len(s.InDims) != len(s.NodeTypes):
		return bad("%d node types with %d input widths", len(s.NodeTypes), len(s.InDims))
	case s.Target < 0 || s.Target >= len(s.NodeTypes):
		return bad("target type %d out of range [0, %d)", s.Target, len(s.NodeTypes))
	case c.Layers < 1 || c.Layers > 64:
		return bad("Layers = %d, want 1..64", c.Layers)
	case c.Hidden < 1 || c.Hidden > maxDim || c.OutDim < 1 || c.OutDim > maxDim:
		return bad("dimensions out of range (hidden %d, out %d; max %d)", c.Hidden, c.OutDim, maxDim)
	case !(c.Dropout >= 0 && c.Dropout < 1) || !(c.InputDropout >= 0 && c.InputDropout < 1):
		return bad("dropout %v / input dropout %v, want 0 <= p < 1", c.Dropout, c.InputDropout)
	}
	for t, d := range s.InDims {
		if d < 0 || d > maxDim {
			return bad("node type %d: input width %d out of range [0, %d]", t, d, maxDim)
		}
	}
	for _, t := range s.Outputs {
		if t < 0 || t >= len(s.NodeTypes) {
			return bad("output type %d out of range [0, %d)", t, len(s.NodeTypes))
		}
	}
	names := map[string]bool{}
	for r, rel := range s.Rels {
		if rel.Src < 0 || rel.Src >= len(s.NodeTypes) || rel.Dst < 0 || rel.Dst >= len(s.NodeTypes) {
			return bad("relation %d: node types %d -> %d out of range", r, rel.Src, rel.Dst)
		}
		if rel.Name == "" || names[rel.Name] {
			return bad("relation %d: name %q empty or repeated", r, rel.Name)
		}
		names[rel.Name] = true
	}
	return nil
}

// HeteroModel is a stack of typed graph layers, one conv per relation
// summed per destination type, producing the class logits of the target
// type's nodes. Two kinds:
//
// rgcn, R-GCN (Schlichtkrull et al. 2018) with mean normalization
// c_{i,r} = |N_r(i)| and a root weight per node type (types may have
// different widths; without basis decomposition):
//
//	h_i' = W_0^{type(i)} h_i + b^{type(i)} + sum_r mean_{j in N_r(i)} W_r h_j
//
// hsage, heterogeneous GraphSAGE (PyG's to_hetero(GraphSAGE), i.e.
// HeteroConv({r: SAGEConv}, aggr="sum")): one SAGEConv per relation,
// summed at the destination:
//
//	h_i' = sum_{r into type(i)} (W_self^r h_i + W_neigh^r mean_{j in N_r(i)} h_j + b^r)
//
// A node type that no relation enters keeps W_self^t h_i + b^t there
// (PyG would drop it). Both apply ReLU between layers and dropout to every
// layer's inputs; parameters exist only where the target's logits depend
// on them (the last layer computes the target type alone). With one node
// type and one relation, hsage is GraphSAGE exactly (SAGEConv's math).
//
// Shapes: x[t] (blocks[0].NumSrc[t] x InWidth(t)) -> logits
// (blocks[L-1].NumDst[Target] x OutDim).
type HeteroModel struct {
	cfg    HeteroConfig
	params []*Param
	layers []heteroLayer
	needIn []bool // types whose input features the first layer reads
}

// heteroLayer holds one layer's weights: per relation (nil when its
// destination is not needed) and per node type.
type heteroLayer struct {
	need  []bool      // destination types this layer computes
	self  [][]*Param  // per type: hsage, the W_self of the relations into it (summed); rgcn, its root weight
	bias  [][]*Param  // per type, the biases that go with self
	neigh []*Param    // per relation: W_neigh (hsage) or W_r (rgcn); nil when not needed
	in    []int       // input width per type
	out   int         // output width
	rels  []HeteroRel // the schema's
}

// Roles of a typed model's parameters (HeteroParamSpec.Role).
const (
	RoleNeigh    = "neigh"     // per relation: W_neigh (hsage) or W_r (rgcn), [in of Src, out]
	RoleSelf     = "self"      // per relation, hsage: W_self^r, [in of Dst, out]
	RoleBias     = "bias"      // per relation, hsage: b^r, [1, out]
	RoleRoot     = "root"      // per type: its root weight, [in of the type, out]
	RoleRootBias = "root_bias" // per type: its bias, [1, out]
)

// HeteroParamSpec describes one parameter of a typed model: its name
// (Param.Name), the layer, the relation (-1 for a type's root terms),
// the destination type, the role and the shape.
type HeteroParamSpec struct {
	Name       string
	Layer      int
	Rel        int
	Type       int
	Role       string
	Rows, Cols int
}

// HeteroParamSpecs lists the parameters NewHetero creates for cfg, in
// Params' order: per layer, per type the layer computes, the relations
// into it (neigh, then for hsage self and bias), then the type's root
// and bias (rgcn always; hsage when no relation enters the type). A saved
// model (package model) names and checks its tensors from this list.
func HeteroParamSpecs(cfg HeteroConfig) ([]HeteroParamSpec, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	need := cfg.need()
	s := cfg.Schema
	var out []HeteroParamSpec
	for l := range cfg.Layers {
		in := func(t int) int {
			if l == 0 {
				return s.InWidth(t)
			}
			return cfg.Hidden
		}
		width := cfg.Hidden
		if l == cfg.Layers-1 {
			width = cfg.OutDim
		}
		add := func(name string, rel, t int, role string, rows int) {
			out = append(out, HeteroParamSpec{Name: fmt.Sprintf("layer%d.%s", l, name), Layer: l, Rel: rel, Type: t, Role: role, Rows: rows, Cols: width})
		}
		for t := range s.NodeTypes {
			if !need[l+1][t] {
				continue
			}
			into := false
			for r, rel := range s.Rels {
				if rel.Dst != t {
					continue
				}
				into = true
				add(rel.Name+".neigh.weight", r, t, RoleNeigh, in(rel.Src))
				if cfg.Kind == KindHSAGE {
					add(rel.Name+".self.weight", r, t, RoleSelf, in(t))
					add(rel.Name+".bias", r, t, RoleBias, 1)
				}
			}
			if cfg.Kind == KindRGCN || !into {
				tn := s.NodeTypes[t]
				add(tn+".root.weight", -1, t, RoleRoot, in(t))
				add(tn+".bias", -1, t, RoleRootBias, 1)
			}
		}
	}
	return out, nil
}

// need returns need[l][t]: layer l-1 computes type t (need[0]: the first
// layer reads t's input). The last layer computes the target and the
// outputs; a layer feeds the next one's destinations (root terms) and
// the sources of their relations. cfg must be filled.
func (cfg *HeteroConfig) need() [][]bool {
	s := cfg.Schema
	T, L := len(s.NodeTypes), cfg.Layers
	need := make([][]bool, L+1)
	for l := range need {
		need[l] = make([]bool, T)
	}
	need[L][s.Target] = true
	for _, t := range s.Outputs {
		need[L][t] = true
	}
	for l := L; l > 0; l-- {
		for t := range T {
			need[l-1][t] = need[l-1][t] || need[l][t]
		}
		for _, rel := range s.Rels {
			if need[l][rel.Dst] {
				need[l-1][rel.Src] = true
			}
		}
	}
	return need
}

// NewHetero builds a typed model with fresh parameters on b. Free its
// parameters with FreeParams(b, m.Params()).
func NewHetero(b backend.Backend, cfg HeteroConfig) (*HeteroModel, error) {
	if b == nil {
		return nil, &ConfigError{Msg: "nil backend"}
	}
	specs, err := HeteroParamSpecs(cfg)
	if err != nil {
		return nil, err
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	s := cfg.Schema
	T, L := len(s.NodeTypes), cfg.Layers
	need := cfg.need()
	m := &HeteroModel{cfg: cfg, layers: make([]heteroLayer, L), needIn: need[0]}
	for l := range L {
		ly := heteroLayer{need: need[l+1], self: make([][]*Param, T), bias: make([][]*Param, T),
			neigh: make([]*Param, len(s.Rels)), in: make([]int, T), out: cfg.Hidden, rels: s.Rels}
		if l == L-1 {
			ly.out = cfg.OutDim
		}
		for t := range T {
			ly.in[t] = cfg.Hidden
			if l == 0 {
				ly.in[t] = s.InWidth(t)
			}
		}
		m.layers[l] = ly
	}
	// Parameters in the specs' order: each one's initial values are
	// keyed by its position (paramSet), so the order is part of the
	// model's definition.
	ps := &paramSet{b: b, seed: cfg.Seed}
	for _, sp := range specs {
		ly := &m.layers[sp.Layer]
		switch sp.Role {
		case RoleNeigh:
			ly.neigh[sp.Rel] = ps.uniform(sp.Name, sp.Rows, sp.Cols, glorot(sp.Rows, sp.Cols))
		case RoleSelf, RoleRoot:
			ly.self[sp.Type] = append(ly.self[sp.Type], ps.uniform(sp.Name, sp.Rows, sp.Cols, glorot(sp.Rows, sp.Cols)))
		default: // RoleBias, RoleRootBias
			ly.bias[sp.Type] = append(ly.bias[sp.Type], ps.zeros(sp.Name, sp.Rows, sp.Cols))
		}
		if ps.err != nil {
			return nil, ps.err
		}
	}
	m.params = ps.ps
	return m, nil
}

// Params returns the trainable parameters in a stable order.
func (m *HeteroModel) Params() []*Param { return m.params }

// Config returns the configuration (defaults filled in).
func (m *HeteroModel) Config() HeteroConfig { return m.cfg }

// NeedsInput reports whether the first layer reads type t's features.
func (m *HeteroModel) NeedsInput(t int) bool { return m.needIn[t] }

// Forward computes the logits of the target type's destinations of the
// last block. x[t] holds the input rows of blocks[0]'s sources of type t
// (NumSrc[t] x InWidth(t)); it may be nil for a type with no sources or
// whose input the model does not read (NeedsInput). len(blocks) must be
// the number of layers; one whole-graph block may be repeated. train
// enables dropout; seed keys the masks (rng.Derive(seed, layer, type)).
func (m *HeteroModel) Forward(t *autograd.Tape, x []*autograd.Var, blocks []*HeteroBlock, train bool, seed uint64) (*autograd.Var, error) {
	h, err := m.ForwardTypes(t, x, blocks, train, seed)
	if err != nil {
		return nil, err
	}
	y := h[m.cfg.Schema.Target]
	if y == nil { // no target destinations
		return nil, layerErr("HeteroModel", "the last block has no destinations of the target type")
	}
	return y, nil
}

// ForwardTypes is Forward returning the last layer's outputs of every
// type it computes (Target and Schema.Outputs; nil for the other types
// and for a type without destinations in the last block).
func (m *HeteroModel) ForwardTypes(t *autograd.Tape, x []*autograd.Var, blocks []*HeteroBlock, train bool, seed uint64) ([]*autograd.Var, error) {
	if len(blocks) != m.cfg.Layers {
		return nil, layerErr("HeteroModel", "%d blocks for %d layers", len(blocks), m.cfg.Layers)
	}
	return m.forward(t, x, blocks, train, seed)
}

// ForwardLayers runs the first k layers without dropout (inference:
// 'strata embed') on k blocks and returns their outputs per type (nil
// for a type layer k does not compute): after the activation for k <
// Layers, the logits for k == Layers. Every layer computes the target
// type.
func (m *HeteroModel) ForwardLayers(t *autograd.Tape, x []*autograd.Var, blocks []*HeteroBlock, k int) ([]*autograd.Var, error) {
	if k < 1 || k > m.cfg.Layers || len(blocks) != k {
		return nil, layerErr("HeteroModel", "%d blocks for layer %d of %d", len(blocks), k, m.cfg.Layers)
	}
	return m.forward(t, x, blocks, false, 0)
}

// forward runs the first len(blocks) layers.
func (m *HeteroModel) forward(t *autograd.Tape, x []*autograd.Var, blocks []*HeteroBlock, train bool, seed uint64) ([]*autograd.Var, error) {
	const layer = "HeteroModel"
	s := &m.cfg.Schema
	T := len(s.NodeTypes)
	switch {
	case t == nil:
		return nil, layerErr(layer, "nil tape")
	case len(x) != T:
		return nil, layerErr(layer, "%d inputs for %d node types", len(x), T)
	}
	for l, k := range blocks {
		if err := k.check(s); err != nil {
			return nil, layerErr(layer, "block %d: %v", l, err)
		}
		if l > 0 {
			for ty := range T {
				if k.NumSrc[ty] != blocks[l-1].NumDst[ty] {
					return nil, layerErr(layer, "block %d has %d sources of type %d but block %d has %d destinations", l, k.NumSrc[ty], ty, l-1, blocks[l-1].NumDst[ty])
				}
			}
		}
	}
	for ty := range T {
		if !m.needIn[ty] || blocks[0].NumSrc[ty] == 0 {
			continue
		}
		if x[ty] == nil || x[ty].Rows != blocks[0].NumSrc[ty] || x[ty].Cols != s.InWidth(ty) {
			rows, cols := -1, -1
			if x[ty] != nil {
				rows, cols = x[ty].Rows, x[ty].Cols
			}
			return nil, layerErr(layer, "input of type %d is %dx%d, want %dx%d", ty, rows, cols, blocks[0].NumSrc[ty], s.InWidth(ty))
		}
	}
	h := x
	for l, k := range blocks {
		p := m.cfg.Dropout
		if l == 0 {
			p = m.cfg.InputDropout
		}
		in := make([]*autograd.Var, T)
		for ty := range T {
			in[ty] = h[ty]
			if in[ty] == nil || !train || p == 0 {
				continue
			}
			var err error
			if in[ty], err = t.Dropout(in[ty], p, rng.Derive(seed, uint64(l), uint64(ty))); err != nil {
				return nil, err
			}
		}
		out, err := m.layers[l].forward(t, in, k)
		if err != nil {
			return nil, err
		}
		if l < m.cfg.Layers-1 {
			for ty, v := range out {
				if v != nil {
					if out[ty], err = t.ReLU(v); err != nil {
						return nil, err
					}
				}
			}
		}
		h = out
	}
	return h, nil
}

// forward computes the layer's outputs for the needed destination types
// with destinations in k (nil elsewhere).
func (ly *heteroLayer) forward(t *autograd.Tape, h []*autograd.Var, k *HeteroBlock) ([]*autograd.Var, error) {
	out := make([]*autograd.Var, len(h))
	for ty := range h {
		nd := k.NumDst[ty]
		if !ly.need[ty] || nd == 0 {
			continue
		}
		if h[ty] == nil {
			return nil, layerErr("HeteroModel", "no input rows of type %d for its %d destinations", ty, nd)
		}
		hd, err := firstRows(t, h[ty], nd, k)
		if err != nil {
			return nil, err
		}
		// Root terms: sum the weights (and biases) first, one product.
		w, err := sumParams(t, ly.self[ty])
		if err != nil {
			return nil, err
		}
		bias, err := sumParams(t, ly.bias[ty])
		if err != nil {
			return nil, err
		}
		acc, err := t.MatMul(hd, w)
		if err != nil {
			return nil, err
		}
		for r, rel := range ly.rels {
			rb := k.Rels[r]
			if rel.Dst != ty || rb == nil || ly.neigh[r] == nil {
				continue // no edges here (a mean over none is 0)
			}
			src := h[rel.Src]
			if src == nil {
				return nil, layerErr("HeteroModel", "relation %s has edges but no input rows of type %d", rel.Name, rel.Src)
			}
			msg, err := rb.aggregate(t, src, ly.neigh[r], ly.out)
			if err != nil {
				return nil, err
			}
			if acc, err = t.Add(acc, msg); err != nil {
				return nil, err
			}
		}
		if out[ty], err = t.AddBias(acc, bias); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// firstRows returns the first n rows of h (the destinations among the
// sources), all of h when it has exactly n.
func firstRows(t *autograd.Tape, h *autograd.Var, n int, k *HeteroBlock) (*autograd.Var, error) {
	if h.Rows == n {
		return h, nil
	}
	idx, err := k.index(n)
	if err != nil {
		return nil, err
	}
	return t.GatherRows(h, idx)
}

// sumParams adds parameters of one shape as tape leaves (the sum's
// gradient reaches each of them).
func sumParams(t *autograd.Tape, ps []*Param) (*autograd.Var, error) {
	vs, err := vars(t, ps...)
	if err != nil {
		return nil, err
	}
	acc := vs[0]
	for _, v := range vs[1:] {
		if acc, err = t.Add(acc, v); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

// ---------------------------------------------------------------- blocks

// HeteroBlock is a back-end resident typed message-flow graph: per node
// type NumDst[t] destinations, which are the first of its NumSrc[t]
// sources, and per relation a NumDst[Dst] x NumSrc[Src] CSR matrix (nil
// when the relation has no edges in the block) with its mean weights.
// Not safe for concurrent use; Free releases it.
type HeteroBlock struct {
	NumDst, NumSrc []int
	Rels           []*RelBlock

	b   backend.Backend
	idx map[int]backend.Buffer // 0..n-1 index buffers, by n
}

// RelBlock is one relation's part of a HeteroBlock.
type RelBlock struct {
	A    backend.Sparse
	mean backend.Buffer // 1/in-degree of the edge's destination, per edge
	nnz  int
}

// NNZ returns the relation's number of edges.
func (r *RelBlock) NNZ() int { return r.nnz }

// aggregate is mean_{j in N(i)} h_j W for every destination i, projecting
// before aggregating when that is cheaper.
func (r *RelBlock) aggregate(t *autograd.Tape, h *autograd.Var, w *Param, out int) (*autograd.Var, error) {
	wv, err := w.Var(t)
	if err != nil {
		return nil, err
	}
	mean, err := t.Const(r.mean, r.nnz, 1)
	if err != nil {
		return nil, err
	}
	if h.Cols > out {
		z, err := t.MatMul(h, wv)
		if err != nil {
			return nil, err
		}
		return t.SpMM(r.A, z, mean)
	}
	agg, err := t.SpMM(r.A, h, mean)
	if err != nil {
		return nil, err
	}
	return t.MatMul(agg, wv)
}

// NewHeteroBlock validates and uploads a typed block: numDst[t] <=
// numSrc[t] for every type, and relation r's CSR (indptr[r],
// indices[r]) has numDst[rels[r].Dst] rows with entries in [0,
// numSrc[rels[r].Src]). The arrays are copied.
func NewHeteroBlock(b backend.Backend, rels []HeteroRel, numDst, numSrc []int, indptr [][]int64, indices [][]int32) (*HeteroBlock, error) {
	if b == nil {
		return nil, blockErr("nil backend")
	}
	T := len(numDst)
	if len(numSrc) != T || len(indptr) != len(rels) || len(indices) != len(rels) {
		return nil, blockErr("%d/%d type counts and %d/%d relation arrays for %d relations", len(numDst), len(numSrc), len(indptr), len(indices), len(rels))
	}
	for ty := range T {
		if numDst[ty] < 0 || numSrc[ty] > maxNodes || numDst[ty] > numSrc[ty] {
			return nil, blockErr("type %d: %d destinations and %d sources (destinations must be the first sources)", ty, numDst[ty], numSrc[ty])
		}
	}
	k := &HeteroBlock{NumDst: append([]int(nil), numDst...), NumSrc: append([]int(nil), numSrc...), Rels: make([]*RelBlock, len(rels)), b: b}
	ok := false
	defer func() {
		if !ok {
			k.Free()
		}
	}()
	for r, rel := range rels {
		if rel.Src < 0 || rel.Src >= T || rel.Dst < 0 || rel.Dst >= T {
			return nil, blockErr("relation %d: types %d -> %d out of range [0, %d)", r, rel.Src, rel.Dst, T)
		}
		nd, ns := numDst[rel.Dst], numSrc[rel.Src]
		ip, ix := indptr[r], indices[r]
		if len(ip) != nd+1 || ip[0] != 0 || ip[nd] != int64(len(ix)) {
			return nil, blockErr("relation %d: indptr of %d entries for %d destinations and %d edges", r, len(ip), nd, len(ix))
		}
		for i := range nd {
			if ip[i+1] < ip[i] {
				return nil, blockErr("relation %d: indptr decreases at row %d", r, i)
			}
		}
		for e, j := range ix {
			if j < 0 || int(j) >= ns {
				return nil, blockErr("relation %d: edge %d has source %d, want [0, %d)", r, e, j, ns)
			}
		}
		if len(ix) == 0 {
			continue
		}
		a, err := b.NewSparse(nd, ns, ip, ix)
		if err != nil {
			return nil, fmt.Errorf("nn: block: %w", err)
		}
		rb := &RelBlock{A: a, nnz: len(ix)}
		k.Rels[r] = rb
		w := make([]float32, len(ix))
		for i := range nd {
			inv := float32(1 / float64(max(ip[i+1]-ip[i], 1)))
			for e := ip[i]; e < ip[i+1]; e++ {
				w[e] = inv
			}
		}
		if rb.mean, err = b.Alloc(backend.Float32, len(w)); err != nil {
			return nil, fmt.Errorf("nn: block mean weights: %w", err)
		}
		if err := b.Upload(rb.mean, w); err != nil {
			return nil, fmt.Errorf("nn: block mean weights: %w", err)
		}
	}
	ok = true
	return k, nil
}

// UploadHeteroBlock uploads a sampled typed block (sample.HeteroBlock).
func UploadHeteroBlock(b backend.Backend, rels []HeteroRel, blk *sample.HeteroBlock) (*HeteroBlock, error) {
	if blk == nil || len(blk.SrcNodes) != len(blk.NumDst) || len(blk.Rels) != len(rels) {
		return nil, blockErr("malformed typed block")
	}
	numSrc := make([]int, len(blk.SrcNodes))
	for t, s := range blk.SrcNodes {
		numSrc[t] = len(s)
	}
	ip := make([][]int64, len(rels))
	ix := make([][]int32, len(rels))
	for r := range rels {
		ip[r], ix[r] = blk.Rels[r].Indptr, blk.Rels[r].Indices
	}
	return NewHeteroBlock(b, rels, blk.NumDst, numSrc, ip, ix)
}

// UploadHeteroBlocks uploads every block of a typed mini-batch, in
// order; on failure it frees those already uploaded.
func UploadHeteroBlocks(b backend.Backend, rels []HeteroRel, mb *sample.HeteroMiniBatch) ([]*HeteroBlock, error) {
	if mb == nil {
		return nil, blockErr("nil typed mini-batch")
	}
	out := make([]*HeteroBlock, 0, len(mb.Blocks))
	for i := range mb.Blocks {
		k, err := UploadHeteroBlock(b, rels, &mb.Blocks[i])
		if err != nil {
			for _, o := range out {
				o.Free()
			}
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

// check verifies the block is live and matches the schema's types.
func (k *HeteroBlock) check(s *HeteroSchema) error {
	if k == nil || k.b == nil {
		return blockErr("nil or freed typed block")
	}
	if len(k.NumDst) != len(s.NodeTypes) || len(k.Rels) != len(s.Rels) {
		return blockErr("block of %d types and %d relations for a model of %d and %d", len(k.NumDst), len(k.Rels), len(s.NodeTypes), len(s.Rels))
	}
	for r, rb := range k.Rels {
		if rb != nil && (rb.A.NumRows() != k.NumDst[s.Rels[r].Dst] || rb.A.NumCols() != k.NumSrc[s.Rels[r].Src]) {
			return blockErr("relation %d is %dx%d, the model's types want %dx%d", r, rb.A.NumRows(), rb.A.NumCols(), k.NumDst[s.Rels[r].Dst], k.NumSrc[s.Rels[r].Src])
		}
	}
	return nil
}

// index returns the int32 buffer 0..n-1 (cached).
func (k *HeteroBlock) index(n int) (backend.Buffer, error) {
	if buf, ok := k.idx[n]; ok {
		return buf, nil
	}
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(i)
	}
	buf, err := k.b.Alloc(backend.Int32, n)
	if err != nil {
		return nil, fmt.Errorf("nn: block index: %w", err)
	}
	if err := k.b.Upload(buf, v); err != nil {
		k.b.Free(buf)
		return nil, fmt.Errorf("nn: block index: %w", err)
	}
	if k.idx == nil {
		k.idx = map[int]backend.Buffer{}
	}
	k.idx[n] = buf
	return buf, nil
}

// Free releases the block. Free on nil is a no-op.
func (k *HeteroBlock) Free() {
	if k == nil || k.b == nil {
		return
	}
	for _, rb := range k.Rels {
		if rb == nil {
			continue
		}
		if rb.A != nil {
			k.b.FreeSparse(rb.A)
		}
		if rb.mean != nil {
			k.b.Free(rb.mean)
		}
	}
	for _, buf := range k.idx {
		k.b.Free(buf)
	}
	*k = HeteroBlock{}
}
