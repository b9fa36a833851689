package model

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/train"
)

// VersionTyped is model.json's version for typed models (architecture
// rgcn or hsage, a "typed" section); homogeneous models stay Version, so
// a build that predates typed models refuses one by its version number.
const VersionTyped = 2

// Typed is model.json's "typed" section: the typed graph the model reads
// (node types with their input widths, relations, target type, the types
// whose last-layer outputs it computes), whether it was trained on the
// graph with reverse relations added, and how the tensors form PyG
// modules (layers, pyg).
type Typed struct {
	NodeTypes []TypedNode     `json:"node_types"`
	Relations []TypedRelation `json:"relations"`
	Target    string          `json:"target"`
	Outputs   []string        `json:"outputs"`
	// AddReverse: the relations include the reverse ones
	// dataset.Hetero.AddReverse adds (train --add-reverse); inference
	// adds them to its dataset the same way.
	AddReverse bool `json:"add_reverse"`
	// Layers says, per layer, which relations have a conv and which node
	// types a root Linear (derived from the schema; checked on reading).
	Layers []TypedLayer `json:"layers"`
	PyG    PyGModel     `json:"pyg"`
}

// TypedNode is a node type: its name and the width of its features (0:
// the type has none and reads a constant input of ones, one column).
type TypedNode struct {
	Name  string `json:"name"`
	InDim int    `json:"in_dim"`
}

// TypedRelation is a relation (src, rel, dst), PyG's edge type.
type TypedRelation struct {
	Src string `json:"src"`
	Rel string `json:"rel"`
	Dst string `json:"dst"`
}

// Name is the relation's full name, src___rel___dst.
func (r TypedRelation) Name() string {
	return r.Src + dataset.RelSep + r.Rel + dataset.RelSep + r.Dst
}

// TypedLayer lists one layer's modules: Convs the relations
// (src___rel___dst) with a conv in HeteroConv, Roots the node types with
// a root Linear.
type TypedLayer struct {
	Convs []string `json:"convs"`
	Roots []string `json:"roots"`
}

// PyGModel names the PyG model the tensors load into and the parts of
// Strata's model that PyG's HeteroConv has no module for.
type PyGModel struct {
	Model    string   `json:"model"`
	NotInPyG []string `json:"not_in_pyg"`
}

// NewTypedMeta describes a typed model of cfg (train's common settings;
// Model rgcn or hsage) for schema and classes classes; the caller fills
// in the dataset, the selection and the training configuration.
// Features are used as stored (typed training does not normalize them).
func NewTypedMeta(cfg train.Common, schema nn.HeteroSchema, classes int, addReverse bool) Meta {
	m := Meta{Format: Format, Version: VersionTyped, StrataVersion: train.Version, Architecture: cfg.Model,
		Layers: cfg.Layers, Hidden: cfg.Hidden, Classes: classes, Heads: 1, OutHeads: 1, Activation: "relu",
		Features: Features{RowNorm: train.RowNormOff, Storage: Dense}}
	ty := &Typed{Target: schema.NodeTypes[schema.Target], AddReverse: addReverse, Outputs: []string{schema.NodeTypes[schema.Target]}}
	for t, name := range schema.NodeTypes {
		ty.NodeTypes = append(ty.NodeTypes, TypedNode{Name: name, InDim: schema.InDims[t]})
	}
	for _, r := range schema.Rels {
		ty.Relations = append(ty.Relations, TypedRelation{Src: schema.NodeTypes[r.Src], Rel: relOnly(r.Name), Dst: schema.NodeTypes[r.Dst]})
	}
	for _, t := range schema.Outputs {
		if name := schema.NodeTypes[t]; !slices.Contains(ty.Outputs, name) {
			ty.Outputs = append(ty.Outputs, name)
		}
	}
	m.Typed = ty
	return m
}

// relOnly is the rel part of src___rel___dst (the name itself when it
// has no separators).
func relOnly(full string) string {
	parts := strings.Split(full, dataset.RelSep)
	if len(parts) == 3 {
		return parts[1]
	}
	return full
}

// HeteroConfig is the nn configuration of a typed model, for
// nn.NewHetero (no dropout: a saved model is for inference).
func (m *Meta) HeteroConfig() nn.HeteroConfig {
	return nn.HeteroConfig{Kind: m.Architecture, Schema: m.Typed.Schema(), Hidden: m.Hidden, OutDim: m.Classes, Layers: m.Layers}
}

