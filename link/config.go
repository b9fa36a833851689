package link

import (
	"fmt"
	"strings"

	"github.com/strata-gnn/strata/train"
)

// Decoders: how a pair of node embeddings becomes a score (a logit).
const (
	// DecoderDot scores <h_u, h_v> (GAE's inner-product decoder).
	DecoderDot = "dot"
	// DecoderMLP scores MLP(h_u ⊙ h_v): Linear(d, d), ReLU, Linear(d, 1),
	// OGB's LinkPredictor on the Hadamard product.
	DecoderMLP = "mlp"
)

// Negative-sampling distributions of the training negatives.
const (
	// NegUniform corrupts a positive's destination uniformly over all
	// nodes (PyG's negative_sampling, DGL's Uniform).
	NegUniform = "uniform"
	// NegDegree draws the corrupted destination in proportion to its
	// in-degree^0.75 in the message-passing graph (word2vec's and
	// GraphSAGE's unsupervised-loss distribution): frequent nodes are
	// frequent negatives too, so degree alone cannot tell a positive.
	NegDegree = "degree"
)

// Bounds on the link settings (docs/limits.md).
const (
	MaxNegRatio = 1024
	MaxHitsK    = 1 << 20
)

// Config describes one link-prediction run. The encoder is Common's
// model (Common.Hidden wide in every layer, the last included: the
// embedding width); Common's optimizer, schedule, evaluation and
// selection apply as in node classification, with the best epoch chosen
// by validation AUC.
type Config struct {
	train.Common
	// Mode is train.Sampled (mini-batches of edges; the seeds are their
	// endpoints, whose neighborhoods are sampled with Fanouts) or
	// train.Full (the encoder runs over the whole message-passing graph
	// at every step).
	Mode string `json:"mode"`
	// BatchSize counts positive edges per step (each comes with NegRatio
	// negatives); 0 in full mode means all training edges in one step
	// per epoch.
	BatchSize  int       `json:"batch_size"`
	Fanouts    []int     `json:"fanouts"` // sampled mode: per hop, seeds' hop first; -1 = all
	Split      Fractions `json:"split_edges"`
	NegRatio   int       `json:"neg_ratio"`    // negatives per positive training edge
	NegSample  string    `json:"neg_sampling"` // uniform | degree
	NegExclude bool      `json:"neg_exclude"`  // redraw negatives that are training edges or self-pairs
	Decoder    string    `json:"decoder"`      // dot | mlp
	HitsK      int       `json:"hits_k"`       // K of Hits@K
}

// Defaults returns the settings of a link-prediction run with model as
// encoder, tuned on Cora and CiteSeer (docs/training.md has the
// measurements):
//
//   - gcn (GAE's encoder): full mode, one step per epoch on all training
//     edges, 2 layers of 64, dropout 0.5, Adam lr 0.01, 50 epochs, raw
//     features (RowNorm off: binary bag-of-words features make larger
//     initial embeddings, and training converges in half the epochs to the
//     same AUC).
//   - sage: sampled mode, batches of 1024 training edges, fanouts 10,10,
//     2 layers of 64, dropout 0.2, Adam lr 0.01, 40 epochs, features
//     row-normalized when non-negative (auto).
//   - gat: full mode, 8 heads of 8, dropout 0.5, lr 0.005, 50 epochs, raw
//     features.
//
// Every model: no weight decay (an L2 penalty shrinks the embeddings,
// whose dot products are the scores), split 85/5/10, one uniform negative
// per positive (no exclusion), the dot decoder, Hits@50, whole-graph
// evaluation every epoch, best validation AUC.
func Defaults(model string) Config {
	d := train.Defaults(model).Common
	d.AttnDrop, d.WeightDecay, d.Hidden, d.RowNorm = 0, 0, 64, train.RowNormOff
	c := Config{Common: d, Split: DefaultFractions, NegRatio: 1, NegSample: NegUniform, Decoder: DecoderDot, HitsK: 50,
		Fanouts: []int{10, 10}}
	switch model {
	case train.SAGE:
		c.Mode, c.BatchSize, c.Dropout, c.LR, c.Epochs, c.RowNorm = train.Sampled, 1024, 0.2, 0.01, 40, train.RowNormAuto
	case train.GAT:
		c.Mode, c.Hidden, c.Dropout, c.LR, c.Epochs = train.Full, 8, 0.5, 0.005, 50
	default:
		c.Mode, c.Dropout, c.LR, c.Epochs = train.Full, 0.5, 0.01, 50
	}
	return c
}

// Validate checks every field and returns a *train.ConfigError naming
// the first bad one.
func (c *Config) Validate() error {
	switch c.Model {
	case train.GCN, train.SAGE, train.GAT:
	default:
		return cfgErr("model", "%q: link prediction takes gcn, sage or gat", c.Model)
	}
	if err := c.Common.Validate(); err != nil {
		return err
	}
	switch c.Mode {
	case train.Sampled:
		if c.BatchSize < 1 || c.BatchSize > train.MaxBatch {
			return cfgErr("batch_size", "%d not in [1, %d]", c.BatchSize, train.MaxBatch)
		}
		if len(c.Fanouts) != c.Layers {
			return cfgErr("fanouts", "%d fanouts for %d layers (one per hop, seeds' hop first)", len(c.Fanouts), c.Layers)
		}
		for i, v := range c.Fanouts {
			if v == 0 || v < -1 || v > train.MaxFanout {
				return cfgErr("fanouts", "hop %d: fanout %d not in [1, %d] or -1 (all neighbors)", i+1, v, train.MaxFanout)
			}
		}
	case train.Full:
		if c.BatchSize < 0 || c.BatchSize > train.MaxBatch {
			return cfgErr("batch_size", "%d not in [0, %d] (0: all training edges)", c.BatchSize, train.MaxBatch)
		}
	default:
		return cfgErr("mode", "unknown mode %q (want sampled or full)", c.Mode)
	}
	if err := c.Split.Validate(); err != nil {
		return err
	}
	if c.NegRatio < 1 || c.NegRatio > MaxNegRatio {
		return cfgErr("neg_ratio", "%d not in [1, %d]", c.NegRatio, MaxNegRatio)
	}
	if c.NegSample != NegUniform && c.NegSample != NegDegree {
		return cfgErr("neg_sampling", "unknown distribution %q (want uniform or degree)", c.NegSample)
	}
	if c.Decoder != DecoderDot && c.Decoder != DecoderMLP {
		return cfgErr("decoder", "unknown decoder %q (want dot or mlp)", c.Decoder)
	}
	if c.HitsK < 1 || c.HitsK > MaxHitsK {
		return cfgErr("hits_k", "%d not in [1, %d]", c.HitsK, MaxHitsK)
	}
	return nil
}

// String is a one-line summary for logs.
func (c *Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "link %s %s, %s, decoder %s", c.Model, c.Mode, c.Common.Layout(), c.Decoder)
	switch {
	case c.Mode == train.Sampled:
		fmt.Fprintf(&b, ", batch %d edges, fanouts %v", c.BatchSize, c.Fanouts)
	case c.BatchSize > 0:
		fmt.Fprintf(&b, ", batch %d edges", c.BatchSize)
	}
	excl := ""
	if c.NegExclude {
		excl = ", excluding known edges"
	}
	fmt.Fprintf(&b, ", split %v, %d %s negative(s) per edge%s, Hits@%d, %s", c.Split, c.NegRatio, c.NegSample, excl, c.HitsK, c.Common.Schedule())
	return b.String()
}

func cfgErr(field, format string, args ...any) error {
	return &train.ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
