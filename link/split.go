package link

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// Tags separating the random streams derived from the run's seed (those
// of the encoder's weights, dropout and neighbor sampling are package
// train's, so an encoder starts from the weights a node classifier with
// the same seed would).
const (
	tagSplit uint64 = 0x4c494e4b00 + iota // "LINK"
	tagEvalNeg
	tagOrder
	tagNegative
	tagDecoder
	tagEval
)

// Fractions are the shares of the links that train, validate and test:
// each in [0, 1), validation and test above 0, summing to 1.
type Fractions struct {
	Train float64 `json:"train"`
	Val   float64 `json:"val"`
	Test  float64 `json:"test"`
}

// DefaultFractions is GAE's and PyG's link-prediction split (85/5/10).
var DefaultFractions = Fractions{0.85, 0.05, 0.10}

// Validate returns a *ConfigError when f is not a split of all links.
func (f Fractions) Validate() error {
	for _, v := range []float64{f.Train, f.Val, f.Test} {
		if !(v >= 0 && v < 1) {
			return cfgErr("split_edges", "%v: each fraction must be in [0, 1)", f)
		}
	}
	if f.Train == 0 || f.Val == 0 || f.Test == 0 {
		return cfgErr("split_edges", "%v: train, validation and test each need a positive fraction", f)
	}
	if s := f.Train + f.Val + f.Test; math.Abs(s-1) > 1e-6 {
		return cfgErr("split_edges", "%v sum to %v, want 1", f, s)
	}
	return nil
}

func (f Fractions) String() string { return fmt.Sprintf("%g,%g,%g", f.Train, f.Val, f.Test) }

// ParseFractions reads "train,val,test" ("0.85,0.05,0.10") and
// validates it.
func ParseFractions(s string) (Fractions, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return Fractions{}, cfgErr("split_edges", "%q: want three fractions train,val,test (e.g. 0.85,0.05,0.10)", s)
	}
	var v [3]float64
	for i, p := range parts {
		x, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return Fractions{}, cfgErr("split_edges", "%q: fraction %d (%q) is not a number", s, i+1, p)
		}
		v[i] = x
	}
	f := Fractions{v[0], v[1], v[2]}
	return f, f.Validate()
}

// Edges are node pairs (Src[i], Dst[i]).
type Edges struct {
	Src, Dst []int32
}

// Len is the number of pairs.
func (e Edges) Len() int { return len(e.Src) }

func (e *Edges) add(u, v int32) {
	e.Src, e.Dst = append(e.Src, u), append(e.Dst, v)
}

// Split is a random edge split of a graph for link prediction, as PyG's
// RandomLinkSplit makes it.
//
// The links are the graph's edges, each once: for a symmetric graph
// (every edge u->v has v->u: an undirected graph stored both ways) a link
// is the pair u < v and holding it out removes both directions; for a
// directed graph every edge u->v is a link. Self-loops are no links:
// they stay in the message-passing graph and are never held out.
// Duplicate entries count once. Edge weights are not carried.
//
// The links are shuffled with the seed and the first floor(Val x L) go
// to validation, the next floor(Test x L) to test, the rest to training
// (PyG's rounding). The message-passing graph, which every evaluation
// and training step aggregates over, holds the training links (both
// directions when undirected) and the self-loops: no held-out edge leaks
// into it.
//
// ValNeg and TestNeg are fixed negatives, as many as the split's
// positives (PyG's neg_sampling_ratio 1): uniform random pairs u != v
// that are no edge of the whole graph, drawn once from the seed, so
// every epoch and every run with the seed is scored on the same pairs.
type Split struct {
	// Source says where the links' cut comes from: SourceRandom
	// (NewSplit) or SourceStored (FromEdgeSplit).
	Source     string
	NumNodes   int64
	Undirected bool
	Train      Edges
	Val        Edges
	Test       Edges
	ValNeg     Edges
	TestNeg    Edges
	// Out is the message-passing graph's out-adjacency (rows sorted):
	// the known edges negatives may exclude. In is its in-adjacency,
	// what the encoder aggregates (Out itself when undirected).
	Out, In   *graph.CSR
	SelfLoops int
}

// Split sources (Split.Source, Stats.Source).
const (
	SourceRandom = "random"
	SourceStored = "edge_split"
)

// SplitError reports a graph that cannot be split.
type SplitError struct{ Msg string }

func (e *SplitError) Error() string { return "link: split: " + e.Msg }

// maxNegTrials bounds the draws of one evaluation negative: a graph so
// dense that this many uniform pairs are all edges has no room for
// negatives.
const maxNegTrials = 1000

