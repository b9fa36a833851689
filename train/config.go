package train

import (
	"fmt"
	"math"
	"strings"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Model kinds.
const (
	GCN  = "gcn"
	SAGE = "sage"
	GAT  = "gat"
)

// Training and evaluation modes.
const (
	// Sampled trains (or evaluates) on mini-batches of seed nodes whose
	// neighborhoods a NeighborSampler samples (one fanout per hop, the
	// first for the seeds): Run, and dsp/engine on several devices.
	Sampled = "sampled"
	// Full trains (or evaluates) on the whole graph in one batch. Whole-
	// graph training is package fullgraph's (one device or several);
	// Run evaluates the whole graph with it.
	Full = "full"
)

// Row normalization of the features (each row divided by its sum, as the
// GCN and GAT papers preprocess bag-of-words features).
const (
	// RowNormAuto normalizes when every feature value is >= 0 (counts,
	// bag-of-words) and leaves signed features (embeddings, Gaussian
	// features of generated graphs) alone, where a row sum means nothing.
	RowNormAuto = "auto"
	RowNormOn   = "on"
	RowNormOff  = "off"
)

// Model-selection rules for the headline accuracies of a Report.
const (
	// SelectBest reports the evaluated epoch with the highest validation
	// accuracy (ties: lower validation loss, then the earlier epoch), as
	// the GCN and GAT papers select by validation.
	SelectBest = "best"
	// SelectLast reports the last epoch.
	SelectLast = "last"
)

// Common holds the settings every trainer reads the same way: the model,
// its optimizer, the schedule, the evaluation and the features. Config
// (Run: sampled mini-batches) and fullgraph.Config (whole-graph training
// on one or more devices) embed it, so the command line builds it once
// for every mode.
type Common struct {
	Model       string  `json:"model"`        // gcn | sage | gat
	Layers      int     `json:"layers"`       // message-passing layers
	Hidden      int     `json:"hidden"`       // hidden width (per head for gat)
	Heads       int     `json:"heads"`        // gat: attention heads of hidden layers
	OutHeads    int     `json:"out_heads"`    // gat: heads of the output layer (averaged)
	Dropout     float64 `json:"dropout"`      // feature dropout probability
	AttnDrop    float64 `json:"attn_dropout"` // gat: attention dropout probability
	RowNorm     string  `json:"row_norm"`     // auto | on | off: divide each feature row by its sum
	Optimizer   string  `json:"optimizer"`    // adam | sgd
	LR          float64 `json:"lr"`
	WeightDecay float64 `json:"weight_decay"`
	Momentum    float64 `json:"momentum"` // sgd only
	Epochs      int     `json:"epochs"`
	// EvalEvery evaluates after every EvalEvery-th epoch and after the
	// last (0 in checkpoints written before it existed: every epoch).
	EvalEvery     int    `json:"eval_every"`
	Eval          string `json:"eval"`            // full | sampled
	EvalFanouts   []int  `json:"eval_fanouts"`    // eval=sampled only
	EvalBatchSize int    `json:"eval_batch_size"` // eval=sampled only
	Select        string `json:"select"`          // best | last
	Seed          uint64 `json:"seed"`
	// Precision is fp32, tf32 or bf16: the back ends' arithmetic, and
	// bfloat16 features at bf16 (precision.go). "" (the default) is the
	// back ends' precision, which the trainers fill in; in checkpoints
	// written before the field it reads as fp32.
	Precision string `json:"precision"`
}

// Config describes one run of Run (or of dsp/engine, which reads Mode
// and the sampling settings too). Every field is part of the run's
// identity: a checkpoint records it and a resume must match it (only
// Epochs and EvalEvery may differ). Defaults fills a model's paper
// settings. Mode Full names whole-graph training, which is package
// fullgraph's (Run refuses it).
type Config struct {
	Common
	Mode      string `json:"mode"`       // sampled | full
	BatchSize int    `json:"batch_size"` // sampled mode: seeds per batch
	Fanouts   []int  `json:"fanouts"`    // sampled mode: per hop, seeds' hop first; -1 = all
}

// Defaults returns the settings used when a flag is not given:
//
//   - gcn: Kipf & Welling 2017: 2 layers, 16 hidden, dropout 0.5, Adam lr
//     0.01, weight decay 5e-4, 200 epochs, full batch.
//   - gat: Velickovic et al. 2018: 2 layers, 8 heads of 8 hidden, 1 output
//     head, dropout 0.6 on features and attention, Adam lr 0.005, weight
//     decay 5e-4; 200 epochs with best-validation
//     selection stand in for the paper's patience-100 early stopping.
//   - sage: GraphSAGE-mean, sampled mini-batches: 2 layers, 64 hidden,
//     fanouts 10,10, batch 32, dropout 0.5, Adam lr 0.01, weight decay
//     5e-4, 30 epochs, full-neighbor evaluation.
//
// All models use RowNormAuto: non-negative features are row-normalized, as
// in the papers. Every epoch is evaluated.
func Defaults(model string) Config {
	c := Config{
		Common: Common{Model: model, Layers: 2, Optimizer: "adam", WeightDecay: 5e-4,
			RowNorm: RowNormAuto, EvalEvery: 1, Eval: Full, Select: SelectBest, Seed: 1, EvalBatchSize: 1024},
		BatchSize: 32, Fanouts: []int{10, 10},
	}
	switch model {
	case GCN:
		c.Mode, c.Hidden, c.Dropout, c.LR, c.Epochs = Full, 16, 0.5, 0.01, 200
	case GAT:
		c.Mode, c.Hidden, c.Heads, c.OutHeads = Full, 8, 8, 1
		c.Dropout, c.AttnDrop, c.LR, c.Epochs = 0.6, 0.6, 0.005, 200
	default: // sage, and unknown models (Validate rejects them)
		c.Mode, c.Hidden, c.Dropout, c.LR, c.Epochs = Sampled, 64, 0.5, 0.01, 30
	}
	if c.Model != GAT {
		c.Heads, c.OutHeads = 1, 1
	}
	return c
}

// ConfigError reports an invalid Config field.
type ConfigError struct {
	Field string
	Msg   string
}

func (e *ConfigError) Error() string { return "train: config " + e.Field + ": " + e.Msg }

// Bounds that keep a typo from allocating the machine away (listed in
// docs/limits.md; the strata command checks its flags against them before
// anything is sized).
const (
	MaxLayers = 16
	MaxWidth  = 1 << 16 // hidden width (per head for gat)
	MaxHeads  = 64
	MaxEpochs = 1 << 20
	MaxBatch  = 1 << 24 // seeds per batch, training and evaluation
	MaxFanout = 1 << 16
)

// Validate checks every field and returns a *ConfigError naming the first
// bad one.
func (c *Config) Validate() error {
	switch c.Mode {
	case Full, Sampled:
	default:
		return &ConfigError{Field: "mode", Msg: fmt.Sprintf("unknown mode %q (want sampled or full)", c.Mode)}
	}
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if c.BatchSize < 1 || c.BatchSize > MaxBatch {
		return &ConfigError{Field: "batch_size", Msg: fmt.Sprintf("%d not in [1, %d]", c.BatchSize, MaxBatch)}
	}
	if c.Mode == Sampled {
		return checkFanouts("fanouts", c.Fanouts, c.Layers)
	}
	return nil
}

// Validate checks the common settings and returns a *ConfigError naming
// the first bad one.
func (c *Common) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	prob := func(field string, p float64) error {
		if math.IsNaN(p) || p < 0 || p >= 1 {
			return bad(field, "%v not in [0, 1)", p)
		}
		return nil
	}
	switch c.Model {
	case GCN, SAGE, GAT:
	default:
		return bad("model", "unknown model %q (want gcn, sage or gat)", c.Model)
	}
	if c.Layers < 1 || c.Layers > MaxLayers {
		return bad("layers", "%d not in [1, %d]", c.Layers, MaxLayers)
	}
	if c.Hidden < 1 || c.Hidden > MaxWidth {
		return bad("hidden", "%d not in [1, %d]", c.Hidden, MaxWidth)
	}
	if c.Heads < 1 || c.Heads > MaxHeads {
		return bad("heads", "%d not in [1, %d]", c.Heads, MaxHeads)
	}
	if c.OutHeads < 1 || c.OutHeads > MaxHeads {
		return bad("out_heads", "%d not in [1, %d]", c.OutHeads, MaxHeads)
	}
	if c.Model != GAT && (c.Heads != 1 || c.OutHeads != 1) {
		return bad("heads", "only gat has attention heads (got heads %d, out_heads %d for %s)", c.Heads, c.OutHeads, c.Model)
	}
	if err := prob("dropout", c.Dropout); err != nil {
		return err
	}
	if err := prob("attn_dropout", c.AttnDrop); err != nil {
		return err
	}
	if c.Model != GAT && c.AttnDrop != 0 {
		return bad("attn_dropout", "only gat has attention dropout (got %v for %s)", c.AttnDrop, c.Model)
	}
	switch c.RowNorm {
	case RowNormAuto, RowNormOn, RowNormOff:
	default:
		return bad("row_norm", "unknown value %q (want auto, on or off)", c.RowNorm)
	}
	switch c.Optimizer {
	case "adam", "sgd":
	default:
		return bad("optimizer", "unknown optimizer %q (want adam or sgd)", c.Optimizer)
	}
	if !(c.LR > 0) || math.IsInf(c.LR, 0) {
		return bad("lr", "%v must be a positive number", c.LR)
	}
	if math.IsNaN(c.WeightDecay) || c.WeightDecay < 0 || math.IsInf(c.WeightDecay, 0) {
		return bad("weight_decay", "%v must be >= 0", c.WeightDecay)
	}
	if err := prob("momentum", c.Momentum); err != nil {
		return err
	}
	if c.Momentum != 0 && c.Optimizer != "sgd" {
		return bad("momentum", "only sgd uses momentum")
	}
	if c.Epochs < 1 || c.Epochs > MaxEpochs {
		return bad("epochs", "%d not in [1, %d]", c.Epochs, MaxEpochs)
	}
	if c.EvalEvery < 1 || c.EvalEvery > MaxEpochs {
		return bad("eval_every", "%d not in [1, %d]", c.EvalEvery, MaxEpochs)
	}
	switch c.Eval {
	case Full:
	case Sampled:
		if err := checkFanouts("eval_fanouts", c.EvalFanouts, c.Layers); err != nil {
			return err
		}
		if c.EvalBatchSize < 1 || c.EvalBatchSize > MaxBatch {
			return bad("eval_batch_size", "%d not in [1, %d]", c.EvalBatchSize, MaxBatch)
		}
	default:
		return bad("eval", "unknown evaluation mode %q (want full or sampled)", c.Eval)
	}
	switch c.Select {
	case SelectBest, SelectLast:
	default:
		return bad("select", "unknown selection %q (want best or last)", c.Select)
	}
	if _, err := backend.ParsePrecision(c.Precision); err != nil {
		return bad("precision", "unknown precision %q (want fp32, tf32 or bf16)", c.Precision)
	}
	return nil
}

