package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/npy"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/model"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// Typed (rgcn, hsage) models saved by 'train --save' and used by
// predict, embed and evaluate. Inference is the whole-graph pass of
// typed training's full evaluation, on one device.

// readModel reads --model.
func (f *modelFlags) readModel() (*model.Model, error) {
	if _, err := f.checkFlags(); err != nil {
		return nil, err
	}
	m, err := model.Load(f.Model)
	if err != nil {
		return nil, usageError{fmt.Errorf("--model: %w", err)}
	}
	return m, nil
}

// saveTypedModel writes the typed model keep kept into --save: the
// schema of the graph cfg trained on (h, with reverse relations when
// cfg.AddReverse) and h's fingerprint.
func (c *trainCmd) saveTypedModel(e *env, keep *train.Keeper, h *dataset.Hetero, cfg train.HeteroConfig) error {
	if keep == nil {
		return nil
	}
	rec, params, note, ok := keep.Kept()
	if !ok {
		return fmt.Errorf("--save %s: this run evaluated no epoch, so it has no parameters to save", c.Save)
	}
	g, err := cfg.Graph(h)
	if err != nil {
		return fmt.Errorf("--save: %w", err)
	}
	meta := model.NewTypedMeta(cfg.Common, train.TypedSchema(g, nil), h.NumClasses, cfg.AddReverse)
	meta.Dataset = typedDatasetOf(h)
	meta.Selection = selectedOf(cfg.Common, rec, note)
	return c.writeModel(e, &meta, params, note, train.Sampled, cfg, fmt.Sprintf("val %.4f, test %.4f", rec.ValAccuracy, rec.TestAccuracy))
}

// typedLoaded is a typed model and the graph it reads, on one device.
type typedLoaded struct {
	meta  *model.Meta
	h     *dataset.Hetero // the dataset as given
	g     *dataset.Hetero // the graph the model reads (reverse relations added when it was trained so)
	fp    string          // h's fingerprint
	b     backend.Backend
	m     *nn.HeteroModel
	dec   link.Decoder // a link model's decoder; nil for the others
	close func()
}

// loadTyped opens --dataset as a typed dataset, checks it has the
// model's schema (one line naming the first difference) and builds the
// model on --device.
func (f *modelFlags) loadTyped(e *env, m *model.Model, needLabels bool) (*typedLoaded, error) {
	meta := &m.Meta
	switch {
	case f.Devices != "":
		return nil, usageError{fmt.Errorf("--devices: a typed model (%s) infers on one device; use --device", meta.Architecture)}
	case f.Budget != "":
		return nil, usageError{fmt.Errorf("--infer-budget: a typed model (%s) infers on the whole graph in one pass, not in chunks", meta.Architecture)}
	}
	var note io.Writer = e.stderr
	if e.quiet {
		note = nil
	}
	b, err := openDeviceNote(f.Device, note)
	if err != nil {
		return nil, err
	}
	h, closeDS, err := openHetero(f.Dataset, e.quiet)
	if err != nil {
		return nil, err
	}
	l := &typedLoaded{meta: meta, h: h, g: h, b: b, close: closeDS}
	ok := false
	defer func() {
		if !ok {
			l.close()
		}
	}()
	if err := dataset.ValidateHetero(h); err != nil {
		return nil, fmt.Errorf("--dataset %s: %w", f.Dataset, err)
	}
	if meta.Typed.AddReverse {
		if l.g, err = h.AddReverse(); err != nil {
			return nil, fmt.Errorf("--dataset %s: adding reverse relations as the model was trained: %w", f.Dataset, err)
		}
	}
	diff := ""
	if meta.IsLink() {
		diff = meta.Typed.GraphDiff(l.g) // no labels: the target is the relation's source type
	} else {
		diff = meta.Typed.SchemaDiff(l.g, meta.Classes)
	}
	if diff != "" {
		return nil, usageError{fmt.Errorf("--dataset %s does not fit the model in %s: %s", f.Dataset, f.Model, diff)}
	}
	if needLabels {
		if err := train.CheckHetero(l.g); err != nil {
			return nil, usageError{fmt.Errorf("--dataset %s: %w", f.Dataset, err)}
		}
	}
	l.fp = h.Fingerprint()
	if l.fp != meta.Dataset.Fingerprint && !e.quiet {
		fmt.Fprintf(e.stderr, "strata: warning: --dataset %s (%d nodes, fingerprint %s) is not the dataset the model was trained on (%s: %d nodes, fingerprint %s): inductive use\n",
			f.Dataset, h.NumNodes(), l.fp, meta.Dataset.Name, meta.Dataset.Nodes, meta.Dataset.Fingerprint)
	}
	ep, dp := m.Params, []nn.NamedTensor(nil)
	if meta.IsLink() {
		ep, dp = encoderParams(m.Params)
	}
	if l.m, err = nn.NewHetero(b, meta.HeteroConfig()); err != nil {
		return nil, err
	}
	closeDS2 := l.close
	l.close = func() { nn.FreeParams(b, l.m.Params()); closeDS2() }
	if err := nn.LoadParams(b, l.m.Params(), ep); err != nil {
		return nil, err
	}
	if meta.IsLink() {
		if l.dec, err = decoderOn(b, meta, dp); err != nil {
			return nil, err
		}
		closeEnc := l.close
		l.close = func() { nn.FreeParams(b, l.dec.Params()); closeEnc() }
	}
	ok = true
	return l, nil
}