// NewSplit splits the links of g, an out-adjacency (a dataset's Graph),
// by f with seed. g is not modified.
func NewSplit(g *graph.CSR, f Fractions, seed uint64) (*Split, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if g == nil {
		return nil, &SplitError{Msg: "no graph"}
	}
	if err := g.Validate(); err != nil {
		return nil, &SplitError{Msg: err.Error()}
	}
	n := g.NumRows
	if g.NumCols != n || n < 2 || n > math.MaxInt32 {
		return nil, &SplitError{Msg: fmt.Sprintf("graph is %d x %d: want square with 2 to 2^31-1 nodes", n, g.NumCols)}
	}
	if sorted, _ := graph.RowsSorted(g); !sorted {
		g = graph.Clone(g)
		if err := graph.SortRows(g); err != nil {
			return nil, &SplitError{Msg: err.Error()}
		}
	}
	s := &Split{NumNodes: n, Undirected: symmetric(g)}
	links, loops := collectLinks(g, s.Undirected)
	s.SelfLoops = len(loops)
	l := len(links)
	nVal, nTest := int(f.Val*float64(l)), int(f.Test*float64(l))
	if nVal < 1 || nTest < 1 || l-nVal-nTest < 1 {
		return nil, &SplitError{Msg: fmt.Sprintf("%d links split %v leave %d validation, %d test and %d training links: each needs at least one",
			l, f, nVal, nTest, l-nVal-nTest)}
	}
	shuffle(links, rng.Derive(seed, tagSplit))
	s.Val, s.Test, s.Train = unpack(links[:nVal]), unpack(links[nVal:nVal+nTest]), unpack(links[nVal+nTest:])
	if err := s.finish(g, loops, Edges{}, seed); err != nil {
		return nil, err
	}
	return s, nil
}

// finish builds the message-passing graph of s's training links, the
// loops and the links of no part (extra), and draws the evaluation
// negatives (g: the whole graph, rows sorted).
func (s *Split) finish(g *graph.CSR, loops []int32, extra Edges, seed uint64) error {
	n := s.NumNodes
	src := slices.Concat(s.Train.Src, extra.Src, loops)
	dst := slices.Concat(s.Train.Dst, extra.Dst, loops)
	if s.Undirected {
		src, dst = slices.Concat(src, s.Train.Dst, extra.Dst), slices.Concat(dst, s.Train.Src, extra.Src)
	}
	var err error
	if s.Out, err = graph.FromEdges(n, src, dst); err != nil {
		return &SplitError{Msg: err.Error()}
	}
	s.In = s.Out
	if !s.Undirected {
		if s.In, err = graph.Transpose(s.Out); err != nil {
			return &SplitError{Msg: err.Error()}
		}
	}
	if s.ValNeg, err = evalNegatives(g, s.Val.Len(), rng.Derive(seed, tagEvalNeg, 0)); err != nil {
		return err
	}
	if s.TestNeg, err = evalNegatives(g, s.Test.Len(), rng.Derive(seed, tagEvalNeg, 1)); err != nil {
		return err
	}
	return nil
}

// symmetric reports whether every entry u->v of g (rows sorted) has
// v->u. Only the entries above the diagonal are looked up: if each
// distinct u->v with u < v has v->u, mirroring maps them one to one into
// those below it, so it is onto (every entry below has its mirror too)
// exactly when both counts are equal. The rows are read in parallel (a
// pure predicate: the answer does not depend on the goroutines).
func symmetric(g *graph.CSR) bool {
	var bad atomic.Bool
	var above, below atomic.Int64
	forRows(g, func(lo, hi int32) {
		var up, down int64
		for u := lo; u < hi && !bad.Load(); u++ {
			row := g.Neighbors(u)
			for i, v := range row {
				switch {
				case i > 0 && v == row[i-1]: // a duplicate entry
				case v < u:
					down++
				case v > u:
					up++
					if !hasEdge(g, v, u) {
						bad.Store(true)
						return
					}
				}
			}
		}
		above.Add(up)
		below.Add(down)
	})
	return !bad.Load() && above.Load() == below.Load()
}

// hasEdge reports whether sorted-row g has u->v.
func hasEdge(g *graph.CSR, u, v int32) bool {
	_, ok := slices.BinarySearch(g.Neighbors(u), v)
	return ok
}

// evalNegatives draws count uniform pairs u != v that are no edge of g
// (rows sorted) from the stream of key, in order: trial c is the pair of
// draws 2c and 2c+1, and a negative that finds no pair in maxNegTrials
// trials fails. Whether a trial is a non-edge is decided in parallel, a
// round of trials at a time, and the trials are then taken in order, so
// the pairs are those of one pass over the stream.
func evalNegatives(g *graph.CSR, count int, key uint64) (Edges, error) {
	n := uint64(g.NumRows)
	out := Edges{Src: make([]int32, 0, count), Dst: make([]int32, 0, count)}
	trial := func(c uint64) (int32, int32) {
		return int32(rng.Below(rng.Hash(key, 2*c), n)), int32(rng.Below(rng.Hash(key, 2*c+1), n))
	}
	var ok []bool
	next, tries := uint64(0), 0
	for out.Len() < count {
		// A round: twice the trials left (most pairs of a sparse graph
		// are non-edges), at least negRound.
		round := max(2*(count-out.Len()), negRound)
		ok = slices.Grow(ok[:0], round)[:round]
		forRange(round, negRound, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				u, v := trial(next + uint64(i))
				ok[i] = u != v && !hasEdge(g, u, v)
			}
		})
		for i := 0; i < round && out.Len() < count; i++ {
			if ok[i] {
				out.add(trial(next + uint64(i)))
				tries = 0
				continue
			}
			if tries++; tries == maxNegTrials {
				return Edges{}, &SplitError{Msg: fmt.Sprintf("negative %d: %d random pairs were all edges or self-pairs: the graph is too dense for negatives", out.Len(), maxNegTrials)}
			}
		}
		next += uint64(round)
	}
	return out, nil
}