// Schema is the section as nn's schema. Names must be valid (check).
func (ty *Typed) Schema() nn.HeteroSchema {
	s := nn.HeteroSchema{}
	index := map[string]int{}
	for t, nt := range ty.NodeTypes {
		s.NodeTypes = append(s.NodeTypes, nt.Name)
		s.InDims = append(s.InDims, nt.InDim)
		index[nt.Name] = t
	}
	for _, r := range ty.Relations {
		s.Rels = append(s.Rels, nn.HeteroRel{Src: index[r.Src], Dst: index[r.Dst], Name: r.Name()})
	}
	s.Target = index[ty.Target]
	for _, o := range ty.Outputs {
		if t := index[o]; t != s.Target {
			s.Outputs = append(s.Outputs, t)
		}
	}
	return s
}

// checkTyped validates the typed section of m (read from path): names,
// widths, the relations' types, the target, and the derived layers and
// pyg fields.
func (m *Meta) checkTyped(path string) error {
	ty := m.Typed
	version := VersionTyped
	if m.IsLink() {
		version = VersionLink
	}
	switch {
	case m.Version != version:
		return bad(path, "a %s model is format version %d, not %d", m.Architecture, version, m.Version)
	case m.InDim != 0:
		return bad(path, "in_dim %d: a typed model's input widths are typed.node_types' (in_dim 0)", m.InDim)
	case len(ty.NodeTypes) == 0 || len(ty.NodeTypes) > dataset.MaxNodeTypes:
		return bad(path, "typed.node_types: %d types, want 1 to %d", len(ty.NodeTypes), dataset.MaxNodeTypes)
	case len(ty.Relations) > dataset.MaxEdgeTypes:
		return bad(path, "typed.relations: %d relations, want at most %d", len(ty.Relations), dataset.MaxEdgeTypes)
	case len(ty.Outputs) == 0 || len(ty.Outputs) > len(ty.NodeTypes) || ty.Outputs[0] != ty.Target:
		return bad(path, "typed.outputs %q must start with the target %q", clip(fmt.Sprint(ty.Outputs)), clip(ty.Target))
	}
	types := map[string]bool{}
	for t, nt := range ty.NodeTypes {
		if msg := dataset.CheckTypeName(nt.Name); msg != "" {
			return bad(path, "typed.node_types[%d]: %s", t, msg)
		}
		if types[nt.Name] {
			return bad(path, "typed.node_types: %q listed twice", nt.Name)
		}
		types[nt.Name] = true
		if nt.InDim < 0 || nt.InDim > MaxInDim {
			return bad(path, "typed.node_types[%d] (%s): in_dim %d not in [0, %d]", t, nt.Name, nt.InDim, MaxInDim)
		}
	}
	rels := map[string]bool{}
	for r, rel := range ty.Relations {
		if msg := dataset.CheckTypeName(rel.Rel); msg != "" {
			return bad(path, "typed.relations[%d]: relation %s", r, msg)
		}
		if !types[rel.Src] || !types[rel.Dst] {
			return bad(path, "typed.relations[%d]: %s -> %s names a node type typed.node_types does not list", r, clip(rel.Src), clip(rel.Dst))
		}
		if rels[rel.Name()] {
			return bad(path, "typed.relations: %s listed twice", rel.Name())
		}
		rels[rel.Name()] = true
	}
	if !types[ty.Target] {
		return bad(path, "typed.target %q is not a node type", clip(ty.Target))
	}
	seen := map[string]bool{}
	for _, o := range ty.Outputs {
		if !types[o] || seen[o] {
			return bad(path, "typed.outputs: %q is not a node type or is repeated", clip(o))
		}
		seen[o] = true
	}
	specs, err := nn.HeteroParamSpecs(m.HeteroConfig())
	if err != nil {
		return bad(path, "%v", err)
	}
	layers, pyg := typedModules(m.Architecture, ty, m.Layers, specs)
	if !sameJSON(layers, ty.Layers) {
		return bad(path, "typed.layers differ from the modules its schema and %d layers imply", m.Layers)
	}
	if !sameJSON(pyg, ty.PyG) {
		return bad(path, "typed.pyg differs from the %s model's description", m.Architecture)
	}
	if m.IsLink() {
		return m.checkTypedLink(path)
	}
	return nil
}

