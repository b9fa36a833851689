package link

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/internal/rng"
)

// Brute-force references: every (positive, negative) pair compared.

func refAUC(pos, neg []float32) float64 {
	var s float64
	for _, p := range pos {
		for _, n := range neg {
			switch {
			case p > n:
				s++
			case p == n:
				s += 0.5
			}
		}
	}
	return s / float64(len(pos)*len(neg))
}

func refMRR(pos, neg []float32) float64 {
	var s float64
	for _, p := range pos {
		opt, pess := 0, 0 // OGB: (neg > pos).sum(), (neg >= pos).sum()
		for _, n := range neg {
			if n > p {
				opt++
			}
			if n >= p {
				pess++
			}
		}
		s += 1 / (0.5*float64(opt+pess) + 1)
	}
	return s / float64(len(pos))
}

func refHits(pos, neg []float32, k int) float64 {
	if len(neg) < k {
		return 1
	}
	// The k-th highest negative by selection: k passes of the maximum.
	used := make([]bool, len(neg))
	var kth float32
	for range k {
		best := -1
		for i, n := range neg {
			if !used[i] && (best < 0 || n > neg[best]) {
				best = i
			}
		}
		used[best] = true
		kth = neg[best]
	}
	c := 0
	for _, p := range pos {
		if p > kth {
			c++
		}
	}
	return float64(c) / float64(len(pos))
}

// TestMetricsAgainstBruteForce draws scores from a few levels (many
// ties, within and across the classes) and from a continuum, and compares
// every metric with the pairwise references.
func TestMetricsAgainstBruteForce(t *testing.T) {
	for trial := range 40 {
		s := rng.NewStream(rng.Derive(17, uint64(trial)))
		np, nn := 1+int(s.Below(60)), 1+int(s.Below(90))
		levels := 1 + s.Below(8) // few levels: ties everywhere
		if trial%4 == 3 {
			levels = 0 // continuous
		}
		draw := func(shift float32) float32 {
			if levels == 0 {
				return 2*s.Uniform01() - 1 + shift
			}
			return float32(s.Below(levels)) + shift*float32(s.Below(2))
		}
		pos, neg := make([]float32, np), make([]float32, nn)
		for i := range pos {
			pos[i] = draw(0.5)
		}
		for i := range neg {
			neg[i] = draw(0)
		}
		m, err := Evaluate(pos, neg, 1+int(s.Below(uint64(nn+5))))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []int{1, 3, 10, 50, nn, nn + 1} {
			got, err := HitsAtK(pos, neg, k)
			if err != nil {
				t.Fatal(err)
			}
			if want := refHits(pos, neg, k); got != want {
				t.Fatalf("trial %d: Hits@%d %v, brute force %v", trial, k, got, want)
			}
		}
		if want := refAUC(pos, neg); math.Abs(m.AUC-want) > 1e-12 {
			t.Fatalf("trial %d: AUC %v, brute force %v", trial, m.AUC, want)
		}
		if want := refMRR(pos, neg); math.Abs(m.MRR-want) > 1e-12 {
			t.Fatalf("trial %d: MRR %v, brute force %v", trial, m.MRR, want)
		}
	}
}

// TestMetricsHandComputed pins a few values by hand.
func TestMetricsHandComputed(t *testing.T) {
	pos := []float32{3, 1, 2}
	neg := []float32{2, 0, 2, 5}
	// Positive 3 beats 2,0,2 (3 of 4); 1 beats 0 (1); 2 beats 0, ties
	// two 2s (1 + 2*0.5 = 2). AUC = 6/12.
	if got, _ := AUC(pos, neg); got != 0.5 {
		t.Fatalf("AUC %v, want 0.5", got)
	}
	// Ranks: 3 -> 1 above (5) -> 2; 1 -> 3 above -> 4; 2 -> 1 above, 2
	// tied -> 1+1+1 = 3. MRR = (1/2 + 1/4 + 1/3)/3.
	if got, want := must(MRR(pos, neg)), (0.5+0.25+1.0/3)/3; math.Abs(got-want) > 1e-15 {
		t.Fatalf("MRR %v, want %v", got, want)
	}
	// The 2nd highest negative is 2: only 3 is strictly above.
	if got := must(HitsAtK(pos, neg, 2)); got != 1.0/3 {
		t.Fatalf("Hits@2 %v, want 1/3", got)
	}
	if got := must(HitsAtK(pos, neg, 5)); got != 1 {
		t.Fatalf("Hits@5 with 4 negatives %v, want 1 (OGB)", got)
	}
	// Perfect separation.
	if got := must(AUC([]float32{9, 8}, []float32{1, 2})); got != 1 {
		t.Fatalf("separated AUC %v", got)
	}
	// Constant scores are flagged (AUC 0.5 by ties), mixed ones not.
	if m, err := Evaluate([]float32{0.25, 0.25}, []float32{0.25}, 1); err != nil || !m.Constant || m.AUC != 0.5 ||
		!strings.Contains(MetricsLine(m, 1), "collapsed") {
		t.Fatalf("constant scores: %+v, line %q", m, MetricsLine(m, 1))
	}
	if m, err := Evaluate(pos, neg, 2); err != nil || m.Constant || strings.Contains(MetricsLine(m, 2), "collapsed") {
		t.Fatalf("varied scores flagged constant: %+v", m)
	}
	// BCE of logit 0 is log 2 whatever the label.
	if got := BCE([]float32{0}, []float32{0}); math.Abs(got-math.Ln2) > 1e-15 {
		t.Fatalf("BCE(0) %v, want log 2", got)
	}
	if got, want := BCE([]float32{50}, []float32{-50}), math.Log1p(math.Exp(-50)); math.Abs(got-want) > 1e-30 {
		t.Fatalf("BCE of confident right answers %v, want %v", got, want)
	}
}

func must(v float64, err error) float64 {
	if err != nil {
		panic(err)
	}
	return v
}

func TestMetricsErrors(t *testing.T) {
	nan := float32(math.NaN())
	var me *MetricError
	for name, c := range map[string][2][]float32{
		"no positives": {nil, {1}}, "no negatives": {{1}, nil},
		"NaN positive": {{1, nan}, {0}}, "NaN negative": {{1}, {nan}},
	} {
		if _, err := Evaluate(c[0], c[1], 1); !errors.As(err, &me) {
			t.Errorf("%s: %v, want a *MetricError", name, err)
		}
	}
	if _, err := HitsAtK([]float32{1}, []float32{0}, 0); !errors.As(err, &me) {
		t.Errorf("Hits@0: %v", err)
	}
}
