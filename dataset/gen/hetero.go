package gen

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/rng"
)

// HeteroPresetName is the preset of GenerateHetero (strata gen --preset
// hetero).
const HeteroPresetName = "hetero"

// HeteroConfig describes a synthetic typed dataset in which the edge
// types carry the labels: 3 node types (paper, the labeled target;
// author; field) and 4 relations (author writes paper, paper rev_writes
// author, field rev_has_topic paper, paper has_topic field).
//
// # Planted classes
//
// There are 2*Pairs classes and as many centroids (random unit vectors).
// Every author and every field belongs to a group g (uniform) and has
// features centroid g plus Gaussian noise (norm Noise). A paper of class
// c is written by authors of group c and has topics of group c^1 (c with
// its lowest bit flipped): each of its edges picks a node of the planted
// group with probability 1-Mix, a node of any group otherwise. Papers'
// own features are pure noise, and authors and fields are built alike (as
// many of each, the same number of edges per paper, the same feature
// distribution), so a model that does not know the types sees, around a
// paper of class 2p or 2p+1, the same mixture of centroids 2p and 2p+1 and
// cannot tell the two classes apart (about 0.5 accuracy at best), while
// one that aggregates each relation on its own reads which of the two
// centroids came through "writes": the types are what separates them.
type HeteroConfig struct {
	Name string
	Seed uint64
	// Papers is the number of target nodes; Authors and Fields each get
	// half as many (at least one).
	Papers int64
	// Pairs is the number of class pairs: 2*Pairs classes, 1..32768.
	Pairs int
	// PaperDim and OtherDim are the feature widths of papers and of
	// authors and fields, 1..65536.
	PaperDim, OtherDim int
	// Degree is the mean number of authors (and of fields) per paper,
	// 1..1024: each paper draws uniformly in [1, 2*Degree-1].
	Degree int
	// Noise is the norm of the Gaussian noise around an author's or
	// field's centroid (and of a paper's features), in [0, 100].
	Noise float64
	// Mix is the probability that an edge ignores the planted group, [0, 1].
	Mix float64
	// TrainFrac, ValFrac, TestFrac: probabilities that a paper is in each
	// split (each in [0, 1], sum at most 1).
	TrainFrac, ValFrac, TestFrac float64
}

// HeteroPreset returns the hetero preset: 4,000 papers, 2,000 authors and
// 2,000 fields, 6 classes (3 pairs), 16 paper and 32 author/field
// features, 3 authors and 3 fields per paper on average, noise 1, mix 0.2.
// About 48,000 stored edges; generated in milliseconds.
func HeteroPreset() HeteroConfig {
	return HeteroConfig{
		Name: HeteroPresetName, Seed: 1, Papers: 4_000, Pairs: 3, PaperDim: 16, OtherDim: 32,
		Degree: 3, Noise: 1, Mix: 0.2, TrainFrac: 0.3, ValFrac: 0.2, TestFrac: 0.5,
	}
}