func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// typedModules derives typed.layers and typed.pyg from the parameters.
func typedModules(arch string, ty *Typed, layers int, specs []nn.HeteroParamSpec) ([]TypedLayer, PyGModel) {
	out := make([]TypedLayer, layers)
	for l := range out {
		out[l] = TypedLayer{Convs: []string{}, Roots: []string{}}
	}
	for _, s := range specs {
		switch s.Role {
		case nn.RoleNeigh:
			out[s.Layer].Convs = append(out[s.Layer].Convs, ty.Relations[s.Rel].Name())
		case nn.RoleRoot:
			out[s.Layer].Roots = append(out[s.Layer].Roots, ty.NodeTypes[s.Type].Name)
		}
	}
	var p PyGModel
	if arch == nn.KindHSAGE {
		p.Model = "torch.nn.ModuleList convs of HeteroConv({edge_type: SAGEConv((in_src, in_dst), out)}, aggr='sum'), one per layer over typed.layers[K].convs; " +
			"ModuleList roots of torch_geometric.nn.module_dict.ModuleDict({node_type: Linear(in, out)}) over typed.layers[K].roots; ReLU between layers (docs/models.md)"
		p.NotInPyG = []string{"roots: a node type no relation enters keeps its own W x + b (HeteroConv drops such a type); none when every computed type receives a relation"}
	} else {
		p.Model = "torch.nn.ModuleList convs of HeteroConv({edge_type: SAGEConv((in_src, in_dst), out, root_weight=False, bias=False)}, aggr='sum'), one per layer over typed.layers[K].convs; " +
			"ModuleList roots of torch_geometric.nn.module_dict.ModuleDict({node_type: Linear(in, out)}) over typed.layers[K].roots, added to the convs' sum; ReLU between layers (docs/models.md)"
		p.NotInPyG = []string{"roots: R-GCN's root weight and bias per node type (PyG's RGCNConv has one root for all nodes and one input width; here each type has its own), a Linear per type outside HeteroConv"}
	}
	return out, p
}

// typedSpecs lists a typed model's tensors: PyG names (HeteroConv's
// convs.K.convs.<src___rel___dst>.lin_l/lin_r, the roots' roots.K.<type>)
// for nn's parameters, in nn's order.
func (m *Meta) typedSpecs() ([]spec, int64) {
	specs, err := nn.HeteroParamSpecs(m.HeteroConfig())
	if err != nil {
		return nil, 0
	}
	ty := m.Typed
	var out []spec
	var total int64
	for _, s := range specs {
		var name, layout string
		var shape []int
		conv := func(r int) string { return fmt.Sprintf("convs.%d.convs.%s.", s.Layer, relKey(ty.Relations[r])) }
		root := func(t int) string { return fmt.Sprintf("roots.%d.%s.", s.Layer, typeKey(ty.NodeTypes[t].Name)) }
		switch s.Role {
		case nn.RoleNeigh:
			name, layout, shape = conv(s.Rel)+"lin_l.weight", "transposed", []int{s.Cols, s.Rows}
		case nn.RoleSelf:
			name, layout, shape = conv(s.Rel)+"lin_r.weight", "transposed", []int{s.Cols, s.Rows}
		case nn.RoleBias:
			name, layout, shape = conv(s.Rel)+"lin_l.bias", "reshaped", []int{s.Cols}
		case nn.RoleRoot:
			name, layout, shape = root(s.Type)+"weight", "transposed", []int{s.Cols, s.Rows}
		default: // RoleRootBias
			name, layout, shape = root(s.Type)+"bias", "reshaped", []int{s.Cols}
		}
		out = append(out, spec{Tensor: Tensor{Name: name, Param: s.Name, Shape: shape, Layout: layout}, rows: s.Rows, cols: s.Cols})
		total += 4 * int64(s.Rows) * int64(s.Cols)
	}
	m.decoderSpecs(func(name, param, layout string, rows, cols int, shape ...int) {
		out = append(out, spec{Tensor: Tensor{Name: name, Param: param, Shape: shape, Layout: layout}, rows: rows, cols: cols})
		total += 4 * int64(rows) * int64(cols)
	})
	return out, total
}

// relKey is PyG's ModuleDict key of an edge type (module_dict.py
// to_internal_key): the tuple joined by "___" in angle brackets, '.'
// written '#'.
func relKey(r TypedRelation) string {
	return "<" + strings.ReplaceAll(r.Name(), ".", "#") + ">"
}

// typeKey is PyG's ModuleDict key of a node type: '.' written '#', and
// a name torch.nn.ModuleDict has as an attribute in angle brackets.
func typeKey(name string) string {
	if slices.Contains(moduleDictAttrs, name) {
		name = "<" + name + ">"
	}
	return strings.ReplaceAll(name, ".", "#")
}

