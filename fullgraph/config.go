package fullgraph

import (
	"fmt"
	"math"
	"strings"
)

// Model kinds.
const (
	GCN  = "gcn"
	SAGE = "sage"
	GAT  = "gat"
)

// Partition methods: how the nodes are split into the devices' row blocks.
const (
	// PartitionMultilevel partitions with package partition's multilevel
	// k-way partitioner (few edges between blocks) and renumbers the nodes
	// so every block is a contiguous ID range. The default.
	PartitionMultilevel = "multilevel"
	// PartitionMETIS uses libmetis through package partition (when it is
	// installed), then renumbers.
	PartitionMETIS = "metis"
	// PartitionRange splits the node IDs as they are into P contiguous
	// ranges of (almost) equal size, without renumbering.
	PartitionRange = "range"
)

// Dropout mask schemes for multi-device runs.
const (
	// MasksGlobal draws the mask of element (row, col) of a layer's input
	// from its global position, exactly as one device would
	// (backend.Dropout over the whole matrix), so a run on P devices
	// equals the single-device run for any P. With P > 1 the masks of the
	// hidden layers are drawn on the host and uploaded. The default.
	MasksGlobal = "global"
	// MasksLocal lets every device draw its own masks with
	// backend.Dropout and a seed derived from its rank: equal in
	// distribution, no host work, but a run then depends on P.
	MasksLocal = "local"
)

// Node orders within the devices' blocks.
const (
	// OrderNone keeps the dataset's node IDs (after partitioning).
	OrderNone = "none"
	// OrderDegree renumbers the nodes of every block by descending
	// in-degree (ties by ID). The aggregation gathers the rows of
	// high-degree nodes most often; packed together they stay in the
	// GPU's cache, and consecutive rows of similar length balance the
	// SpMM kernels. A relabeling: the model is the same, but dropout masks
	// and summation orders follow the new IDs, so runs differ from
	// OrderNone's like runs with another seed.
	OrderDegree = "degree"
)

// Engines.
const (
	// EngineAuto: the distributed engine, for every model and any number
	// of devices.
	EngineAuto = "auto"
	// EngineTape runs the nn models on an autograd tape on one device:
	// the reference implementation the distributed engine is tested
	// against.
	EngineTape = "tape"
)

// Row normalization of the features (as package train).
const (
	RowNormAuto = "auto"
	RowNormOn   = "on"
	RowNormOff  = "off"
)

// Model selection of the headline accuracies.
const (
	SelectBest = "best"
	SelectLast = "last"
)

// Config describes one full-graph training run.
type Config struct {
	Model       string  `json:"model"`        // gcn | sage | gat
	Layers      int     `json:"layers"`       // graph layers
	Hidden      int     `json:"hidden"`       // hidden width (per head for gat)
	Heads       int     `json:"heads"`        // gat: heads of hidden layers
	OutHeads    int     `json:"out_heads"`    // gat: heads of the output layer (averaged)
	Dropout     float64 `json:"dropout"`      // dropout on every layer's input (features included)
	AttnDrop    float64 `json:"attn_dropout"` // gat: dropout on attention coefficients
	RowNorm     string  `json:"row_norm"`     // auto | on | off
	LR          float64 `json:"lr"`           // Adam learning rate
	WeightDecay float64 `json:"weight_decay"` // L2 added to the gradient (torch.optim.Adam)
	Epochs      int     `json:"epochs"`
	EvalEvery   int     `json:"eval_every"` // evaluate every N epochs (and after the last)
	Select      string  `json:"select"`     // best | last
	Seed        uint64  `json:"seed"`       // weights and dropout masks

	Partition     string `json:"partition"`      // multilevel | metis | range (P > 1)
	PartitionSeed uint64 `json:"partition_seed"` // seed of the partitioner
	Masks         string `json:"masks"`          // global | local (P > 1)
	Order         string `json:"order"`          // none | degree: node order within blocks
	Engine        string `json:"engine"`         // auto | tape

	Staleness Staleness `json:"staleness"`
}

