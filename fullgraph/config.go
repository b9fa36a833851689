package fullgraph

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/strata-gnn/strata/train"
)

// Model kinds (train's).
const (
	GCN  = train.GCN
	SAGE = train.SAGE
	GAT  = train.GAT
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

// Exchanges: which rows of a block travel to the devices that read it.
const (
	// ExchangeBlocks ("" too) sends every device every row of every block
	// (one all-gather-v per layer, or broadcasts per owner).
	ExchangeBlocks = "blocks"
	// ExchangeHalo sends each device only the rows it reads (its halo,
	// Layout.Used), packed, in one all-to-all-v per layer; in training the
	// last layer sends only the rows the training nodes read, since the
	// loss reads no other output row (not with a Task, whose loss may).
	// Exact: every row a device reads has the value ExchangeBlocks gives
	// it, so the run's numbers are the same; only the bytes differ.
	// Its gradient messages are restricted the same way. GCN and SAGE.
	ExchangeHalo = "halo"
)

// Engines.
const (
	// EngineAuto: the distributed engine, for every model and any number
	// of devices.
	EngineAuto = "auto"
	// EngineTape runs the nn layers on an autograd tape on one device:
	// the reference implementation the distributed engine is tested
	// against.
	EngineTape = "tape"
)

// Config describes one full-graph training run: the settings every
// trainer shares (train.Common: model, optimizer, schedule, evaluation,
// features), and how the graph is spread over the devices.
type Config struct {
	train.Common

	Partition     string `json:"partition"`          // multilevel | metis | range (P > 1)
	PartitionSeed uint64 `json:"partition_seed"`     // seed of the partitioner
	Masks         string `json:"masks"`              // global | local (P > 1)
	Order         string `json:"order"`              // none | degree: node order within blocks
	Engine        string `json:"engine"`             // auto | tape
	Exchange      string `json:"exchange,omitempty"` // blocks ("") | halo

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
	// Drift selects what the variation bound measures: DriftEmbedding
	// ("" or "embedding", the default) the block itself, DriftParams the
	// model that produced it (see DriftParams).
	Drift string `json:"drift,omitempty"`
}

// What the variation bound measures (Staleness.Drift).
const (
	// DriftEmbedding: ||B - V||_F / ||V||_F on the block's dropout-free
	// version. Only this layer's dropout is removed: the earlier layers'
	// masks still differ between the two epochs, so on deep models with
	// dropout the measure has a noise floor (about 0.9 on hidden layers
	// of the products shape) that hides how much the model changed.
	DriftEmbedding = "embedding"
	// DriftParams: the relative change, in Frobenius norm, of the
	// parameters of layers 0..l since the block of layer l was last
	// broadcast. The block is a function of those parameters and of
	// dropout draws; a new draw is not an error (see the package
	// documentation), so what ages is this part. It has no noise floor,
	// costs no pass over the block, and is the same on every device. It
	// rarely exceeds the default bound, so the epoch bound decides, and on
	// products-hard stale hidden blocks cost accuracy (docs/fullgraph.md).
	DriftParams = "params"
)

// DefaultStaleness returns the bounds used by --staleness: a cached block
// may be used for up to 3 epochs and may differ from the fresh one by up
// to 50% (dropout alone changes a block by about that much per epoch).
func DefaultStaleness() Staleness {
	return Staleness{Enabled: true, EpochBound: 3, Epsilon: 0.5, AdaptiveFloor: 0.25}
}

// Defaults returns a model's settings: train.Defaults' (the papers':
// GCN 2 layers of 16, dropout 0.5, Adam lr 0.01, weight decay 5e-4, 200
// epochs; GAT 8 heads of 8, dropout 0.6 on features and attention, lr
// 0.005; GraphSAGE hidden 64, 30 epochs; row-normalized non-negative
// features, every epoch evaluated over the whole graph, the headline
// accuracy that of the best validation epoch), with multi-device runs
// partitioned by the multilevel partitioner and drawing global dropout
// masks. Staleness is off (exact training).
func Defaults(model string) Config {
	return Config{Common: train.Defaults(model).Common, PartitionSeed: 1, Partition: PartitionMultilevel,
		Masks: MasksGlobal, Order: OrderNone, Engine: EngineAuto}
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

// maxDevices bounds the number of devices of a run.
const maxDevices = 1024

// Validate checks every field and returns a *ConfigError naming the first
// bad one.
func (c *Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		var te *train.ConfigError
		if errors.As(err, &te) {
			return &ConfigError{Field: te.Field, Msg: te.Msg}
		}
		return err
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
	switch c.Exchange {
	case "", ExchangeBlocks:
	case ExchangeHalo:
		if c.Model == GAT {
			return cfgErr("exchange", "halo applies to gcn and sage, not gat")
		}
	default:
		return cfgErr("exchange", "unknown exchange %q (want blocks or halo)", c.Exchange)
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
	if s.EpochBound < 1 || s.EpochBound > train.MaxEpochs {
		return cfgErr("staleness.epoch_bound", "%d not in [1, %d]", s.EpochBound, train.MaxEpochs)
	}
	if !(s.Epsilon >= 0) || math.IsInf(s.Epsilon, 0) {
		return cfgErr("staleness.epsilon", "%v must be a finite number >= 0", s.Epsilon)
	}
	switch s.Drift {
	case "", DriftEmbedding, DriftParams:
	default:
		return cfgErr("staleness.drift", "unknown measure %q (want embedding or params)", s.Drift)
	}
	if s.Adaptive && !(s.AdaptiveFloor > 0 && s.AdaptiveFloor <= 1) {
		return cfgErr("staleness.adaptive_floor", "%v not in (0, 1]", s.AdaptiveFloor)
	}
	return nil
}

// String is a one-line summary for logs.
func (c *Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s full graph, %s, %s", c.Model, c.Layout(), c.Schedule())
	if c.Eval == train.Sampled {
		fmt.Fprintf(&b, ", sampled evaluation (fanouts %v)", c.EvalFanouts)
	}
	if c.Order == OrderDegree {
		b.WriteString(", nodes by degree")
	}
	if c.Exchange == ExchangeHalo {
		b.WriteString(", halo exchange")
	}
	if s := c.Staleness; s.Enabled {
		fmt.Fprintf(&b, ", staleness: epoch bound %d, eps %g", s.EpochBound, s.Epsilon)
		if s.Adaptive {
			fmt.Fprintf(&b, " (adaptive, floor %g)", s.AdaptiveFloor)
		}
		if s.Drift == DriftParams {
			b.WriteString(", drift of the parameters")
		}
		if s.Gradients {
			b.WriteString(", gradients too")
		}
	} else {
		b.WriteString(", exact (no staleness)")
	}
	return b.String()
}

// Diff names the first setting of c that differs from o's and would
// change a run's numbers, "" if none: the common settings (train.Common.
// Diff: the epochs and the evaluation cadence may differ), the
// partitioning, masks, node order and engine. (Staleness is not resumed:
// Run refuses checkpoints with it.)
func (c *Config) Diff(o *Config) string {
	if d := c.Common.Diff(&o.Common); d != "" {
		return d
	}
	for _, f := range []struct {
		name string
		x, y any
	}{
		{"partition", c.Partition, o.Partition}, {"partition_seed", c.PartitionSeed, o.PartitionSeed},
		{"masks", c.Masks, o.Masks}, {"order", c.Order, o.Order}, {"engine", c.Engine, o.Engine},
	} {
		if f.x != f.y {
			return fmt.Sprintf("%s is %v, the checkpoint has %v", f.name, f.x, f.y)
		}
	}
	return ""
}
