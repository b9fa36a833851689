package train

import (
	"fmt"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Inference with a trained typed model (a saved one: 'strata predict',
// 'embed' and 'evaluate'). Both functions make the whole-graph pass of
// RunHetero's full evaluation (typedEval), on one device.

// EvaluateTyped scores m on h's labeled splits as RunHetero's full
// evaluation does (--eval full): the same pass on the same back end, so
// the accuracies equal the training report's for the epoch m's
// parameters come from. h is the graph the model reads (after
// HeteroConfig.Graph).
func EvaluateTyped(b backend.Backend, h *dataset.Hetero, m *nn.HeteroModel) (Tally, error) {
	if err := CheckHetero(h); err != nil {
		return Tally{}, err
	}
	ev := &typedEval{in: &TypedInputs{B: b, H: h, Model: m}, layers: m.Config().Layers,
		splits: labeledSplits(h.Train, h.Val, h.Test, h.Labels)}
	defer ev.close()
	return ev.evaluate()
}

// TypedOutputs returns layer k's outputs (1 <= k <= layers; the logits
// for the last) for every node of h's target type, rows x cols
// row-major, from one whole-graph pass without dropout.
func TypedOutputs(b backend.Backend, h *dataset.Hetero, m *nn.HeteroModel, k int) (data []float32, rows, cols int, err error) {
	ev := &typedEval{in: &TypedInputs{B: b, H: h, Model: m}, layers: m.Config().Layers}
	defer ev.close()
	if k < 1 || k > ev.layers {
		return nil, 0, 0, fmt.Errorf("train: layer %d of a %d-layer model", k, ev.layers)
	}
	t := autograd.NewTape(b)
	defer t.Release()
	xs, blocks, err := ev.wholeGraph(t, k)
	if err != nil {
		return nil, 0, 0, err
	}
	outs, err := m.ForwardLayers(t, xs, blocks, k)
	if err != nil {
		return nil, 0, 0, err
	}
	y := outs[m.Config().Schema.Target]
	n := int(h.NodeTypes[m.Config().Schema.Target].NumNodes)
	if y == nil || y.Rows != n {
		return nil, 0, 0, fmt.Errorf("train: the typed model computed no rows of its target type at layer %d", k)
	}
	data = make([]float32, y.Len())
	if err := b.Download(data, y.Value); err != nil {
		return nil, 0, 0, err
	}
	return data, y.Rows, y.Cols, nil
}
