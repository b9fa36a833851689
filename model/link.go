package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/train"
)

// VersionLink is model.json's version for link-prediction models (Task
// TaskLink): an encoder whose output, the embeddings, is Classes wide,
// and a decoder (Link.Decoder) scoring pairs of them. The encoder is
// homogeneous (gcn, sage or gat), or typed (rgcn or hsage, with the
// typed section; Link.Relation names the relation whose links it
// predicts): a typed link model is VersionLink too, so that a build
// reading typed node models but not link models refuses it by number.
const VersionLink = 3

// Tasks of Meta.Task.
const (
	TaskNode = "node" // node classification (an empty Task too)
	TaskLink = "link"
)

// DecoderPrefix starts the Strata names of a link model's decoder
// parameters ("decoder.lin0.weight"), and the PyG names of its tensors
// ("decoder.lins.0.weight").
const DecoderPrefix = "decoder."

// Link describes a link-prediction model beyond its encoder: the decoder
// and what rebuilds the run's edge split, whose test links and
// negatives 'strata evaluate' scores again. The whole configuration is
// Meta.Training (link.Config as the report has it); these fields repeat
// the settings inference needs, and a reader checks they agree with it.
type Link struct {
	// Decoder is dot (the inner product of the two embeddings) or mlp
	// (OGB's LinkPredictor on their elementwise product).
	Decoder string `json:"decoder"`
	// Split is the fractions of the random edge split, SplitSource
	// "random" (split by Seed) or "stored" (the dataset's edge_split/
	// directory, its negatives drawn by Seed; Split is then the
	// configuration's, unused).
	Split       link.Fractions `json:"split_edges"`
	SplitSource string         `json:"split_source"`
	Seed        uint64         `json:"seed"`
	HitsK       int            `json:"hits_k"`
	// Engine is the trainer: "" for one device, "dsp" for the DSP engine.
	Engine  string `json:"engine,omitempty"`
	Devices int    `json:"devices,omitempty"`
	// Relation is a typed link model's relation (src___rel___dst, one of
	// typed.relations): its links were split and are scored, pairs of a
	// source-type node (typed.target) and a destination-type node.
	// Absent for a homogeneous model.
	Relation string `json:"relation,omitempty"`
}

// IsLink reports whether m is a link-prediction model.
func (m *Meta) IsLink() bool { return m.Task == TaskLink }

// checkLink validates the link section of m (Task TaskLink).
func (m *Meta) checkLink(path string) error {
	l := m.Link
	switch {
	case l == nil:
		return bad(path, "a link model needs the link section (decoder, split)")
	case m.Version != VersionLink:
		return bad(path, "a link model is format version %d, not %d", VersionLink, m.Version)
	case m.Typed == nil && l.Relation != "":
		return bad(path, "link.relation %q in a homogeneous model: only a typed link model has one", clip(l.Relation))
	case m.Typed != nil && l.Relation == "":
		return bad(path, "a typed link model needs link.relation (src___rel___dst)")
	case m.Typed != nil && (l.Engine != "" || l.Devices != 0):
		return bad(path, "link.engine %q, devices %d: typed link prediction trains on one device", clip(l.Engine), l.Devices)
	case l.Decoder != link.DecoderDot && l.Decoder != link.DecoderMLP:
		return bad(path, "link.decoder %q is not dot or mlp", clip(l.Decoder))
	case l.SplitSource != link.SourceRandom && l.SplitSource != link.SourceStored:
		return bad(path, "link.split_source %q is not %s or %s", clip(l.SplitSource), link.SourceRandom, link.SourceStored)
	case l.HitsK < 1 || l.HitsK > link.MaxHitsK:
		return bad(path, "link.hits_k %d not in [1, %d]", l.HitsK, link.MaxHitsK)
	case l.Engine != "" && l.Engine != "dsp":
		return bad(path, "link.engine %q is not dsp (or absent: one device)", clip(l.Engine))
	case l.Devices < 0 || l.Devices > 1<<16:
		return bad(path, "link.devices %d not in [0, %d]", l.Devices, 1<<16)
	case m.Classes != m.Hidden:
		return bad(path, "classes %d: a link encoder's output (its embedding) is hidden %d wide", m.Classes, m.Hidden)
	}
	if err := l.Split.Validate(); err != nil {
		return bad(path, "link.split_edges: %v", err)
	}
	s := m.Selection
	for _, v := range []*link.Metrics{s.Val, s.Test} {
		if v == nil {
			return bad(path, "a link model's selection needs its val and test metrics")
		}
		for _, x := range []float64{v.AUC, v.MRR, v.Hits} {
			if !(x >= 0 && x <= 1) {
				return bad(path, "selection metric %v not in [0, 1]", x)
			}
		}
		if math.IsNaN(v.Loss) || v.Loss < 0 {
			return bad(path, "selection loss %v is not a loss", v.Loss)
		}
	}
	return nil
}

// decoderSpecs appends the tensors of m's decoder: none for dot; for mlp
// PyG's Linear pair of OGB's LinkPredictor (lins.0: d -> d, lins.1:
// d -> 1), under DecoderPrefix.
func (m *Meta) decoderSpecs(add func(name, param, layout string, rows, cols int, shape ...int)) {
	if m.Link == nil || m.Link.Decoder != link.DecoderMLP {
		return
	}
	d := m.Classes
	add(DecoderPrefix+"lins.0.weight", DecoderPrefix+"lin0.weight", "transposed", d, d, d, d)
	add(DecoderPrefix+"lins.0.bias", DecoderPrefix+"lin0.bias", "reshaped", 1, d, d)
	add(DecoderPrefix+"lins.1.weight", DecoderPrefix+"lin1.weight", "transposed", d, 1, 1, d)
	add(DecoderPrefix+"lins.1.bias", DecoderPrefix+"lin1.bias", "reshaped", 1, 1, 1)
}

// checkTypedLink validates a typed link model's relation against its
// typed section (whose names checkTyped has checked): a relation of
// typed.relations whose source type is typed.target and whose two types
// are typed.outputs.
func (m *Meta) checkTypedLink(path string) error {
	ty, name := m.Typed, m.Link.Relation
	i := slices.IndexFunc(ty.Relations, func(r TypedRelation) bool { return r.Name() == name })
	if i < 0 {
		return bad(path, "link.relation %q is not one of typed.relations", clip(name))
	}
	r := ty.Relations[i]
	want := []string{r.Src}
	if r.Dst != r.Src {
		want = append(want, r.Dst)
	}
	if ty.Target != r.Src || !slices.Equal(ty.Outputs, want) {
		return bad(path, "typed.target %q and outputs %q: a link model of %s computes %q (target first)", clip(ty.Target), clip(fmt.Sprint(ty.Outputs)), name, want)
	}
	return nil
}

// LinkSchema is the schema of a typed link model's encoder for graph h
// (after AddReverse when trained so) and relation rel of h: the target
// is the relation's source type, the outputs its two types (as
// link.RunHetero builds the encoder).
func LinkSchema(h *dataset.Hetero, rel int) nn.HeteroSchema {
	et := h.EdgeTypes[rel]
	return train.TypedSchema(h, []int{et.Src, et.Dst})
}
