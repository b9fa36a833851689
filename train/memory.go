package train

import (
	"fmt"
	"math"
	"strings"
)

// Shape is what a memory estimate needs to know of a dataset.
type Shape struct {
	Nodes, Edges int64 // Edges: stored (directed) edges
	FeatDim      int64
	Classes      int64
	TrainNodes   int64
	// EvalNodes: the nodes an evaluation scores (the train, validation
	// and test splits); 0 when unknown (every node counted).
	EvalNodes int64
	// EvalEdges: the in-edges of those nodes, summed (a bound on the
	// rows the layer below the last computes, besides them); 0 when
	// unknown (every node counted).
	EvalEdges int64
	// Signed: some feature value is negative, so RowNorm auto keeps the
	// table as it is (no normalized copy); false when unknown.
	Signed bool
}

// MemoryPart is one line of a MemoryEstimate: Bytes for each of Count
// holders (devices, or 1), and the flag that sizes it most.
type MemoryPart struct {
	What  string
	Flag  string // e.g. "--hidden" ("" when no flag sizes it)
	Bytes float64
	Count int
}

// MemoryEstimate is the memory a run will allocate on top of the dataset
// already loaded, as a list of parts. Estimates are floats so that an
// absurd configuration cannot overflow them.
type MemoryEstimate struct {
	Parts []MemoryPart
}

// Add appends a part.
func (m *MemoryEstimate) Add(what, flag string, bytes float64, count int) {
	m.Parts = append(m.Parts, MemoryPart{What: what, Flag: flag, Bytes: bytes, Count: count})
}

// Total is the sum over the parts of Bytes times Count.
func (m *MemoryEstimate) Total() float64 {
	t := 0.0
	for _, p := range m.Parts {
		t += p.Bytes * float64(p.Count)
	}
	return t
}

// Largest is the part with the largest Bytes times Count.
func (m *MemoryEstimate) Largest() MemoryPart {
	var best MemoryPart
	for _, p := range m.Parts {
		if p.Bytes*float64(p.Count) > best.Bytes*float64(best.Count) {
			best = p
		}
	}
	return best
}

// String lists the parts, largest first is not promised: in order added,
// e.g. "model and optimizer 12 MiB x 4 devices, batches 3 MiB".
func (m *MemoryEstimate) String() string {
	var s []string
	for _, p := range m.Parts {
		if p.Bytes*float64(p.Count) < 1<<20 {
			continue
		}
		if p.Count > 1 {
			s = append(s, fmt.Sprintf("%s %s x %d", p.What, formatBytes(p.Bytes), p.Count))
		} else {
			s = append(s, fmt.Sprintf("%s %s", p.What, formatBytes(p.Bytes)))
		}
	}
	return strings.Join(s, ", ")
}

func formatBytes(b float64) string {
	switch {
	case b >= 1<<40:
		return fmt.Sprintf("%.1f TiB", b/(1<<40))
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	}
	return fmt.Sprintf("%.0f MiB", b/(1<<20))
}

// Widths returns the input width of every layer and the output width of
// the last: widths[0] is the feature dimension, widths[l+1] layer l's
// output (for gat, heads times hidden; the output layer's heads are
// averaged but computed side by side).
func (c *Common) Widths(featDim, classes int64) []float64 {
	w := make([]float64, 0, c.Layers+1)
	w = append(w, float64(featDim))
	for l := range c.Layers {
		out := float64(c.Hidden)
		if c.Model == GAT {
			out *= float64(c.Heads)
		}
		if l == c.Layers-1 {
			out = float64(classes)
			if c.Model == GAT {
				out *= float64(c.OutHeads)
			}
		}
		w = append(w, out)
	}
	return w
}

// Params estimates the model's parameter count: a weight matrix per layer
// (two for GraphSAGE: self and neighbors) plus biases and, for gat, the
// attention vectors.
func (c *Common) Params(featDim, classes int64) float64 {
	w := c.Widths(featDim, classes)
	mats := 1.0
	if c.Model == SAGE {
		mats = 2
	}
	p := 0.0
	for l := 1; l < len(w); l++ {
		p += mats*w[l-1]*w[l] + 3*w[l]
	}
	return p
}

// StateBytes is the model's and optimizer's memory: the parameters, their
// gradients and Adam's two moments (SGD: one momentum buffer).
func (c *Common) StateBytes(featDim, classes int64) float64 {
	copies := 4.0
	if c.Optimizer == "sgd" {
		copies = 3
	}
	return 4 * copies * c.Params(featDim, classes)
}

// ActivationBytes is what one training step over rows rows and edges
// edges keeps for its backward pass: every layer's aggregated input and
// outputs (float32) and their gradients (none for the first layer's
// input: the features need no gradient), and per edge the indices and,
// for gat, the attention coefficients of every head. Without backward
// (evaluation) no gradients are kept.
func (c *Common) ActivationBytes(rows, edges float64, featDim, classes int64, backward bool) float64 {
	w := c.Widths(featDim, classes)
	keep := 1.0
	if backward {
		keep = 2
	}
	b := 0.0
	for l := 1; l < len(w); l++ {
		in := w[l-1] * keep
		if l == 1 {
			in = w[0]
		}
		b += 4 * rows * (in + 2*w[l]*keep)
		heads := 1.0
		if c.Model == GAT {
			heads = float64(c.Heads)
			if l == len(w)-1 {
				heads = float64(c.OutHeads)
			}
		}
		b += 4 * edges * (1 + 2*heads*keep)
	}
	return b
}

// SampledRows estimates the distinct input rows and the edges of one
// sampled batch of batch seeds with fanouts fanouts on shape s: every hop
// multiplies the frontier by 1 + min(fanout, mean degree) (-1: the mean
// degree), capped at the node count.
func SampledRows(s Shape, batch int, fanouts []int) (rows, edges float64) {
	deg := 0.0
	if s.Nodes > 0 {
		deg = float64(s.Edges) / float64(s.Nodes)
	}
	n := float64(s.Nodes)
	rows = math.Min(float64(batch), n)
	for _, f := range fanouts {
		take := deg
		if f >= 0 {
			take = math.Min(float64(f), deg)
		}
		edges += rows * take
		rows = math.Min(rows*(1+take), n)
	}
	return rows, edges
}

// EstimateMemory estimates what Run allocates for cfg (sampled mode) on
// a dataset of shape s, besides the dataset itself: the model and
// optimizer state, a row-normalized copy of the features, and the
// activations of a training step on a sampled batch and of a full-graph
// evaluation. docs/limits.md explains the terms.
func EstimateMemory(cfg Config, s Shape) MemoryEstimate {
	var m MemoryEstimate
	m.Add("model and optimizer", "--hidden", cfg.StateBytes(s.FeatDim, s.Classes), 1)
	m.Add("normalized features", "", 4*float64(s.Nodes)*float64(s.FeatDim), 1)
	seeds := cfg.BatchSize
	if s.TrainNodes > 0 {
		seeds = int(min(int64(seeds), s.TrainNodes))
	}
	rows, edges := SampledRows(s, seeds, cfg.Fanouts)
	m.Add("batch", "--batch-size", 4*rows*float64(s.FeatDim)+cfg.ActivationBytes(rows, edges, s.FeatDim, s.Classes, true), 1)
	if cfg.Eval == Full {
		m.Add("evaluation", "--hidden", cfg.ActivationBytes(float64(s.Nodes), float64(s.Edges), s.FeatDim, s.Classes, false), 1)
	}
	return m
}