// Stats are a split's sizes, for the report.
type Stats struct {
	Source       string `json:"source,omitempty"` // random | edge_split (the dataset's stored split)
	Undirected   bool   `json:"undirected"`
	Train        int    `json:"train_links"`
	Val          int    `json:"val_links"`
	Test         int    `json:"test_links"`
	ValNeg       int    `json:"val_negatives"`
	TestNeg      int    `json:"test_negatives"`
	MessageEdges int64  `json:"message_passing_edges"`
	SelfLoops    int    `json:"self_loops"`
}

// Stats summarizes s.
func (s *Split) Stats() Stats {
	return Stats{Source: s.Source, Undirected: s.Undirected, Train: s.Train.Len(), Val: s.Val.Len(), Test: s.Test.Len(),
		ValNeg: s.ValNeg.Len(), TestNeg: s.TestNeg.Len(), MessageEdges: s.Out.NumEdges(), SelfLoops: s.SelfLoops}
}

// FromEdgeSplit makes the Split of a stored edge split (es: a dataset's
// edge_split/, written by 'strata split' or 'strata import
// --edge-split' and read by split.ReadEdges, which checked it against
// g): its train, validation and test links replace NewSplit's random
// cut, and the rest is NewSplit's protocol. An undirected split lists
// each link once (src < dst): the message-passing graph gets both
// directions of the training links, and the graph's self-loops. The
// evaluation negatives are drawn from seed as NewSplit draws them. Links
// in no part (a split whose fractions add up to less than 1) stay in
// message passing and are never trained on (docs/dataset-format.md).
func FromEdgeSplit(g *graph.CSR, es *split.EdgeSplit, seed uint64) (*Split, error) {
	if g == nil || es == nil {
		return nil, &SplitError{Msg: "no graph or no edge split"}
	}
	if err := g.Validate(); err != nil {
		return nil, &SplitError{Msg: err.Error()}
	}
	n := g.NumRows
	if g.NumCols != n || n < 2 || n > math.MaxInt32 {
		return nil, &SplitError{Msg: fmt.Sprintf("graph is %d x %d: want square with 2 to 2^31-1 nodes", n, g.NumCols)}
	}
	if es.NumNodes != n {
		return nil, &SplitError{Msg: fmt.Sprintf("edge split made for %d nodes, the graph has %d", es.NumNodes, n)}
	}
	if sorted, _ := graph.RowsSorted(g); !sorted {
		g = graph.Clone(g)
		if err := graph.SortRows(g); err != nil {
			return nil, &SplitError{Msg: err.Error()}
		}
	}
	names := [3]string{"train", "validation", "test"}
	var parts [3]Edges
	for i := range parts {
		src, dst := es.Src[i], es.Dst[i]
		if len(src) != len(dst) {
			return nil, &SplitError{Msg: fmt.Sprintf("%s part: %d sources, %d destinations", names[i], len(src), len(dst))}
		}
		if len(src) == 0 {
			return nil, &SplitError{Msg: fmt.Sprintf("the edge split has no %s link: each part needs at least one", names[i])}
		}
		for j := range src {
			if src[j] < 0 || int64(src[j]) >= n || dst[j] < 0 || int64(dst[j]) >= n {
				return nil, &SplitError{Msg: fmt.Sprintf("%s link %d (%d -> %d) is outside the graph's %d nodes", names[i], j, src[j], dst[j], n)}
			}
		}
		parts[i] = Edges{Src: slices.Clone(src), Dst: slices.Clone(dst)}
	}
	s := &Split{NumNodes: n, Undirected: !es.Directed, Train: parts[0], Val: parts[1], Test: parts[2]}
	key := func(u, v int32) uint64 {
		if s.Undirected && u > v {
			u, v = v, u
		}
		return uint64(uint32(u))<<32 | uint64(uint32(v))
	}
	listed := make(map[uint64]struct{}, parts[0].Len()+parts[1].Len()+parts[2].Len())
	for _, p := range parts {
		for j := range p.Src {
			listed[key(p.Src[j], p.Dst[j])] = struct{}{}
		}
	}
	var loops []int32
	var extra Edges
	for u := int32(0); int64(u) < n; u++ {
		row := g.Neighbors(u)
		for i, v := range row {
			switch {
			case i > 0 && v == row[i-1]: // a duplicate entry
			case v == u:
				loops = append(loops, u)
			case s.Undirected && v < u: // counted from v's row
			default:
				if _, ok := listed[key(u, v)]; !ok {
					extra.add(u, v)
				}
			}
		}
	}
	s.SelfLoops = len(loops)
	if err := s.finish(g, loops, extra, seed); err != nil {
		return nil, err
	}
	return s, nil
}