// runTypedInference is predict and embed of a typed model: layer's
// outputs (0: predict's logits, embed's last hidden layer; a link
// model's embeddings) of the nodes of the model's target type (a link
// model's: its relation's source type), all or --nodes (IDs of that
// type).
func runTypedInference(e *env, f *modelFlags, m *model.Model, nodesFile, out string, layer int, embed bool) error {
	L := m.Meta.Layers
	switch {
	case embed && layer == 0 && m.Meta.IsLink():
		layer = L // the embeddings the decoder scores
	case embed && layer == 0:
		layer = max(L-1, 1)
	}
	if layer > L {
		return usageError{fmt.Errorf("--layer %d: the model has layers 1 to %d", layer, L)}
	}
	if layer == 0 {
		layer = L
	}
	l, err := f.loadTyped(e, m, false)
	if err != nil {
		return err
	}
	defer l.close()
	target := m.Meta.Typed.Target
	n := int64(l.g.NodeTypes[l.m.Config().Schema.Target].NumNodes)
	var nodes []int32
	if nodesFile != "" {
		if nodes, err = readNodes(nodesFile, n); err != nil {
			return usageError{fmt.Errorf("%w (IDs of the target type %s)", err, target)}
		}
	}
	start := time.Now()
	data, rows, cols, err := train.TypedOutputs(l.b, l.g, l.m, layer)
	if err != nil {
		return err
	}
	if nodes != nil {
		sel := make([]float32, len(nodes)*cols)
		for i, v := range nodes {
			copy(sel[i*cols:(i+1)*cols], data[int(v)*cols:(int(v)+1)*cols])
		}
		data, rows = sel, len(nodes)
	}
	if err := npy.WriteFloat32(out, rows, cols, data); err != nil {
		return err
	}
	what := describeLayer(layer, L)
	if m.Meta.IsLink() && layer == L {
		what = "embeddings"
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d x %d float32 (%s, %s nodes) in %.1fs\n", out, rows, cols, what, target, time.Since(start).Seconds())
	return nil
}

// runTyped is evaluate of a typed model: the pass of typed training's
// full evaluation, so on the model's dataset the accuracies equal the
// report's (when training evaluated with --eval full, the default).
func (c *evaluateCmd) runTyped(e *env, m *model.Model) error {
	l, err := c.loadTyped(e, m, true)
	if err != nil {
		return err
	}
	defer l.close()
	start := time.Now()
	t, err := train.EvaluateTyped(l.b, l.g, l.m)
	if err != nil {
		return err
	}
	ev := Evaluation{Model: c.Model, Dataset: l.h.Name, Fingerprint: l.fp}
	if err := c.finish(e, &ev, t.Record(), l.meta, start, l.b.Name()); err != nil {
		return err
	}
	if ev.ReportMatches != nil && !*ev.ReportMatches && !e.quiet && trainedSampledEval(l.meta) {
		fmt.Fprintln(e.stderr, "strata: note: the model's training evaluated on sampled neighborhoods (--eval sampled); evaluate uses every neighbor")
	}
	return nil
}

// trainedSampledEval reports whether the model's training configuration
// says --eval sampled.
func trainedSampledEval(meta *model.Meta) bool {
	var cfg struct {
		Eval string `json:"eval"`
	}
	return json.Unmarshal(meta.Training, &cfg) == nil && cfg.Eval == train.Sampled
}
