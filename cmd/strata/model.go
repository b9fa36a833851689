package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/infer"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/internal/npy"
	"github.com/strata-gnn/strata/model"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// --- train --save ---

// checkSave checks, before training, that --save names a directory a
// model can be written into (created if missing).
func (c *trainCmd) checkSave() (*train.Keeper, error) {
	if c.Save == "" {
		return nil, nil
	}
	if err := model.CheckDir(c.Save); err != nil {
		return nil, usageError{fmt.Errorf("--save: %w", err)}
	}
	return train.NewKeeper(c.Select), nil
}

// saveModel writes the parameters keep kept into --save: a model of com
// for ds (the dataset the user gave, before any renumbering), trained in
// mode with configuration training, whose evaluation read the features as
// storage (model.Sparse or model.Dense).
func (c *trainCmd) saveModel(e *env, keep *train.Keeper, ds *dataset.Dataset, com train.Common, mode string, training any, rowNormalized bool, storage string) error {
	if keep == nil {
		return nil
	}
	rec, params, note, ok := keep.Kept()
	if !ok {
		return fmt.Errorf("--save %s: this run trained no epoch (it resumed a finished checkpoint), so it has no parameters to save", c.Save)
	}
	meta := model.NewMeta(com, ds.FeatDim, ds.NumClasses)
	meta.Features = model.Features{RowNorm: com.RowNorm, RowNormalized: rowNormalized, Storage: storage}
	meta.Dataset = datasetOf(ds)
	meta.Selection = selectedOf(com, rec, note)
	return c.writeModel(e, &meta, params, note, mode, training, fmt.Sprintf("val %.4f, test %.4f", rec.ValAccuracy, rec.TestAccuracy))
}

// datasetOf is model.json's description of ds.
func datasetOf(ds *dataset.Dataset) model.Dataset {
	return model.Dataset{Name: ds.Name, Fingerprint: ds.Fingerprint(), Nodes: ds.NumNodes(), Edges: ds.Graph.NumEdges(), Directed: ds.Directed}
}

// selectedOf is model.json's selection of the kept epoch rec.
func selectedOf(com train.Common, rec train.EpochRecord, note string) model.Selected {
	return model.Selected{Rule: com.Select, Epoch: rec.Epoch, Epochs: com.Epochs,
		TrainAccuracy: rec.TrainAccuracy, ValAccuracy: rec.ValAccuracy, TestAccuracy: rec.TestAccuracy, Note: note}
}

// writeModel completes meta (the mode and the training configuration;
// the selection is the caller's) and saves it with params into --save,
// then prints where it went with the selected epoch's figures (scores).
func (c *trainCmd) writeModel(e *env, meta *model.Meta, params []nn.NamedTensor, note, mode string, training any, scores string) error {
	meta.Mode = mode
	raw, err := json.Marshal(training)
	if err != nil {
		return fmt.Errorf("--save: %w", err)
	}
	meta.Training = raw
	if err := model.Save(c.Save, &model.Model{Meta: *meta, Params: params}); err != nil {
		return fmt.Errorf("--save: %w", err)
	}
	if note != "" && !e.quiet {
		fmt.Fprintf(e.stderr, "strata: note: %s\n", note)
	}
	fmt.Fprintf(e.stdout, "model               %s (epoch %d: %s)\n", c.Save, meta.Selection.Epoch, scores)
	return nil
}

// storageOf is how train.NewFeatures keeps x: sparse when mostly zero.
func storageOf(x []float32) string {
	if train.MostlyZero(x) {
		return model.Sparse
	}
	return model.Dense
}

// --- predict, embed, evaluate ---

// modelFlags are the flags predict, embed and evaluate share.
type modelFlags struct {
	Model   string `help:"Saved model directory ('strata train --save DIR': model.json and model.safetensors)." required:"" placeholder:"DIR" type:"path"`
	Dataset string `help:"Built-in dataset name (${builtins}), a Strata dataset directory, or a directory 'strata import' understands; its feature width (and class count, when it has labels) must be the model's. Another dataset than the model's is inductive use: a warning, not an error." default:"cora" placeholder:"NAME|DIR"`
	Device  string `help:"Compute device: auto (a registered accelerator that opens, else cpu), cpu, cuda, cuda:N." default:"auto"`
	Devices string `help:"Several devices, each computing a range of node IDs: ${devices} (default: --device)." placeholder:"LIST"`
	Budget  string `name:"infer-budget" help:"Memory a chunk of nodes may take on a device, e.g. 512MiB (default: a quarter of a GPU's free memory, at most 4GiB; 512MiB on the CPU)." placeholder:"BYTES"`
}

