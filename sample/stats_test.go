package sample

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// star returns an in-adjacency whose node 0 has in-neighbors 1..n with the
// given weights (nil = unweighted all-ones), so one seed's draws can be
// counted.
func star(n int, w []float32) *graph.CSR {
	g := &graph.CSR{NumRows: int64(n + 1), NumCols: int64(n + 1), Indptr: make([]int64, n+2)}
	for i := 1; i <= n; i++ {
		g.Indices = append(g.Indices, graph.NodeID(i))
		if w != nil {
			g.Weights = append(g.Weights, w[i-1])
		} else {
			g.Weights = append(g.Weights, 1)
		}
	}
	for v := 1; v <= n+1; v++ {
		g.Indptr[v] = int64(n)
	}
	return g
}

// drawCounts samples seed 0 of star g trials times (one batch index per
// trial) and counts how often each neighbor position is drawn.
func drawCounts(t *testing.T, g *graph.CSR, cfg Config, trials int) []int {
	t.Helper()
	s := mustSampler(t, g, cfg)
	counts := make([]int, g.NumEdges())
	for b := range trials {
		nb, err := s.SampleHop([]graph.NodeID{0}, 0, Key{Seed: 42, Batch: b})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range nb.EdgeIDs {
			counts[e]++
		}
	}
	return counts
}

func expectUniform(total float64, n int) []float64 {
	e := make([]float64, n)
	for i := range e {
		e[i] = total / float64(n)
	}
	return e
}

func TestUniformNoReplaceChiSquare(t *testing.T) {
	for _, c := range []struct{ deg, k, trials int }{
		{20, 5, 20000},   // Floyd, sorted set
		{300, 100, 3000}, // Floyd, bitmap
		{7, 6, 7000},
	} {
		t.Run(fmt.Sprintf("deg%d_k%d", c.deg, c.k), func(t *testing.T) {
			counts := drawCounts(t, star(c.deg, nil), Config{Fanouts: []int{c.k}}, c.trials)
			// Inclusion counts without replacement vary less than
			// multinomial ones: each has variance trials*p*(1-p), p = k/deg,
			// so dividing by (1-p) restores a chi-square with deg-1 df.
			chi := chiSquare(counts, expectUniform(float64(c.trials*c.k), c.deg)) / (1 - float64(c.k)/float64(c.deg))
			crit := chiCritical(c.deg - 1)
			t.Logf("chi-square %.2f (0.999 critical %.2f)", chi, crit)
			if chi > crit {
				t.Fatalf("chi-square %.1f > %.1f; counts %v", chi, crit, counts)
			}
		})
	}
}

// Pairs drawn from 6 neighbors with fanout 2 must be uniform over all 15
// pairs: per-item frequencies alone would not catch a biased joint law.
func TestUniformNoReplacePairs(t *testing.T) {
	const trials = 30000
	s := mustSampler(t, star(6, nil), Config{Fanouts: []int{2}})
	pairs := map[[2]int64]int{}
	for b := range trials {
		nb, _ := s.SampleHop([]graph.NodeID{0}, 0, Key{Seed: 1, Batch: b})
		pairs[[2]int64{nb.EdgeIDs[0], nb.EdgeIDs[1]}]++
	}
	if len(pairs) != 15 {
		t.Fatalf("%d distinct pairs, want 15", len(pairs))
	}
	obs := []int{}
	for _, c := range pairs {
		obs = append(obs, c)
	}
	chi, crit := chiSquare(obs, expectUniform(trials, 15)), chiCritical(14)
	t.Logf("chi-square %.2f (0.999 critical %.2f)", chi, crit)
	if chi > crit {
		t.Fatalf("pair chi-square %.1f > %.1f", chi, crit)
	}
}

func TestFloydPathsAgree(t *testing.T) {
	var p, q picker
	cases := 2000
	if testing.Short() {
		cases = 300
	}
	for i := range cases {
		key := rng.Hash(77, uint64(i))
		n := uint64(65 + i%500)
		k := uint64(1 + i%int(n-1))
		a := append([]uint64(nil), p.floydSorted(key, n, k)...)
		b := q.floydBitmap(key, n, k)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("n=%d k=%d: sorted %v != bitmap %v", n, k, a, b)
		}
	}
}

func TestUniformReplaceChiSquare(t *testing.T) {
	const deg, k, trials = 10, 3, 10000
	counts := drawCounts(t, star(deg, nil), Config{Fanouts: []int{k}, Replace: true}, trials)
	chi, crit := chiSquare(counts, expectUniform(trials*k, deg)), chiCritical(deg-1)
	t.Logf("chi-square %.2f (0.999 critical %.2f)", chi, crit)
	if chi > crit {
		t.Fatalf("chi-square %.1f > %.1f; counts %v", chi, crit, counts)
	}
}

