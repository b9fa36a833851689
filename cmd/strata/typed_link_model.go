package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/model"
	"github.com/strata-gnn/strata/train"
)

// Typed link models: 'strata train --task link --model rgcn|hsage
// --save DIR' writes the typed encoder (the typed section, the tensors
// of a typed node model) and the decoder (the link section, with the
// relation); evaluate rebuilds link.RunHetero's split and scores it
// again (link.EvaluateHetero).

// saveTypedLinkModel writes the typed encoder and the decoder keep kept
// into --save: a link model of rep's relation on h (the dataset as
// given) with cfg.
func (c *trainCmd) saveTypedLinkModel(e *env, keep *train.Keeper, h *dataset.Hetero, cfg link.HeteroConfig, rep *link.HeteroReport) error {
	if keep == nil {
		return nil
	}
	rec, params, note, err := c.keptLink(keep, rep.Report)
	if err != nil {
		return err
	}
	g, err := cfg.Graph(h)
	if err != nil {
		return fmt.Errorf("--save: %w", err)
	}
	rel := g.EdgeType(rep.Relation)
	if rel < 0 {
		return fmt.Errorf("--save: relation %s is not one of %s's", rep.Relation, h.Name)
	}
	meta := model.NewTypedMeta(cfg.Common, model.LinkSchema(g, rel), cfg.Hidden, cfg.AddReverse) // the encoder's output is the embedding
	meta.Task = model.TaskLink
	meta.Link = linkSection(rep.Report)
	meta.Link.Relation = rep.Relation
	meta.Dataset = typedDatasetOf(h)
	meta.Selection = model.Selected{Rule: cfg.Select, Epoch: rec.Epoch, Epochs: cfg.Epochs, Val: &rec.Val, Test: &rec.Test, Note: note}
	return c.writeModel(e, &meta, params, note, train.Sampled, cfg, linkScores(rec))
}

// typedDatasetOf is model.json's description of typed dataset h.
func typedDatasetOf(h *dataset.Hetero) model.Dataset {
	return model.Dataset{Name: h.Name, Fingerprint: h.Fingerprint(), Nodes: h.NumNodes(), Edges: h.NumEdges()}
}

// typedLinkConfigOf is typed link model m's training configuration (its
// model.json's training), checked against the rest of model.json.
func typedLinkConfigOf(path string, m *model.Meta) (link.HeteroConfig, error) {
	var cfg link.HeteroConfig
	bad := func(format string, args ...any) error {
		return usageError{fmt.Errorf("--model: model: %s: training: %s", path, fmt.Sprintf(format, args...))}
	}
	dec := json.NewDecoder(bytes.NewReader(m.Training))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, bad("not a typed link configuration: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, bad("%v", err)
	}
	l := m.Link
	switch {
	case cfg.Model != m.Architecture || cfg.Layers != m.Layers || cfg.Hidden != m.Hidden || cfg.AddReverse != m.Typed.AddReverse:
		return cfg, bad("model %s, %d layers of %d, add_reverse %v; the model is a %s of %d layers of %d, add_reverse %v",
			cfg.Model, cfg.Layers, cfg.Hidden, cfg.AddReverse, m.Architecture, m.Layers, m.Hidden, m.Typed.AddReverse)
	case cfg.Decoder != l.Decoder || cfg.Seed != l.Seed || cfg.Split != l.Split || cfg.HitsK != l.HitsK || cfg.Relation != l.Relation:
		return cfg, bad("decoder %s, seed %d, split %v, hits_k %d, relation %.200q; link records %s, %d, %v, %d, %s",
			cfg.Decoder, cfg.Seed, cfg.Split, cfg.HitsK, cfg.Relation, l.Decoder, l.Seed, l.Split, l.HitsK, l.Relation)
	}
	return cfg, nil
}

// runTypedLink is evaluate of a typed link model: link.RunHetero's split
// of the model's relation rebuilt from the recorded fractions and seed
// (or the dataset's stored split of the relation, when training used
// it), with the same negatives and message-passing graph, scored as
// training's evaluation scored it: on the model's dataset the metrics
// equal the report's.
func (c *evaluateCmd) runTypedLink(e *env, m *model.Model) error {
	f := &c.modelFlags
	meta := &m.Meta
	cfg, err := typedLinkConfigOf(f.Model, meta)
	if err != nil {
		return err
	}
	l, err := f.loadTyped(e, m, false)
	if err != nil {
		return err
	}
	defer l.close()
	var es *split.EdgeSplit
	if meta.Link.SplitSource == link.SourceStored {
		rel := l.h.EdgeType(cfg.Relation)
		if rel < 0 {
			return usageError{fmt.Errorf("--dataset %s: the model was trained on the stored edge split of %s, a relation the dataset does not have without --add-reverse", f.Dataset, cfg.Relation)}
		}
		if es, err = split.ReadRelationEdges(f.Dataset, l.h, rel); err != nil {
			return usageError{fmt.Errorf("--dataset %s: the model was trained on the dataset's stored edge split of %s (edge_split/): %w", f.Dataset, cfg.Relation, err)}
		}
	}
	start := time.Now()
	val, test, stats, err := link.EvaluateHetero(l.b, l.h, cfg, es, l.m, l.dec)
	if err != nil {
		var se *link.SplitError
		if errors.As(err, &se) {
			return usageError{fmt.Errorf("--dataset %s: %w", f.Dataset, err)}
		}
		return err
	}
	fmt.Fprintf(e.stdout, "relation            %s\n", cfg.Relation)
	out := LinkEvaluation{Model: f.Model, Dataset: l.h.Name, Fingerprint: l.fp, Val: val, Test: test, Split: stats}
	return c.finishLink(e, meta, &out, start, l.b.Name())
}
