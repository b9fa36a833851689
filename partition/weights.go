package partition

import (
	"fmt"
	"strings"

	"github.com/strata-gnn/strata/graph"
)

// Constraint names a balance constraint that NodeWeights can build.
type Constraint string

const (
	// ConstraintNodes balances node counts (weight 1 per node).
	ConstraintNodes Constraint = "nodes"
	// ConstraintEdges balances edges: a node weighs its degree in the
	// symmetrized graph (at least 1), so parts hold similar edge counts.
	ConstraintEdges Constraint = "edges"
	// ConstraintTrain balances training nodes (weight 1 for a training
	// node, 0 otherwise), so every part gets a similar share of seeds.
	ConstraintTrain Constraint = "train"
)

// ParseConstraints parses a comma-separated list such as "nodes,train".
func ParseConstraints(s string) ([]Constraint, error) {
	var out []Constraint
	seen := map[Constraint]bool{}
	for _, f := range strings.Split(s, ",") {
		c := Constraint(strings.TrimSpace(f))
		switch c {
		case ConstraintNodes, ConstraintEdges, ConstraintTrain:
		default:
			return nil, inputErr("unknown constraint %q (want nodes, edges or train)", f)
		}
		if seen[c] {
			return nil, inputErr("constraint %q given twice", c)
		}
		seen[c] = true
		out = append(out, c)
	}
	return out, nil
}

// Weights are per-node balance weights for several constraints at once:
// W[v*NCon+c] is node v's weight under constraint c. Partition keeps every
// part within the imbalance tolerance for every constraint.
type Weights struct {
	NCon  int
	W     []int32
	Names []string // optional, one per constraint
}

func (w *Weights) check(n int) error {
	if w.NCon < 1 || w.NCon > maxConstraints {
		return inputErr("weights: %d constraints, want 1..%d", w.NCon, maxConstraints)
	}
	if int64(len(w.W)) != int64(n)*int64(w.NCon) {
		return inputErr("weights: %d values, want nodes*constraints = %d*%d", len(w.W), n, w.NCon)
	}
	if w.Names != nil && len(w.Names) != w.NCon {
		return inputErr("weights: %d names for %d constraints", len(w.Names), w.NCon)
	}
	for i, x := range w.W {
		if x < 0 {
			return inputErr("weights: W[%d] = %d (node %d, constraint %d) is negative", i, x, i/w.NCon, i%w.NCon)
		}
	}
	return nil
}

// NodeWeights builds Weights for the given constraints (default: nodes)
// on the symmetrized graph s (degrees are read from it) and the sorted
// training-node IDs train (needed only for ConstraintTrain).
func NodeWeights(s *graph.CSR, train []int32, cons ...Constraint) (*Weights, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if len(cons) == 0 {
		cons = []Constraint{ConstraintNodes}
	}
	if len(cons) > maxConstraints {
		return nil, inputErr("%d constraints, at most %d", len(cons), maxConstraints)
	}
	n := int(s.NumRows)
	nc := len(cons)
	w := &Weights{NCon: nc, W: make([]int32, n*nc)}
	for c, kind := range cons {
		w.Names = append(w.Names, string(kind))
		switch kind {
		case ConstraintNodes:
			for v := 0; v < n; v++ {
				w.W[v*nc+c] = 1
			}
		case ConstraintEdges:
			for v := 0; v < n; v++ {
				w.W[v*nc+c] = int32(max(1, min(s.Indptr[v+1]-s.Indptr[v], 1<<30)))
			}
		case ConstraintTrain:
			if len(train) == 0 {
				return nil, inputErr("constraint %q needs training nodes, and there are none", kind)
			}
			for i, t := range train {
				if t < 0 || int(t) >= n {
					return nil, inputErr("training node %d (position %d) not in [0, %d)", t, i, n)
				}
				if w.W[int(t)*nc+c] != 0 {
					return nil, inputErr("training node %d listed twice", t)
				}
				w.W[int(t)*nc+c] = 1
			}
		default:
			return nil, inputErr("unknown constraint %q", kind)
		}
	}
	return w, nil
}

// String lists the constraints.
func (w *Weights) String() string {
	if w == nil {
		return "nodes"
	}
	if w.Names != nil {
		return strings.Join(w.Names, ",")
	}
	return fmt.Sprintf("%d constraints", w.NCon)
}
