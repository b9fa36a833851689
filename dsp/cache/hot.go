package cache

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/strata-gnn/strata/graph"
)

// ErrInput is wrapped by every error about bad arguments.
var ErrInput = errors.New("cache: invalid input")

func inputErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInput, fmt.Sprintf(format, args...))
}

// Hotness names a ranking of nodes.
type Hotness string

const (
	ByInDegree        Hotness = "in-degree"
	ByPageRank        Hotness = "pagerank"
	ByReversePageRank Hotness = "reverse-pagerank"
	ByPreSampling     Hotness = "presample"
	DefaultHotness            = ByInDegree
)

const (
	defaultDamping      = 0.85
	defaultPRIterations = 20
)

// ParseHotness checks a hotness name.
func ParseHotness(s string) (Hotness, error) {
	switch h := Hotness(s); h {
	case ByInDegree, ByPageRank, ByReversePageRank, ByPreSampling:
		return h, nil
	case "":
		return DefaultHotness, nil
	}
	return "", inputErr("unknown hotness %q (want in-degree, pagerank, reverse-pagerank or presample)", s)
}

// InDegree orders nodes by decreasing in-degree: the length of their row
// in the in-adjacency in. Ties go to the lower ID.
func InDegree(in *graph.CSR) ([]graph.NodeID, error) {
	if err := checkGraph(in); err != nil {
		return nil, err
	}
	score := make([]float64, in.NumRows)
	for v := range score {
		score[v] = float64(in.Indptr[v+1] - in.Indptr[v])
	}
	return order(score), nil
}

// ByCounts orders nodes by decreasing count (e.g. how often pre-sampling
// drew each node as an input node); ties go to the lower ID.
func ByCounts(counts []int64) []graph.NodeID {
	score := make([]float64, len(counts))
	for v, c := range counts {
		score[v] = float64(c)
	}
	return order(score)
}

// PageRank orders nodes by decreasing PageRank over the graph whose
// in-adjacency is in (row v lists the sources of v's incoming edges), with
// damping 0.85 and 20 power iterations; the rank of nodes without
// out-edges is spread uniformly. Deterministic for any GOMAXPROCS.
func PageRank(in *graph.CSR) ([]graph.NodeID, error) {
	s, err := pageRank(in)
	if err != nil {
		return nil, err
	}
	return order(s), nil
}

// ReversePageRank is PageRank on the reversed graph: nodes that reach many
// important nodes rank high.
func ReversePageRank(in *graph.CSR) ([]graph.NodeID, error) {
	if err := checkGraph(in); err != nil {
		return nil, err
	}
	out, err := graph.Transpose(in)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	return PageRank(out)
}

func checkGraph(in *graph.CSR) error {
	if in == nil {
		return inputErr("nil graph")
	}
	if err := in.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInput, err)
	}
	if in.NumRows != in.NumCols {
		return inputErr("graph is %d x %d, not square", in.NumRows, in.NumCols)
	}
	return nil
}

func pageRank(in *graph.CSR) ([]float64, error) {
	if err := checkGraph(in); err != nil {
		return nil, err
	}
	n := int(in.NumRows)
	if n == 0 {
		return nil, nil
	}
	outDeg := make([]int64, n)
	for _, u := range in.Indices {
		outDeg[u]++
	}
	pr := make([]float64, n)
	next := make([]float64, n)
	contrib := make([]float64, n)
	for v := range pr {
		pr[v] = 1 / float64(n)
	}
	for range defaultPRIterations {
		var dangling float64
		for u, d := range outDeg {
			if d == 0 {
				dangling += pr[u]
				contrib[u] = 0
			} else {
				contrib[u] = pr[u] / float64(d)
			}
		}
		base := (1-defaultDamping)/float64(n) + defaultDamping*dangling/float64(n)
		parallelRows(n, func(lo, hi int) {
			for v := lo; v < hi; v++ {
				var s float64
				for _, u := range in.Indices[in.Indptr[v]:in.Indptr[v+1]] {
					s += contrib[u]
				}
				next[v] = base + defaultDamping*s
			}
		})
		pr, next = next, pr
	}
	for _, x := range pr {
		if math.IsNaN(x) {
			return nil, inputErr("PageRank diverged")
		}
	}
	return pr, nil
}

// parallelRows splits [0, n) into contiguous chunks, one per goroutine;
// each row is computed by one goroutine, so results do not depend on the
// split.
func parallelRows(n int, fn func(lo, hi int)) {
	w := min(runtime.GOMAXPROCS(0), max(1, n/4096))
	if w <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for i := range w {
		lo, hi := i*n/w, (i+1)*n/w
		wg.Go(func() { fn(lo, hi) })
	}
	wg.Wait()
}

// order sorts node IDs by decreasing score, ties by ID.
func order(score []float64) []graph.NodeID {
	ids := make([]graph.NodeID, len(score))
	for i := range ids {
		ids[i] = graph.NodeID(i)
	}
	slices.SortStableFunc(ids, func(a, b graph.NodeID) int {
		switch sa, sb := score[a], score[b]; {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	return ids
}
