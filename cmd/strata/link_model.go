package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/infer"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/internal/npy"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/model"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// --- train --task link --save ---

// saveLinkModel writes the encoder and decoder keep kept into --save: a
// link model of rep's configuration for ds (the dataset as given),
// whose evaluation read the features as storage.
func (c *trainCmd) saveLinkModel(e *env, keep *train.Keeper, ds *dataset.Dataset, rep *link.Report, storage string) error {
	if keep == nil {
		return nil
	}
	rec, params, note, err := c.keptLink(keep, rep)
	if err != nil {
		return err
	}
	cfg := rep.Config
	meta := model.NewMeta(cfg.Common, ds.FeatDim, cfg.Hidden) // the encoder's output is the embedding
	meta.Task = model.TaskLink
	meta.Link = linkSection(rep)
	meta.Features = model.Features{RowNorm: cfg.RowNorm, RowNormalized: rep.RowNormalized, Storage: storage}
	meta.Dataset = datasetOf(ds)
	meta.Selection = model.Selected{Rule: cfg.Select, Epoch: rec.Epoch, Epochs: cfg.Epochs, Val: &rec.Val, Test: &rec.Test, Note: note}
	return c.writeModel(e, &meta, params, note, cfg.Mode, cfg, linkScores(rec))
}

// keptLink is the epoch keep kept of link run rep: the report's record
// of it, its parameters (the encoder's and the decoder's) and the
// keeper's note.
func (c *trainCmd) keptLink(keep *train.Keeper, rep *link.Report) (link.EpochRecord, []nn.NamedTensor, string, error) {
	sel, params, note, ok := keep.Kept()
	if !ok {
		return link.EpochRecord{}, nil, "", fmt.Errorf("--save %s: this run evaluated no epoch, so it has no parameters to save", c.Save)
	}
	if sel.Epoch < 1 || sel.Epoch > len(rep.Epochs) {
		return link.EpochRecord{}, nil, "", fmt.Errorf("--save %s: kept epoch %d of a run of %d", c.Save, sel.Epoch, len(rep.Epochs))
	}
	return rep.Epochs[sel.Epoch-1], params, note, nil
}

// linkSection is model.json's link section of run rep (a typed run's
// caller adds the relation).
func linkSection(rep *link.Report) *model.Link {
	cfg := &rep.Config
	return &model.Link{Decoder: cfg.Decoder, Split: cfg.Split, SplitSource: rep.Split.Source, Seed: cfg.Seed, HitsK: cfg.HitsK,
		Engine: rep.Engine, Devices: rep.Devices}
}

// linkScores is the saved epoch's figures as train --save prints them.
func linkScores(rec link.EpochRecord) string {
	return fmt.Sprintf("val auc %.4f, test auc %.4f", rec.Val.AUC, rec.Test.AUC)
}

// --- evaluate, embed and predict on a link model ---

// linkConfigOf is the training configuration of link model m (its
// model.json's training), checked against the rest of model.json.
func linkConfigOf(path string, m *model.Meta) (link.Config, error) {
	var cfg link.Config
	bad := func(format string, args ...any) error {
		return usageError{fmt.Errorf("--model: model: %s: training: %s", path, fmt.Sprintf(format, args...))}
	}
	dec := json.NewDecoder(bytes.NewReader(m.Training))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, bad("not a link configuration: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, bad("%v", err)
	}
	l := m.Link
	switch {
	case cfg.Model != m.Architecture || cfg.Layers != m.Layers || cfg.Hidden != m.Hidden:
		return cfg, bad("model %s, %d layers of %d; the model is a %s of %d layers of %d", cfg.Model, cfg.Layers, cfg.Hidden, m.Architecture, m.Layers, m.Hidden)
	case cfg.Decoder != l.Decoder || cfg.Seed != l.Seed || cfg.Split != l.Split || cfg.HitsK != l.HitsK:
		return cfg, bad("decoder %s, seed %d, split %v, hits_k %d; link records %s, %d, %v, %d", cfg.Decoder, cfg.Seed, cfg.Split, cfg.HitsK, l.Decoder, l.Seed, l.Split, l.HitsK)
	}
	return cfg, nil
}

