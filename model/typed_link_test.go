package model

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

// builtTypedLink is a 2-layer hsage link model of typedSchema's
// author___writes___paper with an mlp decoder, distinct values in every
// parameter.
func builtTypedLink(t *testing.T) *Model {
	t.Helper()
	cfg := train.HeteroDefaults(train.HSAGE).Common
	cfg.Layers, cfg.Hidden = 2, 5
	s := typedSchema()
	s.Target, s.Outputs = 1, []int{1, 0} // author, then paper
	meta := NewTypedMeta(cfg, s, cfg.Hidden, false)
	meta.Task = TaskLink
	meta.Link = &Link{Decoder: link.DecoderMLP, Split: link.DefaultFractions, SplitSource: link.SourceRandom, Seed: 1, HitsK: 50,
		Relation: "author___writes___paper"}
	meta.Dataset = Dataset{Name: "toy", Fingerprint: "h1:00", Nodes: 9, Edges: 20}
	meta.Selection = Selected{Rule: train.SelectBest, Epoch: 1, Epochs: 2, Val: &link.Metrics{AUC: 0.75, MRR: 0.5, Hits: 0.25, Loss: 0.6},
		Test: &link.Metrics{AUC: 0.7, MRR: 0.4, Hits: 0.2, Loss: 0.65}}
	meta.Training = json.RawMessage(`{"model":"hsage"}`)
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := nn.NewHetero(b, meta.HeteroConfig())
	if err != nil {
		t.Fatal(err)
	}
	dec, err := link.NewDecoder(b, link.DecoderMLP, cfg.Hidden, 0)
	if err != nil {
		t.Fatal(err)
	}
	return distinctModel(t, b, meta, slices.Concat(enc.Params(), dec.Params()))
}

// TestTypedLinkRoundTrip: a typed link model saves as format version 3
// with the typed and link sections, the encoder under HeteroConv's names
// and the decoder under decoder.lins.*, and loads back bit for bit.
func TestTypedLinkRoundTrip(t *testing.T) {
	m := builtTypedLink(t)
	dir := t.TempDir()
	if err := Save(dir, m); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameParams(t, got.Params, m.Params)
	g := got.Meta
	if g.Version != VersionLink || !g.IsLink() || g.Typed == nil || g.Link.Relation != "author___writes___paper" ||
		g.Typed.Target != "author" || !slices.Equal(g.Typed.Outputs, []string{"author", "paper"}) || *g.Selection.Test != *m.Meta.Selection.Test {
		t.Fatalf("meta back: version %d, task %q, link %+v, typed %+v", g.Version, g.Task, g.Link, g.Typed)
	}
	st := readWeights(t, dir)
	for _, name := range []string{"convs.1.convs.<author___writes___paper>.lin_l.weight", "decoder.lins.0.weight", "decoder.lins.1.bias"} {
		if _, ok := st.Tensor(name); !ok {
			t.Errorf("no tensor %s", name)
		}
	}
}

// TestTypedLinkBadMeta: a typed link model.json that does not hold
// together is refused with one line naming the field.
func TestTypedLinkBadMeta(t *testing.T) {
	m := builtTypedLink(t)
	dir := t.TempDir()
	if err := Save(dir, m); err != nil {
		t.Fatal(err)
	}
	good, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		edit func(*Meta)
		want string
	}{
		"no relation":      {func(m *Meta) { m.Link.Relation = "" }, "needs link.relation"},
		"unknown relation": {func(m *Meta) { m.Link.Relation = "paper___writes___author" }, "not one of typed.relations"},
		"wrong target": {func(m *Meta) {
			m.Link.Relation = "paper___cites___paper"
		}, "typed.target"},
		"typed version": {func(m *Meta) { m.Version = VersionTyped }, "format version 3"},
		"engine":        {func(m *Meta) { m.Link.Engine = "dsp" }, "one device"},
		"homogeneous relation": {func(m *Meta) {
			m.Typed, m.Architecture = nil, "sage"
		}, "only a typed link model"},
	} {
		meta := good.Meta
		l, ty := *meta.Link, *meta.Typed
		meta.Link, meta.Typed = &l, &ty
		tc.edit(&meta)
		b, err := json.Marshal(&meta)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseMeta(MetaFile, b)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line with %q", name, err, tc.want)
		}
	}
}