// loaded is a model and a dataset ready for inference.
type loaded struct {
	meta   *model.Meta
	ds     *dataset.Dataset
	x      *infer.Input
	bs     []backend.Backend
	models []nn.Model
	budget int64
	close  func()
	log    io.Writer // a line per layer (infer.Options.Log), unless --quiet
}

// checkFlags checks the flags' values before any file is read (exit 2
// naming the flag) and returns --infer-budget's bytes (0: none given).
func (f *modelFlags) checkFlags() (int64, error) {
	var budget int64
	if f.Budget != "" {
		var err error
		if budget, err = parseBytes("infer-budget", f.Budget); err != nil {
			return 0, err
		}
		if budget < infer.MinBudget {
			return 0, usageError{fmt.Errorf("--infer-budget %s: want at least %d bytes (1MiB)", f.Budget, infer.MinBudget)}
		}
	}
	if strings.TrimSpace(f.Devices) != "" {
		if _, err := parseDevices(f.Devices); err != nil {
			return 0, err
		}
	}
	return budget, nil
}

// load reads --model and --dataset, checks they fit, prepares the
// features as the model's were and builds the model on every device.
func (f *modelFlags) load(e *env, m *model.Model, needLabels bool) (*loaded, error) {
	budget, err := f.checkFlags()
	if err != nil {
		return nil, err
	}
	var note io.Writer = e.stderr
	if e.quiet {
		note = nil
	}
	bs, err := openDevices(f.Devices, f.Device, note)
	if err != nil {
		return nil, err
	}
	ds, closeDS, err := openDataset(f.Dataset, e.quiet)
	if err != nil {
		return nil, err
	}
	l := &loaded{meta: &m.Meta, ds: ds, bs: bs, budget: budget, close: closeDS}
	if !e.quiet {
		l.log = e.stderr
	}
	ok := false
	defer func() {
		if !ok {
			l.close()
		}
	}()
	meta := &m.Meta
	switch {
	case needLabels && (ds.Labels == nil || ds.NumClasses == 0):
		return nil, usageError{fmt.Errorf("--dataset %s has no labels to evaluate against", f.Dataset)}
	case len(bs) > 1 && int64(len(bs)) > ds.NumNodes():
		return nil, usageError{fmt.Errorf("--devices: %d devices for %d nodes", len(bs), ds.NumNodes())}
	}
	if err := f.checkDataset(e, ds, meta); err != nil {
		return nil, err
	}
	if needLabels {
		if err := train.CheckDataset(ds); err != nil {
			return nil, usageError{fmt.Errorf("--dataset %s: %w", f.Dataset, err)}
		}
	}
	feats, err := modelFeatures(ds, meta)
	if err != nil {
		return nil, err
	}
	l.x = &infer.Input{Rows: feats.Rows, Cols: feats.Cols, Dense: feats.Dense, Sparse: feats.Sparse}
	params := m.Params
	if meta.IsLink() {
		params, _ = encoderParams(params) // the encoder's layers: the decoder is not a layer
	}
	models, free, err := infer.NewModels(bs, meta.Config(), params)
	if err != nil {
		return nil, err
	}
	closeDS2 := l.close
	l.models, l.close = models, func() { free(); closeDS2() }
	ok = true
	return l, nil
}

// checkDataset checks that ds (--dataset) fits the model meta (--model)
// and warns when it is not the dataset the model was trained on.
func (f *modelFlags) checkDataset(e *env, ds *dataset.Dataset, meta *model.Meta) error {
	switch {
	case ds.Features == nil || ds.FeatDim == 0:
		return usageError{fmt.Errorf("--dataset %s has no node features; the model reads %d", f.Dataset, meta.InDim)}
	case ds.FeatDim != meta.InDim:
		return usageError{fmt.Errorf("--dataset %s has %d features per node, the model in %s reads %d", f.Dataset, ds.FeatDim, f.Model, meta.InDim)}
	case !meta.IsLink() && ds.NumClasses != 0 && ds.NumClasses != meta.Classes:
		return usageError{fmt.Errorf("--dataset %s has %d classes, the model in %s predicts %d", f.Dataset, ds.NumClasses, f.Model, meta.Classes)}
	}
	if err := dataset.Validate(ds); err != nil {
		return err
	}
	if fp := ds.Fingerprint(); fp != meta.Dataset.Fingerprint && !e.quiet {
		fmt.Fprintf(e.stderr, "strata: warning: --dataset %s (%d nodes, fingerprint %s) is not the dataset the model was trained on (%s: %d nodes, fingerprint %s): inductive use\n",
			f.Dataset, ds.NumNodes(), fp, meta.Dataset.Name, meta.Dataset.Nodes, meta.Dataset.Fingerprint)
	}
	return nil
}