func TestWeightedReplaceChiSquare(t *testing.T) {
	w := []float32{1, 2, 3, 4, 0, 10, 0.5}
	const k, trials = 4, 20000
	counts := drawCounts(t, star(len(w), w), Config{Fanouts: []int{k}, Replace: true, Weighted: true}, trials)
	if counts[4] != 0 {
		t.Fatalf("zero-weight neighbor drawn %d times", counts[4])
	}
	var obs []int
	var exp []float64
	total := 20.5
	for i, x := range w {
		if x > 0 {
			obs = append(obs, counts[i])
			exp = append(exp, float64(k*trials)*float64(x)/total)
		}
	}
	chi, crit := chiSquare(obs, exp), chiCritical(len(obs)-1)
	t.Logf("chi-square %.2f (0.999 critical %.2f)", chi, crit)
	if chi > crit {
		t.Fatalf("chi-square %.1f > %.1f; counts %v", chi, crit, counts)
	}
}

// Exact pair probabilities of successive weighted sampling without
// replacement: P{i,j} = wi/W * wj/(W-wi) + wj/W * wi/(W-wj).
func TestWeightedNoReplacePairs(t *testing.T) {
	w := []float32{1, 0, 2, 3, 6}
	const trials = 30000
	s := mustSampler(t, star(len(w), w), Config{Fanouts: []int{2}, Weighted: true})
	pairs := map[[2]int64]int{}
	for b := range trials {
		nb, _ := s.SampleHop([]graph.NodeID{0}, 0, Key{Seed: 3, Batch: b})
		if len(nb.EdgeIDs) != 2 {
			t.Fatalf("%d edges", len(nb.EdgeIDs))
		}
		pairs[[2]int64{nb.EdgeIDs[0], nb.EdgeIDs[1]}]++
	}
	W := 12.0
	var obs []int
	var exp []float64
	pos := []int64{0, 2, 3, 4}
	for a := range pos {
		for b := a + 1; b < len(pos); b++ {
			wi, wj := float64(w[pos[a]]), float64(w[pos[b]])
			p := wi/W*wj/(W-wi) + wj/W*wi/(W-wj)
			obs = append(obs, pairs[[2]int64{pos[a], pos[b]}])
			exp = append(exp, p*trials)
			delete(pairs, [2]int64{pos[a], pos[b]})
		}
	}
	if len(pairs) != 0 {
		t.Fatalf("unexpected pairs drawn (zero weight or unordered): %v", pairs)
	}
	chi, crit := chiSquare(obs, exp), chiCritical(len(obs)-1)
	t.Logf("chi-square %.2f (0.999 critical %.2f)", chi, crit)
	if chi > crit {
		t.Fatalf("chi-square %.1f > %.1f; obs %v exp %v", chi, crit, obs, exp)
	}
}

func TestWeightedNoReplaceSingle(t *testing.T) {
	w := []float32{0.5, 1.5, 4, 2}
	const trials = 16000
	counts := drawCounts(t, star(len(w), w), Config{Fanouts: []int{1}, Weighted: true}, trials)
	exp := make([]float64, len(w))
	for i, x := range w {
		exp[i] = trials * float64(x) / 8
	}
	chi, crit := chiSquare(counts, exp), chiCritical(len(w)-1)
	t.Logf("chi-square %.2f (0.999 critical %.2f)", chi, crit)
	if chi > crit {
		t.Fatalf("chi-square %.1f > %.1f; counts %v", chi, crit, counts)
	}
}

// The alias table must reproduce the weights exactly (up to float32).
func TestAliasTableExact(t *testing.T) {
	var a aliasScratch
	for i, w := range [][]float32{{1}, {1, 1}, {0, 3}, {1, 2, 3, 4, 0, 10}, {1e-6, 1, 1e6}, {0, 0, 5, 0}} {
		prob := make([]float32, len(w))
		alias := make([]int32, len(w))
		a.buildAlias(w, prob, alias)
		n := float64(len(w))
		got := make([]float64, len(w))
		for c := range w {
			got[c] += float64(prob[c]) / n
			got[alias[c]] += (1 - float64(prob[c])) / n
		}
		total := 0.0
		for _, x := range w {
			total += float64(x)
		}
		for c, x := range w {
			if math.Abs(got[c]-float64(x)/total) > 1e-6 {
				t.Fatalf("case %d: column %d has probability %v, want %v", i, c, got[c], float64(x)/total)
			}
			if x == 0 && (prob[c] != 0 || w[alias[c]] <= 0) {
				t.Fatalf("case %d: zero weight %d can be drawn", i, c)
			}
		}
	}
}

