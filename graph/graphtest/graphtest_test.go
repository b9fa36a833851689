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