func checkFanouts(field string, f []int, layers int) error {
	if len(f) != layers {
		return &ConfigError{Field: field, Msg: fmt.Sprintf("%d fanouts for %d layers (one per hop, seeds' hop first)", len(f), layers)}
	}
	for i, v := range f {
		if v == 0 || v < -1 || v > MaxFanout {
			return &ConfigError{Field: field, Msg: fmt.Sprintf("hop %d: fanout %d not in [1, %d] or -1 (all neighbors)", i+1, v, MaxFanout)}
		}
	}
	return nil
}

// Evaluates reports whether the evaluation follows epoch (0-based): every
// EvalEvery-th epoch and the last.
func (c *Common) Evaluates(epoch int) bool {
	return epoch == c.Epochs-1 || c.EvalEvery <= 1 || (epoch+1)%c.EvalEvery == 0
}

// Diff names the first setting that differs from o's and would change the
// run's numbers, "" if none: Epochs and EvalEvery excepted (a resumed run
// may go on longer, and the evaluations change no loss). Resuming a
// checkpoint needs none.
func (c *Config) Diff(o *Config) string {
	if d := c.Common.Diff(&o.Common); d != "" {
		return d
	}
	return diffFields([]field{{"mode", c.Mode, o.Mode}, {"batch_size", c.BatchSize, o.BatchSize},
		{"fanouts", fmt.Sprint(c.Fanouts), fmt.Sprint(o.Fanouts)}})
}