// Validate checks every field and the size; the error is a *ConfigError
// naming the first bad field.
func (c *HeteroConfig) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Config: c.Name, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	// Papers + 2 * Papers/2 nodes, 4 * Degree * Papers edges: keep both
	// (and the edge arrays) far from int32 IDs and the machine.
	const maxPapers = 1 << 28
	switch {
	case c.Papers < 2 || c.Papers > maxPapers:
		return bad("Papers", "%d out of range [2, %d]", c.Papers, maxPapers)
	case c.Pairs < 1 || c.Pairs > MaxNumClasses/2:
		return bad("Pairs", "%d out of range [1, %d]", c.Pairs, MaxNumClasses/2)
	case c.PaperDim < 1 || c.PaperDim > MaxFeatDim:
		return bad("PaperDim", "%d out of range [1, %d]", c.PaperDim, MaxFeatDim)
	case c.OtherDim < 1 || c.OtherDim > MaxFeatDim:
		return bad("OtherDim", "%d out of range [1, %d]", c.OtherDim, MaxFeatDim)
	case c.Degree < 1 || c.Degree > 1024:
		return bad("Degree", "%d out of range [1, 1024]", c.Degree)
	case int64(c.Degree)*c.Papers > 1<<29:
		return bad("Degree", "%d authors per paper for %d papers: over 2^29 edges per relation", c.Degree, c.Papers)
	case !finite(c.Noise) || c.Noise < 0 || c.Noise > 100:
		return bad("Noise", "%v out of range [0, 100]", c.Noise)
	case !finite(c.Mix) || c.Mix < 0 || c.Mix > 1:
		return bad("Mix", "%v out of range [0, 1]", c.Mix)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"TrainFrac", c.TrainFrac}, {"ValFrac", c.ValFrac}, {"TestFrac", c.TestFrac}} {
		if !finite(f.v) || f.v < 0 || f.v > 1 {
			return bad(f.name, "%v out of range [0, 1]", f.v)
		}
	}
	if s := c.TrainFrac + c.ValFrac + c.TestFrac; s > 1+1e-9 {
		return bad("TestFrac", "train+val+test = %v exceeds 1", s)
	}
	features := float64(c.Papers)*float64(c.PaperDim) + float64(c.Papers)*float64(c.OtherDim)
	if features*4 > float64(DefaultMaxBytes) {
		return bad("OtherDim", "features of about %.0f GB exceed %d GB", features*4/1e9, DefaultMaxBytes>>30)
	}
	return nil
}

// Tags of the typed generator's random streams (apart from the
// homogeneous generator's).
const (
	tagHCentroid uint64 = 101 + iota
	tagHGroup
	tagHClass
	tagHFeature
	tagHDegree
	tagHEdge
	tagHSplit
)