// Staleness configures Sancus's historical embeddings and skip-broadcast.
// The zero value is exact training: every block is broadcast in every
// layer of every epoch.
//
// With Enabled, before broadcasting its fresh block B of a layer the owner
// compares it with the version V every other device holds in its cache
// (the one it last broadcast). It skips the broadcast, and every device
// reuses V, when both bounds hold:
//
//   - epoch bound: V would be at most EpochBound epochs old when used;
//   - variation bound: ||B - V||_F <= eps * ||V||_F, where eps is Epsilon,
//     or with Adaptive Epsilon * clamp(loss(e-1)/loss(0), AdaptiveFloor, 1):
//     the tolerated error shrinks as the training loss falls.
//
// Every device decides for its own block and all learn the decisions from
// one small all-gather per layer, so they agree on who sends.
type Staleness struct {
	Enabled       bool    `json:"enabled"`
	EpochBound    int     `json:"epoch_bound"`    // >= 1
	Epsilon       float64 `json:"epsilon"`        // >= 0
	Adaptive      bool    `json:"adaptive"`       // scale Epsilon with the loss
	AdaptiveFloor float64 `json:"adaptive_floor"` // lower clamp of the scale, (0, 1]; default 0.25
	// Gradients applies the same cache, bounds and flag exchange to the
	// gradient contributions sent back to block owners in the backward
	// pass (an extension: see the package documentation).
	Gradients bool `json:"gradients"`
}

// DefaultStaleness returns the bounds used by --staleness: a cached block
// may be used for up to 3 epochs and may differ from the fresh one by up
// to 50% (dropout alone changes a block by about that much per epoch).
func DefaultStaleness() Staleness {
	return Staleness{Enabled: true, EpochBound: 3, Epsilon: 0.5, AdaptiveFloor: 0.25}
}

// Defaults returns the published settings for a model:
//
//   - gcn: 2 layers, hidden 16, dropout 0.5, Adam lr 0.01, weight decay
//     5e-4, 200 epochs (Kipf & Welling).
//   - sage: the same with hidden 64.
//   - gat: 2 layers, 8 heads of 8, one output head, dropout 0.6 on
//     features and attention, lr 0.005, weight decay 5e-4, 200 epochs.
//
// Features are row-normalized when non-negative, every epoch is
// evaluated and the headline accuracy is that of the best validation
// epoch. Multi-device runs partition with the multilevel partitioner and
// draw global dropout masks. Staleness is off (exact training).
func Defaults(model string) Config {
	c := Config{
		Model: model, Layers: 2, Hidden: 16, Heads: 1, OutHeads: 1, Dropout: 0.5,
		RowNorm: RowNormAuto, LR: 0.01, WeightDecay: 5e-4, Epochs: 200, EvalEvery: 1,
		Select: SelectBest, Seed: 1, Partition: PartitionMultilevel, PartitionSeed: 1,
		Masks: MasksGlobal, Order: OrderNone, Engine: EngineAuto,
	}
	switch model {
	case SAGE:
		c.Hidden = 64
	case GAT:
		c.Hidden, c.Heads, c.Dropout, c.AttnDrop, c.LR = 8, 8, 0.6, 0.6, 0.005
	}
	return c
}

// ConfigError reports an invalid Config or Options field.
type ConfigError struct {
	Field string
	Msg   string
}

func (e *ConfigError) Error() string { return "fullgraph: config " + e.Field + ": " + e.Msg }

func cfgErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Bounds that keep a typo from allocating the machine away.
const (
	maxLayers  = 16
	maxWidth   = 1 << 16
	maxHeads   = 64
	maxEpochs  = 1 << 20
	maxDevices = 1024
)

