package gen

import (
	"fmt"
	"os"
	"testing"
	"time"
)

func TestScratch(t *testing.T) {
	name := os.Getenv("SCRATCH")
	if name == "" {
		t.Skip()
	}
	cfg, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	d, err := Generate(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(t0)
	g := d.Graph
	var maxd int64
	var iso int64
	for u := int64(0); u < g.NumRows; u++ {
		dd := g.Indptr[u+1] - g.Indptr[u]
		maxd = max(maxd, dd)
		if dd == 0 {
			iso++
		}
	}
	var same int64
	for u := int64(0); u < g.NumRows; u++ {
		for _, v := range g.Indices[g.Indptr[u]:g.Indptr[u+1]] {
			if d.Labels[u] == d.Labels[v] {
				same++
			}
		}
	}
	fmt.Printf("%s: %v nodes=%d edges=%d (target %.0f) mean=%.2f max=%d iso=%d homophily=%.3f train=%d val=%d test=%d\n",
		name, el, g.NumRows, g.NumEdges(), float64(cfg.NumNodes)*cfg.AvgDegree, float64(g.NumEdges())/float64(g.NumRows), maxd, iso,
		float64(same)/float64(g.NumEdges()), len(d.Train), len(d.Val), len(d.Test))
	raw, agg := signal(d)
	fmt.Printf("signal: raw %.3f agg %.3f\n", raw, agg)
}