// encoderParams are a link model's encoder parameters (those without
// model.DecoderPrefix), decoderParams the decoder's.
func encoderParams(ps []nn.NamedTensor) (enc, dec []nn.NamedTensor) {
	for _, p := range ps {
		if strings.HasPrefix(p.Name, model.DecoderPrefix) {
			dec = append(dec, p)
		} else {
			enc = append(enc, p)
		}
	}
	return enc, dec
}

// linkModelOn builds link model m's encoder and decoder on b with its
// parameters; free releases them.
func linkModelOn(b backend.Backend, m *model.Model) (enc nn.Model, dec link.Decoder, free func(), err error) {
	ep, dp := encoderParams(m.Params)
	if enc, err = nn.New(b, m.Meta.Config()); err != nil {
		return nil, nil, nil, err
	}
	free = func() { nn.FreeParams(b, enc.Params()) }
	if err = nn.LoadParams(b, enc.Params(), ep); err != nil {
		free()
		return nil, nil, nil, err
	}
	if dec, err = decoderOn(b, &m.Meta, dp); err != nil {
		free()
		return nil, nil, nil, err
	}
	free = func() { nn.FreeParams(b, enc.Params()); nn.FreeParams(b, dec.Params()) }
	return enc, dec, free, nil
}

// decoderOn builds link model meta's decoder on b with its parameters
// dp (encoderParams' second part); free its parameters with
// nn.FreeParams.
func decoderOn(b backend.Backend, meta *model.Meta, dp []nn.NamedTensor) (link.Decoder, error) {
	dec, err := link.NewDecoder(b, meta.Link.Decoder, meta.Classes, 0)
	if err != nil {
		return nil, err
	}
	if err := nn.LoadParams(b, dec.Params(), dp); err != nil {
		nn.FreeParams(b, dec.Params())
		return nil, err
	}
	return dec, nil
}

// LinkEvaluation is the JSON of 'strata evaluate --report' on a link
// model.
type LinkEvaluation struct {
	Model         string       `json:"model"`
	Task          string       `json:"task"` // "link"
	Dataset       string       `json:"dataset"`
	Fingerprint   string       `json:"fingerprint"`
	TrainedOn     bool         `json:"trained_on"`
	HitsK         int          `json:"hits_k"`
	Val           link.Metrics `json:"val"`
	Test          link.Metrics `json:"test"`
	Split         link.Stats   `json:"split"`
	SelectedEpoch int          `json:"selected_epoch"`
	ReportMatches *bool        `json:"report_matches,omitempty"` // on the model's dataset: the metrics equal training's
	Seconds       float64      `json:"seconds"`
}

