package link

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// Metrics are the ranking metrics of one split's scores (decoder logits
// of its positive and its negative pairs).
//
//   - AUC: the probability that a positive scores above a negative, ties
//     counting one half (the Mann-Whitney statistic, what
//     sklearn.metrics.roc_auc_score computes).
//   - MRR: the mean over positives of 1/rank, the rank of a positive
//     among all the split's negatives: 1 + #(negatives above it) +
//     #(negatives tied with it)/2 (OGB's tie rule: the mean of the
//     optimistic and the pessimistic rank).
//   - Hits: Hits@K, the share of positives scored strictly above the
//     K-th highest negative (OGB's ogbl-collab/ppa/ddi evaluator; 1 when
//     there are fewer than K negatives, as OGB returns).
//   - Loss: the mean binary cross-entropy of the pairs (positives
//     labelled 1, negatives 0).
//   - Constant: every pair scored the same (AUC exactly 0.5): the
//     encoder's output collapsed, most often to zero through dead ReLUs
//     at too high a learning rate (3-layer GraphSAGE 256 on the products
//     shape does at --lr 0.01, and learns at 0.001).
type Metrics struct {
	AUC      float64 `json:"auc"`
	MRR      float64 `json:"mrr"`
	Hits     float64 `json:"hits"`
	Loss     float64 `json:"loss"`
	Constant bool    `json:"constant_scores,omitempty"`
}

// MetricError reports scores that cannot be ranked.
type MetricError struct{ Msg string }

func (e *MetricError) Error() string { return "link: metrics: " + e.Msg }

// checkScores refuses empty lists and NaN (a diverged model ranks
// nothing).
func checkScores(pos, neg []float32) error {
	if len(pos) == 0 || len(neg) == 0 {
		return &MetricError{Msg: fmt.Sprintf("%d positive and %d negative scores: need both", len(pos), len(neg))}
	}
	for name, s := range map[string][]float32{"positive": pos, "negative": neg} {
		for i, v := range s {
			if v != v {
				return &MetricError{Msg: fmt.Sprintf("%s score %d is NaN (diverged: lower the learning rate)", name, i)}
			}
		}
	}
	return nil
}

// sortedAsc returns a sorted copy of s.
func sortedAsc(s []float32) []float32 {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// below and above count the entries of sorted ascending s that are
// smaller than v and larger than v.
func below(s []float32, v float32) int {
	return sort.Search(len(s), func(i int) bool { return s[i] >= v })
}
func above(s []float32, v float32) int {
	return len(s) - sort.Search(len(s), func(i int) bool { return s[i] > v })
}

// AUC is the area under the ROC curve of positive scores pos against
// negative scores neg, ties counting one half. O((P + N) log N).
func AUC(pos, neg []float32) (float64, error) {
	if err := checkScores(pos, neg); err != nil {
		return 0, err
	}
	s := sortedAsc(neg)
	var twice int64 // 2 * (wins + ties/2): exact in integers
	for _, p := range pos {
		lo := below(s, p)
		ties := len(s) - lo - above(s, p)
		twice += 2*int64(lo) + int64(ties)
	}
	return float64(twice) / (2 * float64(len(pos)) * float64(len(neg))), nil
}

// MRR is the mean reciprocal rank of every positive among all negatives
// (see Metrics).
func MRR(pos, neg []float32) (float64, error) {
	if err := checkScores(pos, neg); err != nil {
		return 0, err
	}
	s := sortedAsc(neg)
	var sum float64
	for _, p := range pos {
		hi := above(s, p)
		ties := len(s) - hi - below(s, p)
		sum += 1 / (1 + float64(hi) + 0.5*float64(ties))
	}
	return sum / float64(len(pos)), nil
}

// HitsAtK is the share of positives scored strictly above the k-th
// highest negative (1 with fewer than k negatives), as OGB computes
// Hits@K.
func HitsAtK(pos, neg []float32, k int) (float64, error) {
	if err := checkScores(pos, neg); err != nil {
		return 0, err
	}
	if k < 1 {
		return 0, &MetricError{Msg: fmt.Sprintf("Hits@%d: K must be >= 1", k)}
	}
	if len(neg) < k {
		return 1, nil
	}
	kth := sortedAsc(neg)[len(neg)-k]
	n := 0
	for _, p := range pos {
		if p > kth {
			n++
		}
	}
	return float64(n) / float64(len(pos)), nil
}

// BCE is the mean binary cross-entropy of logits pos (label 1) and neg
// (label 0), in float64: softplus(-x) for a positive, softplus(x) for a
// negative.
func BCE(pos, neg []float32) float64 {
	var s float64
	for _, x := range pos {
		s += softplus(-float64(x))
	}
	for _, x := range neg {
		s += softplus(float64(x))
	}
	return s / float64(len(pos)+len(neg))
}

func softplus(x float64) float64 { return math.Max(x, 0) + math.Log1p(math.Exp(-math.Abs(x))) }

// Evaluate computes every metric of the scores with Hits@k.
func Evaluate(pos, neg []float32, k int) (Metrics, error) {
	var m Metrics
	var err error
	if m.AUC, err = AUC(pos, neg); err != nil {
		return m, err
	}
	if m.MRR, err = MRR(pos, neg); err != nil {
		return m, err
	}
	if m.Hits, err = HitsAtK(pos, neg, k); err != nil {
		return m, err
	}
	m.Loss = BCE(pos, neg)
	m.Constant = constant(pos, neg)
	return m, nil
}

// constant reports whether every score of pos and neg is the same.
func constant(pos, neg []float32) bool {
	all := [2][]float32{pos, neg}
	var first float32
	seen := false
	for _, s := range all {
		for _, x := range s {
			if !seen {
				first, seen = x, true
			} else if x != first {
				return false
			}
		}
	}
	return seen
}