// modelFeatures prepares ds's features as the model's were (model.json's
// features: row-normalized or not, read sparse or dense).
func modelFeatures(ds *dataset.Dataset, meta *model.Meta) (*train.Features, error) {
	rowNorm := train.RowNormOff
	if meta.Features.RowNormalized {
		rowNorm = train.RowNormOn
	}
	n := int(ds.NumNodes())
	if meta.Features.Storage == model.Sparse {
		return train.NewFeatures(ds.Features, n, ds.FeatDim, rowNorm)
	}
	return train.NewDenseFeatures(ds.Features, n, ds.FeatDim, rowNorm), nil
}

// run runs the inference of req with a progress bar, stopping on Ctrl-C.
func (l *loaded) run(req infer.Request) (*infer.Result, error) {
	in, err := l.ds.InAdjacency()
	if err != nil {
		return nil, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// STRATA_INFER_PROFILE=1: each layer's host phases and, on GPUs, its
	// largest ops per device (docs/configuration.md).
	profile := os.Getenv("STRATA_INFER_PROFILE") == "1"
	// STRATA_INFER_SYNC=1: each chunk's outputs waited for on their way
	// to the host (infer.Options.SyncOutputs), to compare against the
	// default.
	waited := os.Getenv("STRATA_INFER_SYNC") == "1"
	// STRATA_INFER_WORKERS=N: a device's host goroutines (infer.Options.Workers).
	workers := 0
	if v := os.Getenv("STRATA_INFER_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("STRATA_INFER_WORKERS=%q: want a whole number of goroutines from 1", v)
		}
		workers = n
	}
	// STRATA_INFER_HOT=0: no device copy of the most-read rows of an
	// input gathered on the host (infer.Options.HotBytes), to compare.
	var hot int64
	switch v := os.Getenv("STRATA_INFER_HOT"); v {
	case "", "1":
	case "0":
		hot = -1
	default:
		return nil, fmt.Errorf("STRATA_INFER_HOT=%q: want 0 (no copy) or 1 (the default)", v)
	}
	return infer.Run(ctx, in, l.x, req, infer.Options{Backends: l.bs, Models: l.models, Budget: l.budget, Progress: "inference", Log: l.log, ProfileOps: profile,
		SyncOutputs: waited, Workers: workers, HotBytes: hot})
}

// predictCmd is 'strata predict'.
type predictCmd struct {
	modelFlags `embed:""`
	Nodes      string `help:"Nodes to score, in order: a .npy vector of int32 or int64 IDs, or a text file of IDs (whitespace-separated, # comments); default every node." placeholder:"FILE" type:"path"`
	Pairs      string `help:"Link models (train --task link --save): node pairs to score, a .npy int32 or int64 matrix [P, 2] of (source, destination) IDs; --out is then float32 [P], the decoder's logits (sigmoid: the probability of a link)." placeholder:"FILE.npy" type:"path"`
	Out        string `help:"Output .npy file: float32 logits [nodes, classes], a row per node in --nodes order (or ID order); with --pairs, [P] pair scores." required:"" placeholder:"FILE.npy" type:"path"`
}

func (c *predictCmd) Run(e *env) error {
	if c.Pairs != "" {
		return runPairs(e, &c.modelFlags, c.Nodes, c.Pairs, c.Out)
	}
	return runInference(e, &c.modelFlags, c.Nodes, c.Out, 0, false)
}

// embedCmd is 'strata embed'.
type embedCmd struct {
	modelFlags `embed:""`
	Layer      int    `help:"Layer K (1-based) whose output to write: the hidden representation after its activation (the last layer's are the logits, a link model's the embeddings); default the last hidden layer (a link model: the last layer)." default:"0" placeholder:"K"`
	Nodes      string `help:"Nodes to embed, in order: a .npy vector of int32 or int64 IDs, or a text file of IDs; default every node." placeholder:"FILE" type:"path"`
	Out        string `help:"Output .npy file: float32 [nodes, width of layer K]." required:"" placeholder:"FILE.npy" type:"path"`
}

func (c *embedCmd) Run(e *env) error {
	return runInference(e, &c.modelFlags, c.Nodes, c.Out, c.Layer, true)
}