// Diff is Config.Diff for the common settings.
func (c *Common) Diff(o *Common) string {
	a, b := c, o
	return diffFields([]field{
		{"model", a.Model, b.Model}, {"layers", a.Layers, b.Layers},
		{"hidden", a.Hidden, b.Hidden}, {"heads", a.Heads, b.Heads}, {"out_heads", a.OutHeads, b.OutHeads},
		{"dropout", a.Dropout, b.Dropout}, {"attn_dropout", a.AttnDrop, b.AttnDrop},
		{"row_norm", a.RowNorm, b.RowNorm}, {"optimizer", a.Optimizer, b.Optimizer},
		{"lr", a.LR, b.LR}, {"weight_decay", a.WeightDecay, b.WeightDecay}, {"momentum", a.Momentum, b.Momentum},
		{"eval", a.Eval, b.Eval}, {"eval_fanouts", fmt.Sprint(a.EvalFanouts), fmt.Sprint(b.EvalFanouts)},
		{"eval_batch_size", a.EvalBatchSize, b.EvalBatchSize}, {"select", a.Select, b.Select}, {"seed", a.Seed, b.Seed},
		{"precision", a.Prec().String(), b.Prec().String()},
	})
}

type field struct {
	name string
	x, y any
}

func diffFields(fields []field) string {
	for _, f := range fields {
		if f.x != f.y {
			return fmt.Sprintf("%s is %v, the checkpoint has %v", f.name, f.x, f.y)
		}
	}
	return ""
}