// With many neighbors most of A-ExpJ's work is in the skip phase; check the
// inclusion probability of every neighbor against the exact value for
// k = 2: pi_i = p_i + sum_{j != i} p_j * w_i / (W - w_j), p_i = w_i / W.
func TestWeightedNoReplaceInclusion(t *testing.T) {
	const n, trials = 40, 20000
	w := make([]float32, n)
	W := 0.0
	for i := range w {
		w[i] = float32(1 + (i*7)%13)
		if i%9 == 4 {
			w[i] = 0
		}
		W += float64(w[i])
	}
	counts := drawCounts(t, star(n, w), Config{Fanouts: []int{2}, Weighted: true}, trials)
	chi, df := 0.0, -1
	for i := range w {
		if w[i] == 0 {
			if counts[i] != 0 {
				t.Fatalf("zero-weight neighbor %d drawn", i)
			}
			continue
		}
		wi := float64(w[i])
		pi := wi / W
		for j := range w {
			if j != i {
				wj := float64(w[j])
				pi += wj / W * wi / (W - wj)
			}
		}
		// Binomial(trials, pi) counts, standardized.
		d := float64(counts[i]) - trials*pi
		chi += d * d / (trials * pi * (1 - pi))
		df++
	}
	crit := chiCritical(df)
	t.Logf("inclusion chi-square %.2f (0.999 critical %.2f)", chi, crit)
	if chi > crit {
		t.Fatalf("inclusion frequencies off: %v", counts)
	}
}

// setProbs returns the exact probability of every k-subset (as a sorted
// key string) under successive sampling proportional to w.
func setProbs(w []float64, k int) map[string]float64 {
	out := map[string]float64{}
	var rec func(chosen []int, p, left float64)
	rec = func(chosen []int, p, left float64) {
		if len(chosen) == k {
			s := slices.Clone(chosen)
			slices.Sort(s)
			out[fmt.Sprint(s)] += p
			return
		}
		for i, x := range w {
			if x > 0 && !slices.Contains(chosen, i) {
				rec(append(slices.Clone(chosen), i), p*x/left, left-x)
			}
		}
	}
	total := 0.0
	for _, x := range w {
		total += x
	}
	rec(nil, 1, total)
	return out
}

func checkSets(t *testing.T, name string, w []float64, k int, counts map[string]int, trials int) {
	t.Helper()
	probs := setProbs(w, k)
	var obs []int
	var exp []float64
	for set, p := range probs {
		obs = append(obs, counts[set])
		exp = append(exp, p*float64(trials))
		delete(counts, set)
	}
	if len(counts) != 0 {
		t.Fatalf("%s: impossible sets drawn: %v", name, counts)
	}
	chi, crit := chiSquare(obs, exp), chiCritical(len(obs)-1)
	t.Logf("%s: set chi-square %.2f over %d sets (0.999 critical %.2f)", name, chi, len(obs), crit)
	if chi > crit {
		t.Fatalf("%s: set frequencies off", name)
	}
}

// A few heavy edges make alias rejection give up and expJ finish the
// draw: the mixture must still have the exact successive-sampling law.
func TestWeightedNoReplaceSkewed(t *testing.T) {
	w := []float32{50, 1, 0, 50, 2, 0.5, 1}
	wf := make([]float64, len(w))
	for i, x := range w {
		wf[i] = float64(x)
	}
	const trials = 40000
	s := mustSampler(t, star(len(w), w), Config{Fanouts: []int{3}, Weighted: true})
	counts := map[string]int{}
	for b := range trials {
		nb, _ := s.SampleHop([]graph.NodeID{0}, 0, Key{Seed: 5, Batch: b})
		counts[fmt.Sprint(nb.EdgeIDs)]++
	}
	checkSets(t, "sampler", wf, 3, counts, trials)
}

// expJ alone (the fallback path), with and without positions excluded.
func TestExpJ(t *testing.T) {
	w := []float32{3, 0, 1, 4, 2, 2, 5}
	const trials = 20000
	var p picker
	for _, pre := range [][]uint64{nil, {3}, {0, 6}} {
		counts := map[string]int{}
		for i := range trials {
			st := rng.NewStream(rng.Hash(17, uint64(i)))
			sel := p.expJ(&st, w, slices.Clone(pre), 2)
			if !slices.IsSorted(sel) || len(sel) != len(pre)+2 {
				t.Fatalf("expJ returned %v", sel)
			}
			for _, x := range pre {
				if !slices.Contains(sel, x) {
					t.Fatalf("expJ dropped pre-chosen %d: %v", x, sel)
				}
			}
			var rest []uint64
			for _, x := range sel {
				if !slices.Contains(pre, x) {
					rest = append(rest, x)
				}
			}
			counts[fmt.Sprint(rest)]++
		}
		wf := make([]float64, len(w))
		for i, x := range w {
			if !slices.Contains(pre, uint64(i)) {
				wf[i] = float64(x)
			}
		}
		checkSets(t, fmt.Sprintf("excluding %v", pre), wf, 2, counts, trials)
	}
}