// moduleDictAttrs are the public names of dir(torch.nn.ModuleDict)
// (torch 2.x) that a node type name can take; PyG's ModuleDict wraps
// such keys in angle brackets.
var moduleDictAttrs = []string{"T_destination", "add_module", "apply", "bfloat16", "buffers", "call_super_init", "children",
	"clear", "compile", "cpu", "cuda", "double", "dump_patches", "eval", "extra_repr", "float", "forward", "get_buffer",
	"get_extra_state", "get_parameter", "get_submodule", "half", "ipu", "items", "keys", "load_state_dict", "modules", "mtia",
	"named_buffers", "named_children", "named_modules", "named_parameters", "parameters", "pop", "register_backward_hook",
	"register_buffer", "register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
	"register_full_backward_pre_hook", "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook",
	"register_module", "register_parameter", "register_state_dict_post_hook", "register_state_dict_pre_hook",
	"requires_grad_", "set_extra_state", "set_submodule", "share_memory", "state_dict", "to", "to_empty", "train", "type",
	"update", "values", "xpu", "zero_grad"}

// fillTyped sets the derived fields of a typed section (Save).
func (m *Meta) fillTyped() {
	specs, err := nn.HeteroParamSpecs(m.HeteroConfig())
	if err != nil {
		return // check reports it
	}
	m.Typed.Layers, m.Typed.PyG = typedModules(m.Architecture, m.Typed, m.Layers, specs)
}

// SchemaDiff compares the typed graph a model reads with h's (after
// AddReverse when the model was trained with it) and returns one line
// naming the first difference, "" when they agree: the node types (names,
// order, feature widths), the relations, the target type and the class
// count.
func (ty *Typed) SchemaDiff(h *dataset.Hetero, classes int) string {
	if d := ty.GraphDiff(h); d != "" {
		return d
	}
	if h.Labels != nil && h.NumClasses > 0 {
		if name := h.NodeTypes[h.Target].Name; name != ty.Target {
			return fmt.Sprintf("its target type is %q, the model's is %q", name, ty.Target)
		}
		if h.NumClasses != classes {
			return fmt.Sprintf("it has %d classes, the model predicts %d", h.NumClasses, classes)
		}
	}
	return ""
}

// GraphDiff is SchemaDiff without the labels (a typed link model's
// check): the node types and the relations.
func (ty *Typed) GraphDiff(h *dataset.Hetero) string {
	if len(h.NodeTypes) != len(ty.NodeTypes) {
		return fmt.Sprintf("it has %d node types %v, the model reads %d %v", len(h.NodeTypes), heteroTypeNames(h), len(ty.NodeTypes), typedTypeNames(ty))
	}
	for t, nt := range h.NodeTypes {
		want := ty.NodeTypes[t]
		if nt.Name != want.Name {
			return fmt.Sprintf("its node type %d is %q, the model's is %q (types %v, the model's %v)", t, nt.Name, want.Name, heteroTypeNames(h), typedTypeNames(ty))
		}
		if nt.FeatDim != want.InDim {
			return fmt.Sprintf("node type %q has %d features, the model reads %d", nt.Name, nt.FeatDim, want.InDim)
		}
	}
	if len(h.EdgeTypes) != len(ty.Relations) {
		return fmt.Sprintf("it has %d relations, the model reads %d (%s)", len(h.EdgeTypes), len(ty.Relations), ty.relationList(h))
	}
	for r := range h.EdgeTypes {
		if got, want := h.EdgeTypeName(r), ty.Relations[r].Name(); got != want {
			return fmt.Sprintf("its relation %d is %s, the model's is %s", r, got, want)
		}
	}
	return ""
}

func heteroTypeNames(h *dataset.Hetero) []string {
	var s []string
	for _, nt := range h.NodeTypes {
		s = append(s, nt.Name)
	}
	return s
}

func typedTypeNames(ty *Typed) []string {
	var s []string
	for _, nt := range ty.NodeTypes {
		s = append(s, nt.Name)
	}
	return s
}

// relationList names the relations only one side has.
func (ty *Typed) relationList(h *dataset.Hetero) string {
	have := map[string]bool{}
	for r := range h.EdgeTypes {
		have[h.EdgeTypeName(r)] = true
	}
	want := map[string]bool{}
	var missing, extra []string
	for _, r := range ty.Relations {
		want[r.Name()] = true
		if !have[r.Name()] {
			missing = append(missing, r.Name())
		}
	}
	for r := range h.EdgeTypes {
		if n := h.EdgeTypeName(r); !want[n] {
			extra = append(extra, n)
		}
	}
	return fmt.Sprintf("missing %v, not in the model %v", missing, extra)
}