// GenerateHetero builds the typed dataset cfg describes. The result is a
// pure function of cfg.
func GenerateHetero(cfg HeteroConfig) (*dataset.Hetero, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	np := cfg.Papers
	no := max(1, np/2) // authors, and fields
	classes := 2 * cfg.Pairs
	cent := unitVectors(rng.Derive(cfg.Seed, tagHCentroid), classes, cfg.OtherDim)

	// Groups of authors and fields, and the nodes of each group.
	groups := func(kind uint64) (group []int32, members [][]int32) {
		group = make([]int32, no)
		members = make([][]int32, classes)
		s := rng.Derive(cfg.Seed, tagHGroup, kind)
		for i := range group {
			g := int32(rng.Below(rng.Hash(s, uint64(i)), uint64(classes)))
			group[i] = g
			members[g] = append(members[g], int32(i))
		}
		return group, members
	}
	aGroup, aMembers := groups(0)
	fGroup, fMembers := groups(1)

	label := make([]int32, np)
	cs := rng.Derive(cfg.Seed, tagHClass)
	for i := range label {
		label[i] = int32(rng.Below(rng.Hash(cs, uint64(i)), uint64(classes)))
	}

	// Edges: author -> paper ("writes") and paper -> field ("has_topic").
	edges := func(kind uint64, members [][]int32, groupOf func(c int32) int32) (papers, others []int32) {
		ds := rng.Derive(cfg.Seed, tagHDegree, kind)
		es := rng.Derive(cfg.Seed, tagHEdge, kind)
		for p := int64(0); p < np; p++ {
			k := 1 + int64(rng.Below(rng.Hash(ds, uint64(p)), uint64(2*cfg.Degree-1)))
			st := rng.NewStream(rng.Derive(es, uint64(p)))
			for range k {
				var o int32
				if g := members[groupOf(label[p])]; len(g) > 0 && float64(st.Uniform01()) >= cfg.Mix {
					o = g[st.Below(uint64(len(g)))]
				} else {
					o = int32(st.Below(uint64(no)))
				}
				papers = append(papers, int32(p))
				others = append(others, o)
			}
		}
		return papers, others
	}
	wp, wa := edges(0, aMembers, func(c int32) int32 { return c })
	tp, tf := edges(1, fMembers, func(c int32) int32 { return c ^ 1 })

	h := &dataset.Hetero{
		Name: cfg.Name,
		NodeTypes: []dataset.NodeType{
			{Name: "paper", NumNodes: np, FeatDim: cfg.PaperDim, Features: noiseRows(rng.Derive(cfg.Seed, tagHFeature, 0), np, cfg.PaperDim, cfg.Noise, nil, nil)},
			{Name: "author", NumNodes: no, FeatDim: cfg.OtherDim, Features: noiseRows(rng.Derive(cfg.Seed, tagHFeature, 1), no, cfg.OtherDim, cfg.Noise, cent, aGroup)},
			{Name: "field", NumNodes: no, FeatDim: cfg.OtherDim, Features: noiseRows(rng.Derive(cfg.Seed, tagHFeature, 2), no, cfg.OtherDim, cfg.Noise, cent, fGroup)},
		},
		Target: 0, NumClasses: classes, Labels: label,
	}
	const paper, author, field = 0, 1, 2
	for _, r := range []struct {
		src, dst int
		rel      string
		s, d     []int32
	}{
		{author, paper, "writes", wa, wp},
		{paper, author, "rev_writes", wp, wa},
		{paper, field, "has_topic", tp, tf},
		{field, paper, "rev_has_topic", tf, tp},
	} {
		in, err := dataset.RelationFromEdges(h.NodeTypes[r.src].NumNodes, h.NodeTypes[r.dst].NumNodes, r.s, r.d, nil)
		if err != nil {
			return nil, err
		}
		h.EdgeTypes = append(h.EdgeTypes, dataset.EdgeType{Src: r.src, Dst: r.dst, Rel: r.rel, In: in})
	}
	h.Train, h.Val, h.Test = []int32{}, []int32{}, []int32{}
	ss := rng.Derive(cfg.Seed, tagHSplit)
	for p := int64(0); p < np; p++ {
		u := float64(rng.Uniform01(ss, uint64(p)))
		switch {
		case u < cfg.TrainFrac:
			h.Train = append(h.Train, int32(p))
		case u < cfg.TrainFrac+cfg.ValFrac:
			h.Val = append(h.Val, int32(p))
		case u < cfg.TrainFrac+cfg.ValFrac+cfg.TestFrac:
			h.Test = append(h.Test, int32(p))
		}
	}
	if err := dataset.ValidateHetero(h); err != nil {
		return nil, fmt.Errorf("gen: generated an invalid typed dataset: %w", err)
	}
	return h, nil
}

// unitVectors returns k random unit vectors of d entries, row-major.
func unitVectors(seed uint64, k, d int) []float32 {
	out := make([]float32, k*d)
	buf := make([]float64, d+1)
	for c := range k {
		ck := rng.Derive(seed, uint64(c))
		for j := 0; j < d; j += 2 {
			buf[j], buf[j+1] = gaussPair(rng.Hash(ck, uint64(j/2)))
		}
		var norm float64
		for _, x := range buf[:d] {
			norm += x * x
		}
		norm = math.Sqrt(norm)
		if norm == 0 {
			norm = 1
		}
		for j := range d {
			out[c*d+j] = float32(buf[j] / norm)
		}
	}
	return out
}

// noiseRows returns n rows of d values: Gaussian noise of expected norm
// noise, plus the centroid of the row's group when cent is not nil.
func noiseRows(seed uint64, n int64, d int, noise float64, cent []float32, group []int32) []float32 {
	x := make([]float32, n*int64(d))
	sigma := noise / math.Sqrt(float64(d))
	for i := int64(0); i < n; i++ {
		row := x[i*int64(d) : (i+1)*int64(d)]
		k := rng.Derive(seed, uint64(i))
		for j := 0; j < d; j += 2 {
			a, b := gaussPair(rng.Hash(k, uint64(j/2)))
			row[j] = float32(sigma * a)
			if j+1 < d {
				row[j+1] = float32(sigma * b)
			}
		}
		if cent != nil {
			c := cent[int(group[i])*d : int(group[i]+1)*d]
			for j := range row {
				row[j] += c[j]
			}
		}
	}
	return x
}