// runLink evaluates link model m: it rebuilds the run's edge split from
// the recorded fractions and seed (or the dataset's stored edge split,
// when training used one), and scores its validation and test links and
// their negatives with link.Evaluator, as training's evaluation did.
func (c *evaluateCmd) runLink(e *env, m *model.Model) error {
	f := &c.modelFlags
	meta := &m.Meta
	switch {
	case strings.TrimSpace(f.Devices) != "":
		return usageError{fmt.Errorf("--devices: a link model is evaluated on one device (--device), as training evaluated it")}
	case f.Budget != "":
		return usageError{fmt.Errorf("--infer-budget: a link model is evaluated as training evaluated it (--eval full: one whole-graph pass), which --infer-budget does not cut")}
	}
	cfg, err := linkConfigOf(f.Model, meta)
	if err != nil {
		return err
	}
	var note io.Writer = e.stderr
	if e.quiet {
		note = nil
	}
	b, err := openDeviceNote(f.Device, note)
	if err != nil {
		return err
	}
	ds, closeDS, err := openDataset(f.Dataset, e.quiet)
	if err != nil {
		return err
	}
	defer closeDS()
	if err := f.checkDataset(e, ds, meta); err != nil {
		return err
	}
	if err := link.CheckDataset(ds); err != nil {
		return usageError{fmt.Errorf("--dataset %s: %w", f.Dataset, err)}
	}
	var es *split.EdgeSplit
	if meta.Link.SplitSource == link.SourceStored {
		if es, err = split.ReadEdges(f.Dataset, ds); err != nil {
			return usageError{fmt.Errorf("--dataset %s: the model was trained on the dataset's stored edge split (edge_split/): %w", f.Dataset, err)}
		}
	}
	start := time.Now()
	s, err := link.MakeSplit(ds, &cfg, es)
	if err != nil {
		return usageError{fmt.Errorf("--dataset %s: %w", f.Dataset, err)}
	}
	feats, err := modelFeatures(ds, meta)
	if err != nil {
		return err
	}
	x := train.NewInputs(b, feats)
	defer x.Free()
	enc, dec, free, err := linkModelOn(b, m)
	if err != nil {
		return err
	}
	defer free()
	ev, err := link.NewEvaluator(b, s, x, nil, &cfg)
	if err != nil {
		return err
	}
	defer ev.Close()
	val, test, err := ev.Run(enc, dec)
	if err != nil {
		return err
	}
	out := LinkEvaluation{Model: f.Model, Dataset: ds.Name, Fingerprint: ds.Fingerprint(), Val: val, Test: test, Split: s.Stats()}
	return c.finishLink(e, meta, &out, start, b.Name())
}