// runInference is predict (layer 0: the logits) and embed (layer 0: the
// last hidden layer).
func runInference(e *env, f *modelFlags, nodesFile, out string, layer int, embed bool) error {
	if err := atomicfile.Check(out); err != nil {
		return usageError{fmt.Errorf("--out: %w", err)}
	}
	if layer < 0 || layer > train.MaxLayers {
		return usageError{fmt.Errorf("--layer %d: want 1 to %d (0: the default)", layer, train.MaxLayers)}
	}
	m, err := f.readModel()
	if err != nil {
		return err
	}
	if m.Meta.IsLink() && !embed {
		return errLinkPredict(f.Model, m.Meta.Typed != nil)
	}
	if m.Meta.Typed != nil {
		return runTypedInference(e, f, m, nodesFile, out, layer, embed)
	}
	l, err := f.load(e, m, false)
	if err != nil {
		return err
	}
	defer l.close()
	L := l.meta.Layers
	switch {
	case embed && layer == 0 && l.meta.IsLink():
		layer = L // the embeddings the decoder scores
	case embed && layer == 0:
		layer = max(L-1, 1)
	}
	if layer < 0 || layer > L {
		return usageError{fmt.Errorf("--layer %d: the model has layers 1 to %d", layer, L)}
	}
	req := infer.Request{Layer: layer}
	if nodesFile != "" {
		if req.Nodes, err = readNodes(nodesFile, l.ds.NumNodes()); err != nil {
			return usageError{err}
		}
	}
	start := time.Now()
	res, err := l.run(req)
	if err != nil {
		return err
	}
	defer res.Release()
	inferred := time.Now()
	if l.log != nil && len(res.Data) >= 1<<28 { // from 1 GB; at papers100M's size it takes minutes
		fmt.Fprintf(l.log, "writing %s (%.1f GB)\n", out, float64(4*len(res.Data))/1e9)
	}
	if err := npy.WriteFloat32(out, res.Rows, res.Cols, res.Data); err != nil {
		return err
	}
	what := describeLayer(layer, L)
	if l.meta.IsLink() && layer == L {
		what = "embeddings"
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d x %d float32 (%s) in %.1fs (inference %.1fs, writing %.1fs)\n", out, res.Rows, res.Cols, what,
		time.Since(start).Seconds(), inferred.Sub(start).Seconds(), time.Since(inferred).Seconds())
	return nil
}

func describeLayer(layer, layers int) string {
	if layer == 0 || layer == layers {
		return "logits"
	}
	return fmt.Sprintf("layer %d of %d", layer, layers)
}

// evaluateCmd is 'strata evaluate'.
type evaluateCmd struct {
	modelFlags `embed:""`
	Report     string `help:"Write the accuracies as JSON to FILE." placeholder:"FILE" type:"path"`
}

// Evaluation is the JSON of 'strata evaluate --report'.
type Evaluation struct {
	Model           string             `json:"model"`
	Dataset         string             `json:"dataset"`
	Fingerprint     string             `json:"fingerprint"`
	TrainedOn       bool               `json:"trained_on"` // the dataset is the model's (same fingerprint)
	TrainAccuracy   float64            `json:"train_accuracy"`
	ValAccuracy     float64            `json:"val_accuracy"`
	TestAccuracy    float64            `json:"test_accuracy"`
	ValLoss         float64            `json:"val_loss"`
	SelectedEpoch   int                `json:"selected_epoch"`
	ReportMatches   *bool              `json:"report_matches,omitempty"` // on the model's dataset: the accuracies equal training's
	Seconds         float64            `json:"seconds"`
	InferenceLayers []infer.LayerStats `json:"inference_layers"`
}

func (c *evaluateCmd) Run(e *env) error {
	if c.Report != "" {
		if err := atomicfile.Check(c.Report); err != nil {
			return usageError{fmt.Errorf("--report: %w", err)}
		}
	}
	m, err := c.readModel()
	if err != nil {
		return err
	}
	if m.Meta.Typed != nil && m.Meta.IsLink() {
		return c.runTypedLink(e, m)
	}
	if m.Meta.Typed != nil {
		return c.runTyped(e, m)
	}
	if m.Meta.IsLink() {
		return c.runLink(e, m)
	}
	l, err := c.load(e, m, true)
	if err != nil {
		return err
	}
	defer l.close()
	start := time.Now()
	splits := train.DatasetSplits(l.ds)
	var nodes []int32
	for _, sp := range splits {
		nodes = append(nodes, sp.Rows...)
	}
	nodes = sortedUnique(nodes)
	res, err := l.run(infer.Request{Nodes: nodes})
	if err != nil {
		return err
	}
	t := train.ScoreRows(res.Data, res.Cols, nodes, splits)
	fp := l.ds.Fingerprint()
	ev := Evaluation{Model: c.Model, Dataset: l.ds.Name, Fingerprint: fp, InferenceLayers: res.Layers}
	return c.finish(e, &ev, t.Record(), l.meta, start, l.bs[0].Name())
}

