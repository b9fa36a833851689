package nn

import (
	"fmt"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Model kinds accepted by Config.Kind.
const (
	KindGCN  = "gcn"
	KindSAGE = "sage"
	KindGAT  = "gat"
)

// Model is a stack of graph layers producing class logits.
type Model interface {
	// Forward returns logits: rows = destination nodes of the last block,
	// cols = OutDim. x holds the features of blocks[0]'s source nodes
	// (blocks[0].NumSrc x InDim). len(blocks) must equal the number of
	// layers; for full-batch training every entry is the same full-graph
	// block. train enables dropout; seed keys the dropout masks (derive it
	// from the step, e.g. rng.Derive(runSeed, epoch, batch)).
	Forward(t *autograd.Tape, x *autograd.Var, blocks []*Block, train bool, seed uint64) (*autograd.Var, error)
	// ForwardSparse is Forward with a sparse feature matrix (NumSrc x
	// InDim): the first layer's projection is an SpMM and input dropout
	// acts on the non-zeros. Same results as Forward in distribution
	// (dropout masks differ: ForwardSparseAsDense draws Forward's), much
	// cheaper for bag-of-words features.
	ForwardSparse(t *autograd.Tape, x *autograd.SparseInput, blocks []*Block, train bool, seed uint64) (*autograd.Var, error)
	// Params returns the trainable parameters in a stable order.
	Params() []*Param
	// Config returns the configuration the model was built with
	// (defaults filled in).
	Config() Config
}

// Config describes a model. Zero fields take the defaults of
// DefaultConfig for the kind, except InDim and OutDim which are required.
type Config struct {
	Kind   string // "gcn", "sage" or "gat"
	InDim  int    // input feature width
	Hidden int    // hidden width (per head for GAT)
	OutDim int    // number of classes
	Layers int    // number of graph layers (>= 1)

	Heads    int // GAT: heads of hidden layers (concatenated)
	OutHeads int // GAT: heads of the output layer (averaged)

	Dropout       float32 // dropout on the input of every layer after the first
	InputDropout  float32 // dropout on the input features (first layer)
	AttnDropout   float32 // GAT: dropout on attention coefficients
	NegativeSlope float32 // GAT: LeakyReLU slope of attention logits

	// NoDropout forces all dropout rates to 0 (zero rates otherwise mean
	// "use the default").
	NoDropout bool
	// ExactDropout takes Dropout, InputDropout and AttnDropout as given,
	// a zero rate meaning none (without it a zero rate means the kind's
	// default): a GAT with no dropout on its inputs but 0.5 on its
	// attention coefficients, or the reverse.
	ExactDropout bool

	Seed uint64 // parameter initialization seed
}

// DefaultConfig returns the published settings for the kind:
//
//	gcn:  2 layers, hidden 16, dropout 0.5 on inputs and hidden (Kipf & Welling)
//	sage: 2 layers, hidden 16, dropout 0.5 (DGL's GraphSAGE Cora example)
//	gat:  2 layers, 8 heads x 8 hidden, 1 output head, dropout 0.6 on
//	      inputs and attention, slope 0.2 (Velickovic et al.)
func DefaultConfig(kind string, inDim, outDim int) (Config, error) {
	c := Config{Kind: kind, InDim: inDim, OutDim: outDim}
	if err := c.fill(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// DefaultOptim returns the learning rate and L2 weight decay of the
// published Cora settings for the kind (Adam): gcn 0.01/5e-4,
// sage 0.01/5e-4, gat 0.005/5e-4.
func DefaultOptim(kind string) (lr, weightDecay float32, err error) {
	switch kind {
	case KindGCN, KindSAGE:
		return 0.01, 5e-4, nil
	case KindGAT:
		return 0.005, 5e-4, nil
	}
	return 0, 0, fmt.Errorf("nn: unknown model kind %q (want gcn, sage or gat)", kind)
}

// ConfigError reports an invalid Config.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return "nn: config: " + e.Msg }

func (c *Config) fill() error {
	bad := func(format string, args ...any) error {
		return &ConfigError{Msg: fmt.Sprintf(format, args...)}
	}
	if c.InDim <= 0 || c.OutDim <= 0 {
		return bad("InDim (%d) and OutDim (%d) must be positive", c.InDim, c.OutDim)
	}
	if c.Layers == 0 {
		c.Layers = 2
	}
	switch c.Kind {
	case KindGCN, KindSAGE:
		if c.Hidden == 0 {
			c.Hidden = 16
		}
		if !c.NoDropout && !c.ExactDropout {
			if c.Dropout == 0 {
				c.Dropout = 0.5
			}
			if c.InputDropout == 0 {
				c.InputDropout = 0.5
			}
		}
	case KindGAT:
		if c.Hidden == 0 {
			c.Hidden = 8
		}
		if c.Heads == 0 {
			c.Heads = 8
		}
		if c.OutHeads == 0 {
			c.OutHeads = 1
		}
		if c.NegativeSlope == 0 {
			c.NegativeSlope = 0.2
		}
		if !c.NoDropout && !c.ExactDropout {
			if c.Dropout == 0 {
				c.Dropout = 0.6
			}
			if c.InputDropout == 0 {
				c.InputDropout = 0.6
			}
			if c.AttnDropout == 0 {
				c.AttnDropout = 0.6
			}
		}
	default:
		return bad("unknown model kind %q (want gcn, sage or gat)", c.Kind)
	}
	if c.NoDropout {
		c.Dropout, c.InputDropout, c.AttnDropout = 0, 0, 0
	}
	const maxDim = 1 << 20
	if c.Layers < 1 || c.Layers > 64 {
		return bad("Layers = %d, want 1..64", c.Layers)
	}
	if c.Hidden < 1 || c.Hidden > maxDim || c.InDim > maxDim || c.OutDim > maxDim {
		return bad("dimensions out of range (in %d, hidden %d, out %d; max %d)", c.InDim, c.Hidden, c.OutDim, maxDim)
	}
	if c.Kind == KindGAT && (c.Heads < 1 || c.OutHeads < 1 || c.Heads > 1024 || c.OutHeads > 1024) {
		return bad("heads %d / out heads %d, want 1..1024", c.Heads, c.OutHeads)
	}
	for _, p := range []struct {
		name string
		v    float32
	}{{"Dropout", c.Dropout}, {"InputDropout", c.InputDropout}, {"AttnDropout", c.AttnDropout}} {
		if !(p.v >= 0 && p.v < 1) {
			return bad("%s = %v, want 0 <= p < 1", p.name, p.v)
		}
	}
	if !(c.NegativeSlope >= 0) {
		return bad("NegativeSlope = %v, want >= 0", c.NegativeSlope)
	}
	return nil
}

// New builds a model with freshly initialized parameters on back end b.
// Free its parameters with FreeParams(b, m.Params()).
func New(b backend.Backend, cfg Config) (Model, error) {
	if b == nil {
		return nil, &ConfigError{Msg: "nil backend"}
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	var m Model
	var err error
	switch cfg.Kind {
	case KindGCN:
		m, err = newGCN(b, cfg)
	case KindSAGE:
		m, err = newSAGE(b, cfg)
	default:
		m, err = newGAT(b, cfg)
	}
	if err != nil {
		return nil, err
	}
	// One value and one gradient buffer for all parameters: the
	// optimizer's step and zeroing are one launch each (Flat).
	if err := flatten(b, m.Params()); err != nil {
		FreeParams(b, m.Params())
		return nil, err
	}
	return m, nil
}
