package model

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nlpodyssey/safetensors"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

// typedSchema: paper (6 features, the target), author (none), inst.x (3;
// a dot, which PyG's keys write '#'), and the relations writes (author ->
// paper), cites (paper -> paper) and employs (inst.x -> author). No
// relation enters inst.x, so hsage gives it a root of its own.
func typedSchema() nn.HeteroSchema {
	return nn.HeteroSchema{NodeTypes: []string{"paper", "author", "inst.x"}, InDims: []int{6, 0, 3},
		Rels: []nn.HeteroRel{{Src: 1, Dst: 0, Name: "author___writes___paper"}, {Src: 0, Dst: 0, Name: "paper___cites___paper"},
			{Src: 2, Dst: 1, Name: "inst.x___employs___author"}}, Target: 0}
}

// builtTyped makes a 3-layer typed model of kind with distinct values in
// every parameter, and its Meta.
func builtTyped(t testing.TB, kind string) *Model {
	t.Helper()
	cfg := train.HeteroDefaults(kind).Common
	cfg.Layers, cfg.Hidden = 3, 5
	meta := NewTypedMeta(cfg, typedSchema(), 4, true)
	meta.Dataset = Dataset{Name: "toy", Fingerprint: "h1:00", Nodes: 9, Edges: 20}
	meta.Selection = Selected{Rule: train.SelectBest, Epoch: 2, Epochs: 3, ValAccuracy: 0.5}
	meta.Training = json.RawMessage(`{"model":"` + kind + `"}`)
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewHetero(b, meta.HeteroConfig())
	if err != nil {
		t.Fatal(err)
	}
	return distinctModel(t, b, meta, m.Params())
}

// TestTypedRoundTrip: a typed model saves under HeteroConv's names and
// loads back bit for bit into a model nn builds from model.json alone.
func TestTypedRoundTrip(t *testing.T) {
	cases := map[string]struct {
		names, absent []string
		roots0        []string
	}{
		train.HSAGE: {
			names: []string{"convs.2.convs.<author___writes___paper>.lin_l.weight", "convs.2.convs.<author___writes___paper>.lin_l.bias",
				"convs.2.convs.<paper___cites___paper>.lin_r.weight", "convs.1.convs.<inst#x___employs___author>.lin_l.weight",
				"roots.0.inst#x.weight", "roots.0.inst#x.bias"},
			// The last layer computes only the target: no conv into author there.
			absent: []string{"convs.2.convs.<inst#x___employs___author>.lin_l.weight", "roots.2.paper.weight"},
			roots0: []string{"inst.x"},
		},
		train.RGCN: {
			names: []string{"convs.2.convs.<author___writes___paper>.lin_l.weight", "roots.2.paper.weight", "roots.2.paper.bias",
				"roots.0.author.weight", "roots.0.inst#x.weight"},
			absent: []string{"convs.2.convs.<author___writes___paper>.lin_l.bias", "convs.2.convs.<paper___cites___paper>.lin_r.weight", "roots.2.author.weight"},
			roots0: []string{"paper", "author", "inst.x"},
		},
	}
	for kind, want := range cases {
		t.Run(kind, func(t *testing.T) {
			m := builtTyped(t, kind)
			dir := t.TempDir()
			if err := Save(dir, m); err != nil {
				t.Fatal(err)
			}
			got, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Params) != len(m.Params) {
				t.Fatalf("%d params back, saved %d", len(got.Params), len(m.Params))
			}
			for i, p := range m.Params {
				q := got.Params[i]
				if q.Name != p.Name || q.Rows != p.Rows || q.Cols != p.Cols {
					t.Fatalf("param %d is %s %dx%d, saved %s %dx%d", i, q.Name, q.Rows, q.Cols, p.Name, p.Rows, p.Cols)
				}
				for j := range p.Data {
					if math.Float32bits(q.Data[j]) != math.Float32bits(p.Data[j]) {
						t.Fatalf("%s[%d] = %v, saved %v", p.Name, j, q.Data[j], p.Data[j])
					}
				}
			}
			if got.Meta.Version != VersionTyped || got.Meta.Typed == nil || !got.Meta.Typed.AddReverse || got.Meta.Typed.Target != "paper" {
				t.Fatalf("metadata changed: version %d, typed %+v", got.Meta.Version, got.Meta.Typed)
			}
			if r := got.Meta.Typed.Layers[0].Roots; !slices.Equal(r, want.roots0) {
				t.Errorf("layer 0 roots %v, want %v", r, want.roots0)
			}
			// nn rebuilds the model from model.json and takes the weights.
			b, _ := cpu.New(cpu.Options{})
			hm, err := nn.NewHetero(b, got.Meta.HeteroConfig())
			if err != nil {
				t.Fatal(err)
			}
			if err := nn.LoadParams(b, hm.Params(), got.Params); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(dir, WeightsFile))
			if err != nil {
				t.Fatal(err)
			}
			st, err := safetensors.Deserialize(raw)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range want.names {
				if _, ok := st.Tensor(name); !ok {
					t.Errorf("no tensor %s in %v", name, st.Names())
				}
			}
			for _, name := range want.absent {
				if _, ok := st.Tensor(name); ok {
					t.Errorf("tensor %s present; the model has no such parameter", name)
				}
			}
			// lin_l.weight of writes in layer 0 is [hidden, 1]: author
			// has no features and reads a column of ones.
			tv, _ := st.Tensor("convs.0.convs.<author___writes___paper>.lin_l.weight")
			if s := tv.Shape(); len(s) != 2 || s[0] != 5 || s[1] != 1 {
				t.Errorf("featureless author's weight has shape %v, want [5 1]", s)
			}
		})
	}
}