// Validate checks every field and returns a *ConfigError naming the first
// bad one.
func (c *Config) Validate() error {
	prob := func(field string, p float64) error {
		if math.IsNaN(p) || p < 0 || p >= 1 {
			return cfgErr(field, "%v not in [0, 1)", p)
		}
		return nil
	}
	switch c.Model {
	case GCN, SAGE, GAT:
	default:
		return cfgErr("model", "unknown model %q (want gcn, sage or gat)", c.Model)
	}
	if c.Layers < 1 || c.Layers > maxLayers {
		return cfgErr("layers", "%d not in [1, %d]", c.Layers, maxLayers)
	}
	if c.Hidden < 1 || c.Hidden > maxWidth {
		return cfgErr("hidden", "%d not in [1, %d]", c.Hidden, maxWidth)
	}
	if c.Heads < 1 || c.Heads > maxHeads || c.OutHeads < 1 || c.OutHeads > maxHeads {
		return cfgErr("heads", "heads %d, out_heads %d: want 1..%d", c.Heads, c.OutHeads, maxHeads)
	}
	if c.Model != GAT && (c.Heads != 1 || c.OutHeads != 1 || c.AttnDrop != 0) {
		return cfgErr("heads", "only gat has attention heads and attention dropout")
	}
	if err := prob("dropout", c.Dropout); err != nil {
		return err
	}
	if err := prob("attn_dropout", c.AttnDrop); err != nil {
		return err
	}
	switch c.RowNorm {
	case RowNormAuto, RowNormOn, RowNormOff:
	default:
		return cfgErr("row_norm", "unknown value %q (want auto, on or off)", c.RowNorm)
	}
	if !(c.LR > 0) || math.IsInf(c.LR, 0) {
		return cfgErr("lr", "%v must be a positive number", c.LR)
	}
	if !(c.WeightDecay >= 0) || math.IsInf(c.WeightDecay, 0) {
		return cfgErr("weight_decay", "%v must be >= 0", c.WeightDecay)
	}
	if c.Epochs < 1 || c.Epochs > maxEpochs {
		return cfgErr("epochs", "%d not in [1, %d]", c.Epochs, maxEpochs)
	}
	if c.EvalEvery < 1 || c.EvalEvery > maxEpochs {
		return cfgErr("eval_every", "%d not in [1, %d]", c.EvalEvery, maxEpochs)
	}
	switch c.Select {
	case SelectBest, SelectLast:
	default:
		return cfgErr("select", "unknown selection %q (want best or last)", c.Select)
	}
	switch c.Partition {
	case PartitionMultilevel, PartitionMETIS, PartitionRange:
	default:
		return cfgErr("partition", "unknown method %q (want multilevel, metis or range)", c.Partition)
	}
	switch c.Masks {
	case MasksGlobal, MasksLocal:
	default:
		return cfgErr("masks", "unknown scheme %q (want global or local)", c.Masks)
	}
	switch c.Order {
	case OrderNone, OrderDegree:
	default:
		return cfgErr("order", "unknown node order %q (want none or degree)", c.Order)
	}
	switch c.Engine {
	case EngineAuto, EngineTape:
	default:
		return cfgErr("engine", "unknown engine %q (want auto or tape)", c.Engine)
	}
	return c.Staleness.validate()
}

func (s *Staleness) validate() error {
	if !s.Enabled {
		if s.Adaptive || s.Gradients {
			return cfgErr("staleness", "adaptive and gradients need staleness enabled")
		}
		return nil
	}
	if s.EpochBound < 1 || s.EpochBound > maxEpochs {
		return cfgErr("staleness.epoch_bound", "%d not in [1, %d]", s.EpochBound, maxEpochs)
	}
	if !(s.Epsilon >= 0) || math.IsInf(s.Epsilon, 0) {
		return cfgErr("staleness.epsilon", "%v must be a finite number >= 0", s.Epsilon)
	}
	if s.Adaptive && !(s.AdaptiveFloor > 0 && s.AdaptiveFloor <= 1) {
		return cfgErr("staleness.adaptive_floor", "%v not in (0, 1]", s.AdaptiveFloor)
	}
	return nil
}

// String is a one-line summary for logs.
func (c *Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s fullgraph, %d layers, hidden %d", c.Model, c.Layers, c.Hidden)
	if c.Model == GAT {
		fmt.Fprintf(&b, "x%d heads (out %d)", c.Heads, c.OutHeads)
	}
	fmt.Fprintf(&b, ", adam lr %g wd %g, dropout %g, %d epochs, seed %d", c.LR, c.WeightDecay, c.Dropout, c.Epochs, c.Seed)
	if c.Order == OrderDegree {
		b.WriteString(", nodes by degree")
	}
	if s := c.Staleness; s.Enabled {
		fmt.Fprintf(&b, ", staleness: epoch bound %d, eps %g", s.EpochBound, s.Epsilon)
		if s.Adaptive {
			fmt.Fprintf(&b, " (adaptive, floor %g)", s.AdaptiveFloor)
		}
		if s.Gradients {
			b.WriteString(", gradients too")
		}
	} else {
		b.WriteString(", exact (no staleness)")
	}
	return b.String()
}
