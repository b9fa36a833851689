package gen

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/rng"
)

func mustPreset(t testing.TB, name string) Config {
	t.Helper()
	c, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustGenerate(t testing.TB, c Config) *dataset.Dataset {
	t.Helper()
	d, err := Generate(c, nil)
	if err != nil {
		t.Fatalf("Generate(%s): %v", c.Name, err)
	}
	return d
}

// digest hashes every array of d, so two datasets compare by one value.
func digest(d *dataset.Dataset) string {
	h := sha256.New()
	var b []byte
	b = binary.LittleEndian.AppendUint64(b, uint64(d.Graph.NumRows))
	for _, x := range d.Graph.Indptr {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	for _, s := range [][]int32{d.Graph.Indices, d.Labels, d.Train, d.Val, d.Test} {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
		for _, x := range s {
			b = binary.LittleEndian.AppendUint32(b, uint32(x))
		}
	}
	for _, x := range d.Features {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	h.Write(b)
	return fmt.Sprintf("%x", h.Sum(nil))
}

func TestDeterministicAcrossGOMAXPROCS(t *testing.T) {
	c := mustPreset(t, "tiny")
	// More nodes than one chunk, so several chunks and scan parts run.
	c.NumNodes = 2*chunkNodes + 123
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var want string
	for _, procs := range []int{1, 4, 3} {
		runtime.GOMAXPROCS(procs)
		got := digest(mustGenerate(t, c))
		if want == "" {
			want = got
		} else if got != want {
			t.Fatalf("GOMAXPROCS=%d: digest %s, want %s (as with GOMAXPROCS=1)", procs, got, want)
		}
	}
}

func TestSeedsDiffer(t *testing.T) {
	c := mustPreset(t, "tiny")
	a := mustGenerate(t, c)
	c.Seed++
	b := mustGenerate(t, c)
	if digest(a) == digest(b) {
		t.Fatal("seeds 1 and 2 give identical datasets")
	}
	if slices.Equal(a.Graph.Indices, b.Graph.Indices) {
		t.Error("seeds 1 and 2 give identical edges")
	}
	if slices.Equal(a.Labels, b.Labels) {
		t.Error("seeds 1 and 2 give identical labels")
	}
	if slices.Equal(a.Features, b.Features) {
		t.Error("seeds 1 and 2 give identical features")
	}
}

// checkGraph checks the stored-graph promises of the package doc.
func checkGraph(t *testing.T, d *dataset.Dataset) {
	t.Helper()
	g := d.Graph
	n := g.NumRows
	if g.NumCols != n || int64(len(g.Indptr)) != n+1 || g.Indptr[0] != 0 || g.Indptr[n] != int64(len(g.Indices)) {
		t.Fatalf("bad CSR header: rows %d cols %d indptr len %d ends %d, %d indices",
			n, g.NumCols, len(g.Indptr), g.Indptr[n], len(g.Indices))
	}
	for u := range n {
		row := g.Indices[g.Indptr[u]:g.Indptr[u+1]]
		for i, v := range row {
			if v < 0 || int64(v) >= n {
				t.Fatalf("row %d: neighbor %d out of range", u, v)
			}
			if int64(v) == u {
				t.Fatalf("row %d: self-loop", u)
			}
			if i > 0 && v <= row[i-1] {
				t.Fatalf("row %d not strictly ascending at %d: %d after %d", u, i, v, row[i-1])
			}
			back := g.Indices[g.Indptr[v]:g.Indptr[v+1]]
			if _, ok := slices.BinarySearch(back, int32(u)); !ok {
				t.Fatalf("edge %d->%d stored but %d->%d missing", u, v, v, u)
			}
		}
	}
	if err := dataset.Validate(d); err != nil {
		t.Fatalf("dataset.Validate: %v", err)
	}
}

func TestShape(t *testing.T) {
	for _, name := range []string{"tiny", "small"} {
		t.Run(name, func(t *testing.T) {
			c := mustPreset(t, name)
			d := mustGenerate(t, c)
			checkGraph(t, d)
			g := d.Graph
			if g.NumRows != c.NumNodes || d.FeatDim != c.FeatDim || d.NumClasses != c.NumClasses ||
				int64(len(d.Features)) != c.NumNodes*int64(c.FeatDim) || int64(len(d.Labels)) != c.NumNodes || d.Directed {
				t.Fatalf("shape: %d nodes, dim %d, %d classes, %d features, %d labels, directed %v",
					g.NumRows, d.FeatDim, d.NumClasses, len(d.Features), len(d.Labels), d.Directed)
			}
			// Duplicates and self-loops cost a few percent of the drawn
			// edges (6-8% at these sizes).
			target := float64(c.NumNodes) * c.AvgDegree
			if e := float64(g.NumEdges()); e < 0.88*target || e > 1.01*target {
				t.Errorf("%d stored edges, want within [0.88, 1.01] x %.0f", g.NumEdges(), target)
			}
			// Heavy tail: the largest degree far above the mean, and a
			// Hill estimate of the tail index near Exponent-1.
			deg := make([]float64, g.NumRows)
			for u := range g.NumRows {
				deg[u] = float64(g.Indptr[u+1] - g.Indptr[u])
			}
			slices.Sort(deg)
			mean := float64(g.NumEdges()) / float64(g.NumRows)
			if mx := deg[len(deg)-1]; mx < 8*mean || mx > c.MaxDegree*1.5 {
				t.Errorf("max degree %v, want >= 8 x mean %.1f and <= 1.5 x cap %v", mx, mean, c.MaxDegree)
			}
			if alpha := hill(deg, len(deg)/20); math.Abs(alpha-(c.Exponent-1)) > 0.35 {
				t.Errorf("Hill tail index %.2f over the top 5%%, want %.2f +- 0.35", alpha, c.Exponent-1)
			}
		})
	}
}

// hill is the Hill estimator of the tail index from the top k of the
// sorted sample x.
func hill(x []float64, k int) float64 {
	n := len(x)
	ref := x[n-k-1]
	var s float64
	for _, v := range x[n-k:] {
		s += math.Log(v / ref)
	}
	return float64(k) / s
}

func TestHomophily(t *testing.T) {
	for _, h := range []float64{0.2, 0.75, 1} {
		c := mustPreset(t, "small")
		c.Homophily = h
		d := mustGenerate(t, c)
		g := d.Graph
		var same int64
		for u := range g.NumRows {
			for _, v := range g.Neighbors(int32(u)) {
				if d.Labels[u] == d.Labels[v] {
					same++
				}
			}
		}
		got := float64(same) / float64(g.NumEdges())
		// Deduplication removes more same-class edges (denser blocks),
		// so the stored value sits slightly below the drawn one.
		if got < h-0.04 || got > h+0.01 {
			t.Errorf("homophily %v: measured %.3f", h, got)
		}
	}
}

func TestLabelsSplitsFeatures(t *testing.T) {
	c := mustPreset(t, "small")
	d := mustGenerate(t, c)
	n := float64(c.NumNodes)
	// Class shares follow (k+1)^-skew.
	cnt := make([]float64, c.NumClasses)
	for _, k := range d.Labels {
		cnt[k]++
	}
	var z float64
	for k := range c.NumClasses {
		z += math.Pow(float64(k+1), -c.ClassSkew)
	}
	for k := range c.NumClasses {
		want := n * math.Pow(float64(k+1), -c.ClassSkew) / z
		if math.Abs(cnt[k]-want) > 5*math.Sqrt(want) {
			t.Errorf("class %d has %v nodes, want %.0f", k, cnt[k], want)
		}
	}
	// Splits: sizes near the fractions, disjoint.
	seen := make([]bool, c.NumNodes)
	for _, s := range []struct {
		name string
		ids  []int32
		frac float64
	}{{"train", d.Train, c.TrainFrac}, {"val", d.Val, c.ValFrac}, {"test", d.Test, c.TestFrac}} {
		want := n * s.frac
		if math.Abs(float64(len(s.ids))-want) > 5*math.Sqrt(want) {
			t.Errorf("%s has %d nodes, want %.0f", s.name, len(s.ids), want)
		}
		for _, u := range s.ids {
			if seen[u] {
				t.Fatalf("node %d in two splits", u)
			}
			seen[u] = true
		}
	}
	// Features: per class, the mean is near a unit vector and the
	// residual variance per dimension is (Noise^2 / FeatDim).
	dim := c.FeatDim
	mean := make([]float64, c.NumClasses*dim)
	for u, k := range d.Labels {
		for j := range dim {
			mean[int(k)*dim+j] += float64(d.Features[u*dim+j])
		}
	}
	for k := range c.NumClasses {
		var norm float64
		for j := range dim {
			mean[k*dim+j] /= cnt[k]
			norm += mean[k*dim+j] * mean[k*dim+j]
		}
		// The noise adds about Noise^2/count to the squared norm.
		if want := 1 + c.Noise*c.Noise/cnt[k]; math.Abs(norm-want) > 0.15 {
			t.Errorf("class %d centroid squared norm %.3f, want %.3f", k, norm, want)
		}
	}
	var ss float64
	for u, k := range d.Labels {
		for j := range dim {
			e := float64(d.Features[u*dim+j]) - mean[int(k)*dim+j]
			ss += e * e
		}
	}
	variance := ss / (n * float64(dim))
	if want := c.Noise * c.Noise / float64(dim); math.Abs(variance/want-1) > 0.03 {
		t.Errorf("noise variance %.4f per dimension, want %.4f", variance, want)
	}
}

// TestSignal checks the planted signal: a nearest-centroid classifier on a
// node's own features is mediocre, on features averaged over the node and
// its neighbors (one mean-aggregation step, what a GNN layer computes) it
// is much better.
func TestSignal(t *testing.T) {
	for _, tc := range []struct {
		name         string
		rawLo, rawHi float64
		minGain      float64
	}{
		{"tiny", 0.45, 0.75, 0.15},
		{"small", 0.35, 0.65, 0.3},
	} {
		c := mustPreset(t, tc.name)
		raw, agg := signal(mustGenerate(t, c))
		t.Logf("%s: nearest centroid on raw features %.3f, on neighbor-averaged %.3f (chance %.3f)",
			tc.name, raw, agg, 1/float64(c.NumClasses))
		if raw < tc.rawLo || raw > tc.rawHi {
			t.Errorf("%s: raw-feature accuracy %.3f, want in [%.2f, %.2f]", tc.name, raw, tc.rawLo, tc.rawHi)
		}
		if agg < raw+tc.minGain {
			t.Errorf("%s: neighbor-averaged accuracy %.3f, want >= raw %.3f + %.2f", tc.name, agg, raw, tc.minGain)
		}
	}
	// Without homophily, neighbors carry no class information and
	// averaging dilutes the signal instead.
	c := mustPreset(t, "small")
	c.Homophily = 1 / float64(c.NumClasses)
	raw, agg := signal(mustGenerate(t, c))
	if agg > raw {
		t.Errorf("homophily 1/C: averaged accuracy %.3f should not beat raw %.3f", agg, raw)
	}
}

func TestWriteOpenRoundTrip(t *testing.T) {
	d := mustGenerate(t, mustPreset(t, "tiny"))
	dir := t.TempDir() + "/tiny"
	if err := dataset.Write(dir, d, dataset.WriteOptions{NoSync: true, Quiet: true}); err != nil {
		t.Fatal(err)
	}
	back, err := dataset.Open(dir, dataset.OpenOptions{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if digest(back) != digest(d) || back.Name != d.Name || back.Directed {
		t.Fatal("dataset read back differs from the one written")
	}
}

func TestPresets(t *testing.T) {
	names := Presets()
	for _, want := range []string{"tiny", "small", "products", "papers", "papers-m", "papers-s"} {
		if !slices.Contains(names, want) {
			t.Errorf("Presets() = %v lacks %q", names, want)
		}
	}
	for _, name := range names {
		c, err := Preset(name)
		if err != nil {
			t.Fatalf("Preset(%q): %v", name, err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("preset %q invalid: %v", name, err)
		}
		if c.Name != name {
			t.Errorf("preset %q is named %q", name, c.Name)
		}
	}
	p := mustPreset(t, "products")
	if p.NumNodes != 2_449_029 || p.FeatDim != 100 || p.NumClasses != 47 {
		t.Errorf("products shape %d/%d/%d", p.NumNodes, p.FeatDim, p.NumClasses)
	}
	full, s := mustPreset(t, "papers"), mustPreset(t, "papers-s")
	if full.NumNodes != 111_059_956 || full.FeatDim != 128 || full.NumClasses != 172 ||
		s.NumNodes != 1_110_600 || s.MaxDegree != full.MaxDegree/10 {
		t.Errorf("papers %d nodes cap %v, papers-s %d nodes cap %v", full.NumNodes, full.MaxDegree, s.NumNodes, s.MaxDegree)
	}
	if est := full.EstimateBytes(); est < 60e9 || est > 120e9 {
		t.Errorf("papers estimate %.1f GB, want a single large host's worth", est/1e9)
	}
	if _, err := Preset("nope"); err == nil || !strings.Contains(err.Error(), "tiny") {
		t.Errorf("unknown preset: error %v should list the presets", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"NumNodes", func(c *Config) { c.NumNodes = 0 }},
		{"NumNodes", func(c *Config) { c.NumNodes = -5 }},
		{"NumNodes", func(c *Config) { c.NumNodes = 1 << 31 }},
		{"AvgDegree", func(c *Config) { c.AvgDegree = -1 }},
		{"AvgDegree", func(c *Config) { c.AvgDegree = math.NaN() }},
		{"MaxDegree", func(c *Config) { c.MaxDegree = c.AvgDegree }},
		{"MaxDegree", func(c *Config) { c.MaxDegree = float64(c.NumNodes) + 1 }},
		{"MaxDegree", func(c *Config) { c.MaxDegree = math.Inf(1) }},
		{"Exponent", func(c *Config) { c.Exponent = 1 }},
		{"Exponent", func(c *Config) { c.Exponent = 11 }},
		{"NumClasses", func(c *Config) { c.NumClasses = 0 }},
		{"NumClasses", func(c *Config) { c.NumClasses = int(c.NumNodes) + 1 }},
		{"ClassSkew", func(c *Config) { c.ClassSkew = -0.1 }},
		{"ClassSkew", func(c *Config) { c.ClassSkew = 3 }},
		{"Homophily", func(c *Config) { c.Homophily = 1.5 }},
		{"Homophily", func(c *Config) { c.NumClasses = 1; c.Homophily = 0.5 }},
		{"FeatDim", func(c *Config) { c.FeatDim = -1 }},
		{"FeatDim", func(c *Config) { c.FeatDim = 1 << 20 }},
		{"Noise", func(c *Config) { c.Noise = -1 }},
		{"TrainFrac", func(c *Config) { c.TrainFrac = 2 }},
		{"ValFrac", func(c *Config) { c.ValFrac = math.NaN() }},
		{"TestFrac", func(c *Config) { c.TrainFrac, c.ValFrac, c.TestFrac = 0.5, 0.3, 0.3 }},
		{"MaxBytes", func(c *Config) { c.MaxBytes = -1 }},
		// Fine field by field, but far beyond any host: rejected before
		// allocating.
		{"NumNodes", func(c *Config) { c.NumNodes = MaxNumNodes; c.MaxDegree = 1e6; c.AvgDegree = 1000 }},
		{"NumNodes", func(c *Config) { c.MaxBytes = 1 << 10 }},
	} {
		c := mustPreset(t, "tiny")
		tc.edit(&c)
		err := c.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%s: Validate() = %v, want a *ConfigError on %s", tc.field, err, tc.field)
			continue
		}
		if !strings.Contains(err.Error(), "tiny") {
			t.Errorf("error %q does not name the config", err)
		}
		if _, err := Generate(c, nil); err == nil {
			t.Errorf("%s: Generate accepted an invalid config", tc.field)
		}
	}
	c := mustPreset(t, "tiny")
	for _, f := range []float64{0, -1, math.NaN(), math.Inf(1), 2e6} {
		if _, err := c.Scaled(f); err == nil {
			t.Errorf("Scaled(%v) accepted", f)
		}
	}
	if _, err := mustPreset(t, "papers").Scaled(100); err == nil {
		t.Error("papers scaled to 11 billion nodes accepted")
	}
}

// TestEdgeCases generates degenerate but valid configurations.
func TestEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"one node", func(c *Config) { c.NumNodes, c.NumClasses, c.Homophily, c.AvgDegree, c.MaxDegree = 1, 1, 1, 0.5, 1 }},
		{"one class", func(c *Config) { c.NumClasses, c.Homophily = 1, 1 }},
		{"no features", func(c *Config) { c.FeatDim = 0 }},
		{"odd feature dim", func(c *Config) { c.FeatDim = 7 }},
		{"heterophilous", func(c *Config) { c.Homophily = 0 }},
		{"no splits", func(c *Config) { c.TrainFrac, c.ValFrac, c.TestFrac = 0, 0, 0 }},
		{"classes as many as nodes", func(c *Config) { c.NumNodes, c.NumClasses, c.AvgDegree, c.MaxDegree = 50, 50, 3, 20 }},
		{"steep and skewed", func(c *Config) { c.Exponent, c.ClassSkew = 10, 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustPreset(t, "tiny")
			tc.edit(&c)
			d := mustGenerate(t, c)
			checkGraph(t, d)
			if c.FeatDim == 0 && d.Features != nil {
				t.Error("features present with FeatDim 0")
			}
			if c.Homophily == 0 {
				for u := range d.Graph.NumRows {
					for _, v := range d.Graph.Neighbors(int32(u)) {
						if d.Labels[u] == d.Labels[v] {
							t.Fatalf("homophily 0 but edge %d-%d joins class %d", u, v, d.Labels[u])
						}
					}
				}
			}
		})
	}
}

func TestParetoMin(t *testing.T) {
	for _, tc := range []struct{ m, c, alpha float64 }{{50, 12000, 1.3}, {10, 150, 1.5}, {3, 20, 1}, {30, 40000, 0.5}} {
		xm := paretoMin(tc.m, tc.c, tc.alpha)
		// Monte Carlo mean of the clipped Pareto by quadrature of its
		// quantile function.
		const k = 20000
		var s float64
		for i := range k {
			u := (float64(i) + 0.5) / k
			s += min(xm*math.Pow(u, -1/tc.alpha), tc.c)
		}
		if got := s / k; math.Abs(got/tc.m-1) > 0.01 {
			t.Errorf("paretoMin(%v, %v, %v) = %v gives mean %v", tc.m, tc.c, tc.alpha, xm, got)
		}
	}
}

func TestAliasDraw(t *testing.T) {
	w := []float64{1, 0, 3, 6, 0.5, 9.5}
	items := []int32{10, 11, 12, 13, 14, 15}
	tab := make([]slot, len(w))
	buildAlias(tab, items, w)
	const draws = 400000
	cnt := map[int32]float64{}
	key := key(7, tagEdges, 1)
	for i := range uint64(draws) {
		cnt[draw(tab, rng.Hash(key, i))]++
	}
	for i, it := range items {
		want := draws * w[i] / 20
		if math.Abs(cnt[it]-want) > 5*math.Sqrt(want+1) {
			t.Errorf("item %d drawn %v times, want %.0f", it, cnt[it], want)
		}
	}
}

// products-hard is products with harder labels only: the same shape, so
// that figures on the two compare, and a scaled CPU check.
func TestProductsHardPreset(t *testing.T) {
	names := Presets()
	for _, want := range []string{"products-hard", "products-hard-s"} {
		if !slices.Contains(names, want) {
			t.Errorf("Presets() = %v lacks %q", names, want)
		}
	}
	p, h := mustPreset(t, "products"), mustPreset(t, "products-hard")
	if err := h.Validate(); err != nil {
		t.Fatalf("products-hard invalid: %v", err)
	}
	if h.Homophily >= p.Homophily || h.Noise <= p.Noise {
		t.Errorf("products-hard homophily %v noise %v should be below %v and above %v (products')",
			h.Homophily, h.Noise, p.Homophily, p.Noise)
	}
	// AvgDegree is recalibrated (fewer same-class edges, fewer duplicates)
	// so that the stored edge count matches products' (123.7M, measured).
	if math.Abs(h.AvgDegree/p.AvgDegree-1) > 0.01 {
		t.Errorf("products-hard AvgDegree %v, want within 1%% of products' %v", h.AvgDegree, p.AvgDegree)
	}
	same := h
	same.Name, same.Homophily, same.Noise, same.AvgDegree = p.Name, p.Homophily, p.Noise, p.AvgDegree
	if same != p {
		t.Errorf("products-hard differs from products beyond name, homophily, noise and degree:\n%+v\n%+v", h, p)
	}
	s := mustPreset(t, "products-hard-s")
	if s.NumNodes != 48_981 || s.Homophily != h.Homophily || s.Noise != h.Noise ||
		s.MaxDegree != h.MaxDegree*math.Sqrt(0.02) || s.AvgDegree <= h.AvgDegree {
		t.Errorf("products-hard-s %+v is not products-hard at 2%% with a higher drawn degree", s)
	}
}

// At a small scale of products-hard, one node's features alone are weak
// and a neighbor mean is far better but not perfect (nearest centroid:
// 5% raw, 84% averaged at 2% scale).
func TestProductsHardSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("generates 10K nodes with 100-d features; skipped with -short")
	}
	c, err := mustPreset(t, "products-hard").Scaled(0.004)
	if err != nil {
		t.Fatal(err)
	}
	raw, agg := signal(mustGenerate(t, c))
	t.Logf("products-hard@0.004: nearest centroid raw %.3f, neighbor-averaged %.3f", raw, agg)
	if raw > 0.15 {
		t.Errorf("raw-feature accuracy %.3f, want <= 0.15", raw)
	}
	if agg < 0.5 || agg > 0.95 {
		t.Errorf("neighbor-averaged accuracy %.3f, want in [0.5, 0.95]", agg)
	}
}
