package gen

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Config describes a synthetic dataset. Every field is checked by Validate
// before anything is allocated.
type Config struct {
	// Name is stored as the dataset's name.
	Name string
	// Seed selects the dataset; the output is a pure function of Config.
	Seed uint64

	// NumNodes is the node count, 1 .. 2^31-1.
	NumNodes int64
	// AvgDegree is the expected mean degree (stored directed edges per
	// node) of the multigraph drawn, i.e. before self-loops and duplicate
	// edges are dropped. Presets are calibrated so that the stored,
	// deduplicated graph lands near their target edge count.
	AvgDegree float64
	// MaxDegree caps a node's expected degree (the power-law tail is cut
	// there). It must exceed AvgDegree and be at most NumNodes.
	MaxDegree float64
	// Exponent is gamma in P(w) ~ w^-gamma for the expected degrees w;
	// real graphs sit around 2.1-2.5. Range (1, 10].
	Exponent float64

	// NumClasses is the number of planted classes (labels), 1 .. 65536.
	NumClasses int
	// ClassSkew makes class k's share proportional to (k+1)^-ClassSkew;
	// 0 gives equal classes. Range [0, 2].
	ClassSkew float64
	// Homophily is the fraction of drawn edges whose endpoints share a
	// class, in [0, 1]; it must be 1 when NumClasses is 1.
	Homophily float64

	// FeatDim is the feature dimension, 0 (no features) .. 65536.
	FeatDim int
	// Noise is the expected norm of the Gaussian noise added to a node's
	// unit-norm class centroid (per-dimension standard deviation
	// Noise/sqrt(FeatDim)). Range [0, 1000].
	Noise float64

	// TrainFrac, ValFrac and TestFrac are the probabilities that a node
	// lands in each split (drawn per node, so the sizes are close to, not
	// exactly, these fractions). Each in [0, 1], sum at most 1; nodes left
	// over are in no split but still labeled.
	TrainFrac, ValFrac, TestFrac float64

	// MaxBytes refuses configurations whose estimated peak memory
	// (EstimateBytes) exceeds it; 0 means DefaultMaxBytes.
	MaxBytes int64
}

// DefaultMaxBytes is the memory bound used when Config.MaxBytes is 0: the
// full-size papers preset (about 82 GB) fits under it, a typo such as an
// extra zero in NumNodes does not.
const DefaultMaxBytes = 160 << 30

// Limits on Config fields, checked before allocation.
const (
	MaxNumNodes   = math.MaxInt32 // node IDs are int32
	MaxNumClasses = 1 << 16
	MaxFeatDim    = 1 << 16
)

// ConfigError reports an invalid Config field.
type ConfigError struct {
	Config string // Config.Name
	Field  string
	Msg    string
}

func (e *ConfigError) Error() string {
	name := e.Config
	if name == "" {
		name = "(unnamed)"
	}
	return fmt.Sprintf("gen: config %s: %s: %s", name, e.Field, e.Msg)
}