// finishLink completes out (the metrics, the split and the dataset
// filled in), compares it with training's metrics on the model's
// dataset, prints it and writes --report.
func (c *evaluateCmd) finishLink(e *env, meta *model.Meta, out *LinkEvaluation, start time.Time, device string) error {
	k := meta.Link.HitsK
	out.Task, out.HitsK, out.SelectedEpoch = model.TaskLink, k, meta.Selection.Epoch
	out.TrainedOn = out.Fingerprint == meta.Dataset.Fingerprint
	s := out.Split
	fmt.Fprintf(e.stdout, "links               %d train, %d validation, %d test (%s)\n", s.Train, s.Val, s.Test, splitSource(s))
	fmt.Fprintf(e.stdout, "validation          %s\n", link.MetricsLine(out.Val, k))
	fmt.Fprintf(e.stdout, "test                %s\n", link.MetricsLine(out.Test, k))
	if out.TrainedOn {
		sv, st := *meta.Selection.Val, *meta.Selection.Test
		same := sameMetrics(sv, out.Val) && sameMetrics(st, out.Test)
		out.ReportMatches = &same
		verdict := "equal to"
		if !same {
			verdict = fmt.Sprintf("differ from (val auc %.6f, test auc %.6f mrr %.6f hits@%d %.6f)", sv.AUC, st.AUC, st.MRR, k, st.Hits)
		}
		fmt.Fprintf(e.stdout, "training report     %s epoch %d's\n", verdict, meta.Selection.Epoch)
	}
	out.Seconds = time.Since(start).Seconds()
	fmt.Fprintf(e.stdout, "time                %.1fs on %s\n", out.Seconds, device)
	if c.Report != "" {
		if err := atomicfile.WriteJSON(c.Report, out); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	return nil
}

// sameMetrics reports whether evaluate's metrics b equal training's a:
// AUC, MRR and Hits@K exactly, the loss to 1e-9 (a DSP run evaluated
// over the engine's renumbered graph, whose sums round in another order:
// the scores' ranks are the same, their log-losses may differ in the
// last digits).
func sameMetrics(a, b link.Metrics) bool {
	return a.AUC == b.AUC && a.MRR == b.MRR && a.Hits == b.Hits && a.Constant == b.Constant && math.Abs(a.Loss-b.Loss) <= 1e-9*max(1, math.Abs(a.Loss))
}

// errLinkPredict refuses 'strata predict' without --pairs on link model
// dir.
func errLinkPredict(dir string, typed bool) error {
	if typed {
		return usageError{fmt.Errorf("--model %s is a typed link-prediction model, which has no class logits: 'strata embed' writes its embeddings of the relation's source type, 'strata evaluate' its AUC, MRR and Hits@K", dir)}
	}
	return usageError{fmt.Errorf("--model %s is a link-prediction model, which has no class logits: 'strata predict --pairs FILE.npy' scores node pairs, 'strata embed' writes its node embeddings, 'strata evaluate' its AUC, MRR and Hits@K", dir)}
}

// readPairs reads a --pairs file: a .npy int32 or int64 matrix [P, 2]
// of node IDs in [0, n).
func readPairs(path string, n int64) (src, dst []int32, err error) {
	bad := func(format string, args ...any) error {
		return usageError{fmt.Errorf("--pairs %s: %s", path, fmt.Sprintf(format, args...))}
	}
	b, err := readIDFile("pairs", path)
	if err != nil {
		return nil, nil, usageError{err}
	}
	if !bytes.HasPrefix(b, []byte(npy.Magic)) {
		return nil, nil, bad("not a .npy file (np.save('pairs.npy', np.asarray(pairs, dtype=np.int64)) with shape [P, 2])")
	}
	v, err := npy.ParseIntMatrix(b, 2)
	if err != nil {
		return nil, nil, bad("%v", err)
	}
	if len(v) == 0 {
		return nil, nil, bad("no pairs")
	}
	src, dst = make([]int32, len(v)/2), make([]int32, len(v)/2)
	for i, x := range v {
		if x < 0 || x >= n {
			return nil, nil, bad("node %d (pair %d) out of range [0, %d)", x, i/2, n)
		}
		if i%2 == 0 {
			src[i/2] = int32(x)
		} else {
			dst[i/2] = int32(x)
		}
	}
	return src, dst, nil
}

// runPairs is 'strata predict --pairs': the link model's embeddings of
// the pairs' endpoints (layer-wise inference, as embed), then its
// decoder's scores of the pairs, written as float32 [P].
func runPairs(e *env, f *modelFlags, nodesFile, pairsFile, out string) error {
	if err := atomicfile.Check(out); err != nil {
		return usageError{fmt.Errorf("--out: %w", err)}
	}
	if nodesFile != "" {
		return usageError{fmt.Errorf("--nodes: --pairs names the nodes; give one of them")}
	}
	m, err := f.readModel()
	if err != nil {
		return err
	}
	if !m.Meta.IsLink() {
		return usageError{fmt.Errorf("--pairs: --model %s is a node-classification model; pairs are scored by a link model ('strata train --task link --save DIR')", f.Model)}
	}
	if m.Meta.Typed != nil {
		return usageError{fmt.Errorf("--pairs: --model %s is a typed link model (%s), whose pairs are not scored by predict yet; 'strata evaluate' gives its AUC, MRR and Hits@K, 'strata embed' its %s embeddings", f.Model, m.Meta.Link.Relation, m.Meta.Typed.Target)}
	}
	l, err := f.load(e, m, false)
	if err != nil {
		return err
	}
	defer l.close()
	src, dst, err := readPairs(pairsFile, l.ds.NumNodes())
	if err != nil {
		return err
	}
	start := time.Now()
	nodes := sortedUnique(slices.Concat(src, dst))
	res, err := l.run(infer.Request{Nodes: nodes, Layer: l.meta.Layers})
	if err != nil {
		return err
	}
	row := func(v int32) int32 { i, _ := slices.BinarySearch(nodes, v); return int32(i) }
	rs, rd := make([]int32, len(src)), make([]int32, len(dst))
	for i := range src {
		rs[i], rd[i] = row(src[i]), row(dst[i])
	}
	b := l.bs[0]
	_, dp := encoderParams(m.Params)
	dec, err := decoderOn(b, &m.Meta, dp)
	if err != nil {
		return err
	}
	defer nn.FreeParams(b, dec.Params())
	scores, err := link.ScoreRows(b, dec, res.Data, res.Rows, res.Cols, rs, rd)
	if err != nil {
		return err
	}
	if err := npy.WriteFloat32Vector(out, scores); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d float32 pair scores (logits) in %.1fs\n", out, len(scores), time.Since(start).Seconds())
	return nil
}