// String is a one-line summary for logs.
func (c *Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s, %s", c.Model, c.Mode, c.Common.Layout())
	if c.Mode == Sampled {
		fmt.Fprintf(&b, ", batch %d, fanouts %v", c.BatchSize, c.Fanouts)
	}
	b.WriteString(", " + c.Common.Schedule())
	return b.String()
}

// Layout describes the model for logs: "2 layers, hidden 8x8 heads (out 1)".
func (c *Common) Layout() string {
	s := fmt.Sprintf("%d layers, hidden %d", c.Layers, c.Hidden)
	if c.Model == GAT {
		s += fmt.Sprintf("x%d heads (out %d)", c.Heads, c.OutHeads)
	}
	return s
}

// Schedule describes the optimizer and the schedule for logs.
func (c *Common) Schedule() string {
	s := fmt.Sprintf("%s lr %g wd %g, dropout %g, %d epochs", c.Optimizer, c.LR, c.WeightDecay, c.Dropout, c.Epochs)
	if c.EvalEvery > 1 {
		s += fmt.Sprintf(" (evaluated every %d)", c.EvalEvery)
	}
	if p := c.Prec(); p != backend.FP32 {
		s += ", " + p.String()
	}
	return s + fmt.Sprintf(", seed %d", c.Seed)
}
