package link

import (
	"fmt"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Decoder scores node pairs from their embeddings.
type Decoder interface {
	// Score returns the logits (P x 1) of the P pairs (src[i], dst[i]),
	// int32 buffers of rows of h (embeddings, one row per node).
	Score(t *autograd.Tape, h *autograd.Var, src, dst backend.Buffer) (*autograd.Var, error)
	// ScorePairs is Score with the endpoints' rows in two matrices: src
	// rows of hs, dst rows of hd (typed graphs: the embeddings of a
	// relation's source and destination types).
	ScorePairs(t *autograd.Tape, hs, hd *autograd.Var, src, dst backend.Buffer) (*autograd.Var, error)
	// Params returns the decoder's trainable parameters (none for dot).
	Params() []*nn.Param
}

// NewDecoder builds kind (DecoderDot or DecoderMLP) for embeddings of
// width dim on b; the MLP's weights come from seed.
func NewDecoder(b backend.Backend, kind string, dim int, seed uint64) (Decoder, error) {
	switch kind {
	case DecoderDot:
		return dot{}, nil
	case DecoderMLP:
		l1, err := nn.NewLinear(b, "decoder.lin0", dim, dim, true, rng.Derive(seed, 0))
		if err != nil {
			return nil, err
		}
		l2, err := nn.NewLinear(b, "decoder.lin1", dim, 1, true, rng.Derive(seed, 1))
		if err != nil {
			nn.FreeParams(b, l1.Params())
			return nil, err
		}
		return &mlp{l1: l1, l2: l2}, nil
	}
	return nil, fmt.Errorf("link: unknown decoder %q (want dot or mlp)", kind)
}

// hadamard gathers both endpoints' rows (src of hs, dst of hd) and
// multiplies them.
func hadamard(t *autograd.Tape, hs, hd *autograd.Var, src, dst backend.Buffer) (*autograd.Var, error) {
	if src == nil || dst == nil || src.Len() != dst.Len() {
		return nil, fmt.Errorf("link: decoder: src and dst must be index buffers of one length")
	}
	gs, err := t.GatherRows(hs, src)
	if err != nil {
		return nil, err
	}
	gd, err := t.GatherRows(hd, dst)
	if err != nil {
		return nil, err
	}
	return t.Mul(gs, gd)
}

// dot is the inner-product decoder: the row sums of h_u ⊙ h_v.
type dot struct{}

func (dot) Params() []*nn.Param { return nil }

func (d dot) Score(t *autograd.Tape, h *autograd.Var, src, dst backend.Buffer) (*autograd.Var, error) {
	return d.ScorePairs(t, h, h, src, dst)
}

func (dot) ScorePairs(t *autograd.Tape, h, hd *autograd.Var, src, dst backend.Buffer) (*autograd.Var, error) {
	p, err := hadamard(t, h, hd, src, dst)
	if err != nil {
		return nil, err
	}
	ones := make([]float32, h.Cols)
	for i := range ones {
		ones[i] = 1
	}
	o, err := t.Upload(ones, h.Cols, 1)
	if err != nil {
		return nil, err
	}
	return t.MatMul(p, o)
}

// mlp is Linear(d, d), ReLU, Linear(d, 1) on h_u ⊙ h_v.
type mlp struct{ l1, l2 *nn.Linear }

func (m *mlp) Params() []*nn.Param { return append(m.l1.Params(), m.l2.Params()...) }

func (m *mlp) Score(t *autograd.Tape, h *autograd.Var, src, dst backend.Buffer) (*autograd.Var, error) {
	return m.ScorePairs(t, h, h, src, dst)
}

func (m *mlp) ScorePairs(t *autograd.Tape, hs, hd *autograd.Var, src, dst backend.Buffer) (*autograd.Var, error) {
	p, err := hadamard(t, hs, hd, src, dst)
	if err != nil {
		return nil, err
	}
	z, err := m.l1.Forward(t, p)
	if err != nil {
		return nil, err
	}
	if z, err = t.ReLU(z); err != nil {
		return nil, err
	}
	return m.l2.Forward(t, z)
}