// TestTypedLoadRefuses: a typed model.json that does not add up is
// refused with a *FormatError naming what is wrong.
func TestTypedLoadRefuses(t *testing.T) {
	m := builtTyped(t, train.HSAGE)
	typed := func(f func(ty map[string]any)) func(m map[string]any) {
		return func(m map[string]any) { f(m["typed"].(map[string]any)) }
	}
	edits := []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"version 1", func(m map[string]any) { m["version"] = 1 }, "is format version 2, not 1"},
		{"no typed section", func(m map[string]any) { delete(m, "typed") }, "needs the typed section"},
		{"typed sage", func(m map[string]any) { m["architecture"] = "sage" }, "only rgcn and hsage are typed"},
		{"width", typed(func(ty map[string]any) { ty["node_types"].([]any)[0].(map[string]any)["in_dim"] = 7 }), "[5 7]"},
		{"unknown type", typed(func(ty map[string]any) { ty["relations"].([]any)[0].(map[string]any)["src"] = "venue" }), "names a node type"},
		{"bad name", typed(func(ty map[string]any) { ty["node_types"].([]any)[1].(map[string]any)["name"] = "a___b" }), "typed.node_types[1]"},
		{"target", typed(func(ty map[string]any) { ty["target"] = "nobody" }), "typed.outputs"},
		{"layers", typed(func(ty map[string]any) { ty["layers"].([]any)[0].(map[string]any)["roots"] = []any{} }), "typed.layers differ"},
		{"huge width", typed(func(ty map[string]any) { ty["node_types"].([]any)[0].(map[string]any)["in_dim"] = 1 << 40 }), "in_dim"},
	}
	for _, tc := range edits {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Save(dir, m); err != nil {
				t.Fatal(err)
			}
			editMeta(tc.edit)(dir)
			_, err := Load(dir)
			var fe *FormatError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) || filepath.Base(fe.Path) != MetaFile {
				t.Fatalf("error %v, want a *FormatError on %s containing %q", err, MetaFile, tc.want)
			}
		})
	}
}
