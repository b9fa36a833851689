package gen

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/rng"
)

func TestGenerateHetero(t *testing.T) {
	c := HeteroPreset()
	c.Papers = 1000
	h, err := GenerateHetero(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := dataset.ValidateHetero(h); err != nil {
		t.Fatal(err)
	}
	if len(h.NodeTypes) != 3 || len(h.EdgeTypes) != 4 || h.NumClasses != 6 || h.NodeTypes[h.Target].Name != "paper" {
		t.Fatalf("shape: %d node types, %d edge types, %d classes", len(h.NodeTypes), len(h.EdgeTypes), h.NumClasses)
	}
	if h.NodeTypes[0].FeatDim != 16 || h.NodeTypes[1].FeatDim != 32 || h.NodeTypes[1].NumNodes != 500 || h.NodeTypes[2].NumNodes != 500 {
		t.Fatalf("node types %+v", h.NodeTypes)
	}
	// The reverse relations are the transposes of the forward ones.
	for _, p := range [][2]int{{0, 1}, {2, 3}} {
		a, b := h.EdgeTypes[p[0]].In, h.EdgeTypes[p[1]].In
		if a.NumEdges() != b.NumEdges() || a.NumRows != b.NumCols {
			t.Fatalf("relations %d and %d are not each other's reverse", p[0], p[1])
		}
		for v := int64(0); v < a.NumRows; v++ {
			for _, u := range a.Neighbors(int32(v)) {
				found := false
				for _, w := range b.Neighbors(u) {
					found = found || int64(w) == v
				}
				if !found {
					t.Fatalf("edge %d -> %d of relation %d has no reverse", u, v, p[0])
				}
			}
		}
	}
	// Planted: a paper's authors are near its class's centroid, its
	// fields near the centroid of the class's pair partner. Check via
	// the author/field groups implied by the nearest centroid: most
	// edges follow the plan (Mix 0.2 plus chance agreement).
	cent := unitVectors(rng0(c.Seed), 6, 32)
	nearest := func(x []float32) int32 {
		best, bd := int32(0), math.Inf(1)
		for k := range 6 {
			var d float64
			for j := range 32 {
				e := float64(x[j] - cent[k*32+j])
				d += e * e
			}
			if d < bd {
				best, bd = int32(k), d
			}
		}
		return best
	}
	follow := func(rel int, other int, want func(c int32) int32) float64 {
		in := h.EdgeTypes[rel].In // rows: papers
		f := h.NodeTypes[other].Features
		ok, all := 0, 0
		for p := int64(0); p < in.NumRows; p++ {
			for _, o := range in.Neighbors(int32(p)) {
				all++
				if nearest(f[int(o)*32:int(o+1)*32]) == want(h.Labels[p]) {
					ok++
				}
			}
		}
		return float64(ok) / float64(all)
	}
	if a := follow(0, 1, func(c int32) int32 { return c }); a < 0.75 {
		t.Errorf("only %.2f of writes edges come from the paper's class group", a)
	}
	if f := follow(3, 2, func(c int32) int32 { return c ^ 1 }); f < 0.75 {
		t.Errorf("only %.2f of rev_has_topic edges come from the partner group", f)
	}
	// Papers' own features carry no class: their class means are close.
	var mean [6][16]float64
	var cnt [6]float64
	for p := range int(h.NodeTypes[0].NumNodes) {
		l := h.Labels[p]
		cnt[l]++
		for j := range 16 {
			mean[l][j] += float64(h.NodeTypes[0].Features[p*16+j])
		}
	}
	for k := range 6 {
		var norm float64
		for j := range 16 {
			m := mean[k][j] / cnt[k]
			norm += m * m
		}
		if math.Sqrt(norm) > 0.25 {
			t.Errorf("class %d's paper features have mean norm %.2f", k, math.Sqrt(norm))
		}
	}
	// A pure function of the configuration.
	again, err := GenerateHetero(c)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h, again) {
		t.Fatal("GenerateHetero is not deterministic")
	}
	c.Seed++
	other, _ := GenerateHetero(c)
	if reflect.DeepEqual(h.Labels, other.Labels) {
		t.Fatal("another seed gave the same labels")
	}
}

func rng0(seed uint64) uint64 { return rng.Derive(seed, tagHCentroid) }

func TestHeteroConfigValidate(t *testing.T) {
	for _, c := range []struct {
		edit func(*HeteroConfig)
		want string
	}{
		{func(c *HeteroConfig) { c.Papers = 1 }, "Papers: 1 out of range"},
		{func(c *HeteroConfig) { c.Pairs = 0 }, "Pairs"},
		{func(c *HeteroConfig) { c.OtherDim = 1 << 17 }, "OtherDim"},
		{func(c *HeteroConfig) { c.Degree = 0 }, "Degree"},
		{func(c *HeteroConfig) { c.Papers, c.Degree = 1<<28, 1000 }, "over 2^29 edges"},
		{func(c *HeteroConfig) { c.Noise = math.NaN() }, "Noise"},
		{func(c *HeteroConfig) { c.Mix = 2 }, "Mix"},
		{func(c *HeteroConfig) { c.TrainFrac, c.TestFrac = 0.7, 0.7 }, "exceeds 1"},
	} {
		cfg := HeteroPreset()
		c.edit(&cfg)
		_, err := GenerateHetero(cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want a ConfigError containing %q", err, c.want)
		}
	}
}