func (c *Config) errf(field, format string, args ...any) error {
	return &ConfigError{Config: c.Name, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Validate checks every field and the estimated memory; the error is a
// *ConfigError naming the first bad field.
func (c *Config) Validate() error {
	if c.NumNodes < 1 || c.NumNodes > MaxNumNodes {
		return c.errf("NumNodes", "%d out of range [1, %d]", c.NumNodes, int64(MaxNumNodes))
	}
	if !finite(c.AvgDegree) || c.AvgDegree <= 0 {
		return c.errf("AvgDegree", "%v must be a positive number", c.AvgDegree)
	}
	if !finite(c.MaxDegree) || c.MaxDegree <= c.AvgDegree || c.MaxDegree > float64(c.NumNodes) {
		return c.errf("MaxDegree", "%v must be in (AvgDegree=%v, NumNodes=%d]", c.MaxDegree, c.AvgDegree, c.NumNodes)
	}
	if !finite(c.Exponent) || c.Exponent <= 1 || c.Exponent > 10 {
		return c.errf("Exponent", "%v out of range (1, 10]", c.Exponent)
	}
	if c.NumClasses < 1 || c.NumClasses > MaxNumClasses || int64(c.NumClasses) > c.NumNodes {
		return c.errf("NumClasses", "%d out of range [1, min(%d, NumNodes=%d)]", c.NumClasses, MaxNumClasses, c.NumNodes)
	}
	if !finite(c.ClassSkew) || c.ClassSkew < 0 || c.ClassSkew > 2 {
		return c.errf("ClassSkew", "%v out of range [0, 2]", c.ClassSkew)
	}
	if !finite(c.Homophily) || c.Homophily < 0 || c.Homophily > 1 {
		return c.errf("Homophily", "%v out of range [0, 1]", c.Homophily)
	}
	if c.NumClasses == 1 && c.Homophily != 1 {
		return c.errf("Homophily", "%v but there is one class: cross-class edges are impossible, use 1", c.Homophily)
	}
	if c.FeatDim < 0 || c.FeatDim > MaxFeatDim {
		return c.errf("FeatDim", "%d out of range [0, %d]", c.FeatDim, MaxFeatDim)
	}
	if !finite(c.Noise) || c.Noise < 0 || c.Noise > 1000 {
		return c.errf("Noise", "%v out of range [0, 1000]", c.Noise)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"TrainFrac", c.TrainFrac}, {"ValFrac", c.ValFrac}, {"TestFrac", c.TestFrac}} {
		if !finite(f.v) || f.v < 0 || f.v > 1 {
			return c.errf(f.name, "%v out of range [0, 1]", f.v)
		}
	}
	if s := c.TrainFrac + c.ValFrac + c.TestFrac; s > 1+1e-9 {
		return c.errf("TestFrac", "train+val+test fractions sum to %v > 1", s)
	}
	if c.MaxBytes < 0 {
		return c.errf("MaxBytes", "%d is negative", c.MaxBytes)
	}
	limit := c.MaxBytes
	if limit == 0 {
		limit = DefaultMaxBytes
	}
	if est := c.EstimateBytes(); est > float64(limit) {
		return c.errf("NumNodes", "estimated peak memory %.1f GiB exceeds the limit %.1f GiB (raise MaxBytes if intended)",
			est/(1<<30), float64(limit)/(1<<30))
	}
	return nil
}

// EstimateBytes estimates Generate's peak memory in bytes. It is a float so
// that absurd configurations cannot overflow it.
func (c *Config) EstimateBytes() float64 {
	n := float64(c.NumNodes)
	stubs := n * c.AvgDegree / 2
	edges := 2 * stubs
	perNode := 8.0 + // indptr
		8 + // stub offsets / cursors
		4 + // expected degree
		4 + // label
		12 + // alias slot
		4 // splits
	return 4*edges + // indices
		4*stubs + // drawn targets, freed before features
		perNode*n +
		4*n*float64(c.FeatDim) +
		4*float64(c.NumClasses)*float64(c.FeatDim) // centroids
}

// Scaled returns c with NumNodes multiplied by f (rounded, at least 1) and
// the degree cap scaled by sqrt(f), as the largest degrees of a Chung-Lu
// graph grow with the square root of its edge count. The cap never drops
// below 2*AvgDegree or rises above the new node count. AvgDegree is kept,
// but smaller graphs lose a larger share of their drawn edges to duplicates
// (papers: 1% at full size, 2.4% at 0.1, 5.4% at 0.01), so the stored mean
// degree comes out a little lower when shrinking; the papers-m and papers-s
// presets are recalibrated for that.
func (c Config) Scaled(f float64) (Config, error) {
	if !finite(f) || f <= 0 || f > 1e6 {
		return c, c.errf("scale", "%v must be a positive number (at most 1e6)", f)
	}
	n := math.Round(float64(c.NumNodes) * f)
	if n > MaxNumNodes {
		return c, c.errf("scale", "%v gives %.0f nodes, more than %d", f, n, int64(MaxNumNodes))
	}
	c.NumNodes = max(1, int64(n))
	c.MaxDegree = min(max(c.MaxDegree*math.Sqrt(f), 2*c.AvgDegree), float64(c.NumNodes))
	if f != 1 {
		c.Name = fmt.Sprintf("%s@%g", c.Name, f)
	}
	return c, c.Validate()
}

// ogbn-products and ogbn-papers100M shapes.
const (
	productsNodes = 2_449_029
	papersNodes   = 111_059_956
)

var presets = map[string]Config{
	// Unit-test sizes: well under a second to generate.
	"tiny": {
		Name: "tiny", Seed: 1, NumNodes: 2_000, AvgDegree: 10, MaxDegree: 150, Exponent: 2.5,
		NumClasses: 5, ClassSkew: 0, Homophily: 0.75,
		FeatDim: 16, Noise: 3, TrainFrac: 0.3, ValFrac: 0.2, TestFrac: 0.5,
	},
	"small": {
		Name: "small", Seed: 1, NumNodes: 10_000, AvgDegree: 20, MaxDegree: 600, Exponent: 2.3,
		NumClasses: 10, ClassSkew: 0.5, Homophily: 0.75,
		FeatDim: 32, Noise: 3.5, TrainFrac: 0.2, ValFrac: 0.1, TestFrac: 0.7,
	},
	// ogbn-products: 2,449,029 nodes, 61,859,140 undirected edges stored
	// both ways (123,718,280), 100-d features, 47 classes, 8% / 1.6% /
	// rest split. AvgDegree is calibrated so the deduplicated count lands
	// near 123.7M (duplicates cost about 4%).
	"products": {
		Name: "products", Seed: 1, NumNodes: productsNodes, AvgDegree: 52.54, MaxDegree: 12_000, Exponent: 2.3,
		NumClasses: 47, ClassSkew: 1, Homophily: 0.8,
		FeatDim: 100, Noise: 4.5, TrainFrac: 0.08, ValFrac: 0.016, TestFrac: 0.904,
	},
	// products-hard: the products shape (same nodes, degrees, features,
	// classes and split) with labels that GNNs do not saturate: fewer
	// same-class edges and 2.7x the feature noise. One node's features
	// alone are near useless (nearest class centroid 5%, below the 23%
	// majority class), the mean over all neighbors gets 84% and over two
	// hops 100%, so a model gains from every hop and epoch; calibrated at
	// 2% scale (products-hard-s, BENCHMARKS.md). AvgDegree is lower than
	// products' because fewer duplicates are drawn: 123.71M stored edges.
	"products-hard": {
		Name: "products-hard", Seed: 1, NumNodes: productsNodes, AvgDegree: 52.19, MaxDegree: 12_000, Exponent: 2.3,
		NumClasses: 47, ClassSkew: 1, Homophily: 0.7,
		FeatDim: 100, Noise: 12, TrainFrac: 0.08, ValFrac: 0.016, TestFrac: 0.904,
	},
	// ogbn-papers100M: 111,059,956 nodes, ~1.6B undirected edges stored
	// both ways (~29 per node), 128-d features, 172 classes; about 1.4% of
	// the nodes are in a split (1.1% train, 0.1% val, 0.2% test). About
	// 82 GB in memory at full size: one large host. Duplicates cost 5.4%
	// of the drawn edges at 1% scale and 2.4% at 10%; AvgDegree assumes
	// 1.0% at full size (extrapolated, not measured).
	"papers": {
		Name: "papers", Seed: 1, NumNodes: papersNodes, AvgDegree: 29.41, MaxDegree: 40_000, Exponent: 2.3,
		NumClasses: 172, ClassSkew: 1, Homophily: 0.7,
		FeatDim: 128, Noise: 4.2, TrainFrac: 0.0109, ValFrac: 0.0011, TestFrac: 0.0019,
	},
}

// scaledPresets are presets derived from another by Config.Scaled, with
// AvgDegree recalibrated: smaller graphs lose more edges to duplicates.
var scaledPresets = map[string]struct {
	base      string
	scale     float64
	avgDegree float64
}{
	"papers-m": {"papers", 0.1, 29.81},  // 11.1M nodes, 333M stored edges, ~8 GB
	"papers-s": {"papers", 0.01, 30.76}, // 1.1M nodes, 32M stored edges, ~0.8 GB
	// 49K nodes, 2.47M stored edges (2% of products'), ~30 MB: a CPU check.
	"products-hard-s": {"products-hard", 0.02, 56.6},
}

// Presets lists the preset names, sorted.
func Presets() []string {
	names := make([]string, 0, len(presets)+len(scaledPresets))
	for n := range presets {
		names = append(names, n)
	}
	for n := range scaledPresets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Preset returns the named configuration (see Presets).
func Preset(name string) (Config, error) {
	if c, ok := presets[name]; ok {
		return c, nil
	}
	if s, ok := scaledPresets[name]; ok {
		c, err := presets[s.base].Scaled(s.scale)
		if err != nil {
			return c, err
		}
		c.Name, c.AvgDegree = name, s.avgDegree
		return c, c.Validate()
	}
	return Config{}, fmt.Errorf("gen: unknown preset %q (have %s)", name, strings.Join(Presets(), ", "))
}
