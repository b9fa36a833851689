package model

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

// builtLink makes a link model: a sage encoder (embeddings 5 wide) and
// decoder kind's parameters, with distinct values.
func builtLink(t testing.TB, decoder string) *Model {
	t.Helper()
	m := built(t, train.SAGE)
	meta := NewMeta(train.Defaults(train.SAGE).Common, 11, 5)
	meta.Layers, meta.Hidden, meta.Classes = 3, 5, 5
	meta.Features, meta.Dataset, meta.Training = m.Meta.Features, m.Meta.Dataset, m.Meta.Training
	meta.Task = TaskLink
	meta.Link = &Link{Decoder: decoder, Split: link.DefaultFractions, SplitSource: link.SourceRandom, Seed: 7, HitsK: 50}
	val, test := link.Metrics{AUC: 0.9, MRR: 0.2, Hits: 0.5, Loss: 0.4}, link.Metrics{AUC: 0.8, MRR: 0.1, Hits: 0.4, Loss: 0.5}
	meta.Selection = Selected{Rule: train.SelectBest, Epoch: 2, Epochs: 3, Val: &val, Test: &test}
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := nn.New(b, meta.Config())
	if err != nil {
		t.Fatal(err)
	}
	dec, err := link.NewDecoder(b, decoder, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	return distinctModel(t, b, meta, append(enc.Params(), dec.Params()...))
}

// TestLinkRoundTrip: a link model (dot and mlp decoders) saves and loads
// bit for bit, with the encoder under the node model's PyG names, the
// MLP decoder's Linears as decoder.lins.K, and task, version and
// metrics in model.json.
func TestLinkRoundTrip(t *testing.T) {
	for _, dec := range []string{link.DecoderDot, link.DecoderMLP} {
		t.Run(dec, func(t *testing.T) {
			m := builtLink(t, dec)
			dir := t.TempDir()
			if err := Save(dir, m); err != nil {
				t.Fatal(err)
			}
			got, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got.Meta.Version != VersionLink || !got.Meta.IsLink() || got.Meta.Link.Decoder != dec || *got.Meta.Selection.Test != *m.Meta.Selection.Test {
				t.Fatalf("meta back: version %d task %q link %+v selection %+v", got.Meta.Version, got.Meta.Task, got.Meta.Link, got.Meta.Selection)
			}
			sameParams(t, got.Params, m.Params)
			st := readWeights(t, dir)
			want := map[string][]uint64{"convs.0.lin_l.weight": {5, 11}, "convs.2.lin_r.weight": {5, 5}}
			if dec == link.DecoderMLP {
				want["decoder.lins.0.weight"], want["decoder.lins.0.bias"] = []uint64{5, 5}, []uint64{5}
				want["decoder.lins.1.weight"], want["decoder.lins.1.bias"] = []uint64{1, 5}, []uint64{1}
			}
			if n := 9 + 4*btoi(dec == link.DecoderMLP); st.Len() != n {
				t.Errorf("%d tensors, want %d: %v", st.Len(), n, st.Names())
			}
			for name, shape := range want {
				tv, ok := st.Tensor(name)
				if !ok || len(tv.Shape()) != len(shape) || (len(shape) > 1 && tv.Shape()[1] != shape[1]) || tv.Shape()[0] != shape[0] {
					t.Errorf("tensor %s: %v (present %v), want shape %v", name, tv.Shape(), ok, shape)
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestLinkMetaRefused: link sections that do not fit are refused with
// a *FormatError naming the field.
func TestLinkMetaRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(m *Meta)
		want string
	}{
		{"no section", func(m *Meta) { m.Link = nil }, "needs the link section"},
		{"decoder", func(m *Meta) { m.Link.Decoder = "bilinear" }, `link.decoder "bilinear"`},
		{"source", func(m *Meta) { m.Link.SplitSource = "guess" }, "link.split_source"},
		{"split", func(m *Meta) { m.Link.Split.Train = 0.99 }, "link.split_edges"},
		{"width", func(m *Meta) { m.Classes = 7 }, "classes 7"},
		{"metrics", func(m *Meta) { m.Selection.Test = nil }, "val and test metrics"},
		{"auc", func(m *Meta) { m.Selection.Val.AUC = 2 }, "not in [0, 1]"},
		{"task", func(m *Meta) { m.Task = "triangle" }, `task "triangle"`},
		{"node with link", func(m *Meta) { m.Task = "" }, "link section or link metrics in a node-classification model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := builtLink(t, link.DecoderMLP)
			val, test := *m.Meta.Selection.Val, *m.Meta.Selection.Test
			m.Meta.Selection.Val, m.Meta.Selection.Test = &val, &test
			l := *m.Meta.Link
			m.Meta.Link = &l
			tc.edit(&m.Meta)
			err := Save(t.TempDir(), m)
			var fe *FormatError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a FormatError naming %q", err, tc.want)
			}
		})
	}
}
