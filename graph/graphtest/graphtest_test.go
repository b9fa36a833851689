package graphtest

import (
	"testing"
)

func TestCNR2000(t *testing.T) {
	if testing.Short() {
		t.Skip("loading 3.2M edges is slow under -race; skipped with -short")
	}
	g := CNR2000(t)
	if g.NumRows != 325557 || g.NumEdges() != 3216152 {
		t.Fatalf("cnr-2000: %d nodes, %d edges", g.NumRows, g.NumEdges())
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	// meta.json: 87,442 self loops, max out-degree 2,716.
	loops, maxDeg := 0, int64(0)
	for v := int64(0); v < g.NumRows; v++ {
		maxDeg = max(maxDeg, g.Degree(int32(v)))
		for _, u := range g.Neighbors(int32(v)) {
			if int64(u) == v {
				loops++
			}
		}
	}
	if loops != 87442 || maxDeg != 2716 {
		t.Fatalf("%d self loops, max out-degree %d; meta.json says 87442, 2716", loops, maxDeg)
	}
}

func TestPowerLaw(t *testing.T) {
	g := PowerLaw(20000, 30, 1)
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	avg := float64(g.NumEdges()) / 20000
	if avg < 20 || avg > 40 {
		t.Fatalf("average degree %.1f, want about 30", avg)
	}
	var maxDeg int64
	for v := int32(0); v < 20000; v++ {
		maxDeg = max(maxDeg, g.Degree(v))
	}
	if maxDeg < 300 {
		t.Fatalf("max degree %d: no heavy tail", maxDeg)
	}
	h := PowerLaw(20000, 30, 1)
	if h.NumEdges() != g.NumEdges() || h.Indices[12345] != g.Indices[12345] {
		t.Fatalf("PowerLaw is not deterministic")
	}
}

func TestSkewed(t *testing.T) {
	const n, avg, long = 4000, 6, 10
	g := Skewed(3, n, avg, long)
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	var empty, longRows, zeros int
	for v := int32(0); v < n; v++ {
		d := g.Degree(v)
		if d > long*avg {
			t.Fatalf("row %d has %d entries, want at most %d", v, d, long*avg)
		}
		if d == 0 {
			empty++
		}
		if d > avg {
			longRows++
		}
	}
	for _, w := range g.Weights {
		if w != float32(int(w)) || w < 0 || w > 4 {
			t.Fatalf("weight %v not a whole number in [0, 4]", w)
		}
		if w == 0 {
			zeros++
		}
	}
	// About 1/8 of the rows are forced empty (more with short draws), and
	// about 1/8 may run long.
	if empty < n/10 || longRows < n/20 || zeros == 0 {
		t.Fatalf("%d empty rows, %d long rows, %d zero weights: not skewed", empty, longRows, zeros)
	}
	h := Skewed(3, n, avg, long)
	if h.NumEdges() != g.NumEdges() || h.Indices[h.NumEdges()/2] != g.Indices[g.NumEdges()/2] {
		t.Fatal("Skewed is not deterministic")
	}
	if e := Skewed(1, 1, 0, 1); e.Indices == nil || e.Weights == nil || e.NumEdges() != 0 {
		t.Fatalf("edgeless graph: %+v", e)
	}
}

func TestDistinctNodes(t *testing.T) {
	got := DistinctNodes(5, 100, 40)
	if len(got) != 40 {
		t.Fatalf("%d nodes, want 40", len(got))
	}
	seen := map[int32]bool{}
	for _, v := range got {
		if v < 0 || v >= 100 || seen[v] {
			t.Fatalf("node %d out of range or repeated in %v", v, got)
		}
		seen[v] = true
	}
	if all := DistinctNodes(5, 7, 100); len(all) != 7 {
		t.Fatalf("k > n: %d nodes, want all 7", len(all))
	}
	if again := DistinctNodes(5, 100, 40); again[17] != got[17] {
		t.Fatal("DistinctNodes is not deterministic")
	}
}