// finish prints an evaluation's accuracies (rec) and, on the model's own
// dataset (ev.Fingerprint), whether they equal training's, then writes
// --report.
func (c *evaluateCmd) finish(e *env, ev *Evaluation, rec train.EpochRecord, meta *model.Meta, start time.Time, device string) error {
	ev.TrainedOn = ev.Fingerprint == meta.Dataset.Fingerprint
	ev.TrainAccuracy, ev.ValAccuracy, ev.TestAccuracy, ev.ValLoss = rec.TrainAccuracy, rec.ValAccuracy, rec.TestAccuracy, rec.ValLoss
	ev.SelectedEpoch, ev.Seconds = meta.Selection.Epoch, time.Since(start).Seconds()
	fmt.Fprintf(e.stdout, "train accuracy      %.4f\nvalidation accuracy %.4f\ntest accuracy       %.4f\n", rec.TrainAccuracy, rec.ValAccuracy, rec.TestAccuracy)
	if ev.TrainedOn {
		s := meta.Selection
		same := s.TrainAccuracy == rec.TrainAccuracy && s.ValAccuracy == rec.ValAccuracy && s.TestAccuracy == rec.TestAccuracy
		ev.ReportMatches = &same
		verdict := "equal to"
		if !same {
			verdict = fmt.Sprintf("differ from (train %.4f, val %.4f, test %.4f)", s.TrainAccuracy, s.ValAccuracy, s.TestAccuracy)
		}
		fmt.Fprintf(e.stdout, "training report     %s epoch %d's\n", verdict, s.Epoch)
	}
	fmt.Fprintf(e.stdout, "time                %.1fs on %s\n", ev.Seconds, device)
	if c.Report != "" {
		if err := atomicfile.WriteJSON(c.Report, ev); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	return nil
}

func sortedUnique(v []int32) []int32 {
	out := slices.Clone(v)
	slices.Sort(out)
	return slices.Compact(out)
}

// MaxNodesFileBytes bounds a --nodes or --pairs file.
const MaxNodesFileBytes = 4 << 30

// readNodes reads a --nodes file: a .npy vector of int32 or int64 IDs, or
// text with one or more IDs per line (# starts a comment). Every ID must
// be in [0, n).
func readNodes(path string, n int64) ([]int32, error) {
	b, err := readIDFile("nodes", path)
	if err != nil {
		return nil, err
	}
	return parseNodes(path, b, n)
}

// readIDFile reads path, the file of node IDs given to --flag (--nodes,
// --pairs): a regular file of at most MaxNodesFileBytes.
func readIDFile(flag, path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("--%s %s: not a regular file", flag, path)
	}
	if st.Size() > MaxNodesFileBytes {
		return nil, fmt.Errorf("--%s %s: %d bytes, more than %d", flag, path, st.Size(), int64(MaxNodesFileBytes))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	return b, nil
}

// parseNodes is readNodes on the file's bytes.
func parseNodes(path string, b []byte, n int64) ([]int32, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("--nodes %s: %s", path, fmt.Sprintf(format, args...))
	}
	if bytes.HasPrefix(b, []byte(npy.Magic)) {
		v, err := npy.ParseInts(b)
		if err != nil {
			return nil, bad("%v", err)
		}
		if len(v) == 0 {
			return nil, bad("no node IDs")
		}
		out := make([]int32, len(v))
		for i, x := range v {
			if x < 0 || x >= n {
				return nil, bad("node %d (position %d) out of range [0, %d)", x, i, n)
			}
			out[i] = int32(x)
		}
		return out, nil
	}
	var out []int32
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := bytes.IndexByte([]byte(text), '#'); i >= 0 {
			text = text[:i]
		}
		for _, field := range bytes.Fields([]byte(text)) {
			x, err := strconv.ParseInt(string(field), 10, 64)
			if err != nil {
				return nil, bad("line %d: %q is not a node ID", line, clipID(string(field)))
			}
			if x < 0 || x >= n {
				return nil, bad("line %d: node %d out of range [0, %d)", line, x, n)
			}
			out = append(out, int32(x))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, bad("line %d: %v", line+1, err)
	}
	if len(out) == 0 {
		return nil, bad("no node IDs")
	}
	return out, nil
}

func clipID(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}
