package csp

import (
	"fmt"
	"github.com/strata-gnn/strata/sample"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
)

// randomGraph draws an n-node in-adjacency with skewed degrees (some rows
// empty, a few long), repeated entries and weights that include zeros.
func randomGraph(t testing.TB, seed uint64, n int64, avg int) *graph.CSR {
	t.Helper()
	s := rng.NewStream(seed)
	g := &graph.CSR{NumRows: n, NumCols: n, Indptr: make([]int64, n+1)}
	for v := int64(0); v < n; v++ {
		var d uint64
		switch s.Below(8) {
		case 0:
			d = 0
		case 1:
			d = s.Below(uint64(10*avg + 1))
		default:
			d = s.Below(uint64(avg + 1))
		}
		for range d {
			g.Indices = append(g.Indices, graph.NodeID(s.Below(uint64(n))))
			g.Weights = append(g.Weights, float32(s.Below(5)))
		}
		g.Indptr[v+1] = int64(len(g.Indices))
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	return g
}

// randomBook splits n nodes into k contiguous parts of random sizes (some
// may be empty).
func randomBook(t testing.TB, seed uint64, n int64, k int) *book.Book {
	t.Helper()
	s := rng.NewStream(seed)
	cuts := make([]int64, k+1)
	cuts[k] = n
	for i := 1; i < k; i++ {
		cuts[i] = int64(s.Below(uint64(n + 1)))
	}
	// sort the inner cuts
	for i := 1; i < k; i++ {
		for j := i + 1; j < k; j++ {
			if cuts[j] < cuts[i] {
				cuts[i], cuts[j] = cuts[j], cuts[i]
			}
		}
	}
	b, err := book.New(cuts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// randomSeeds draws k distinct nodes of [0, n).
func randomSeeds(seed uint64, n int64, k int) []graph.NodeID {
	s := rng.NewStream(seed)
	seen := map[graph.NodeID]bool{}
	var out []graph.NodeID
	for len(out) < k && int64(len(out)) < n {
		v := graph.NodeID(s.Below(uint64(n)))
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// group runs fn on every rank of a fresh in-process group and returns
// the ranks' errors.
func group(t testing.TB, k int, timeout time.Duration, fn func(rank int, c comm.Comm) error) []error {
	t.Helper()
	cs, err := inproc.New(k, comm.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, k)
	var wg sync.WaitGroup
	for r := range k {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("rank %d panicked: %v", r, p)
				}
			}()
			errs[r] = fn(r, cs[r])
		})
	}
	wg.Wait()
	for _, c := range cs {
		c.Close()
	}
	return errs
}

func mustGroup(t *testing.T, k int, fn func(rank int, c comm.Comm) error) {
	t.Helper()
	for r, err := range group(t, k, 20*time.Second, fn) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func patches(t testing.TB, g *graph.CSR, b *book.Book, budget int64) []*layout.Patch {
	t.Helper()
	ps := make([]*layout.Patch, b.K())
	for r := range ps {
		p, err := layout.Build(g, b, r, layout.Options{DeviceBytes: budget})
		if err != nil {
			t.Fatal(err)
		}
		ps[r] = p
	}
	return ps
}

// sameBatch compares two MiniBatches element by element (nil and empty
// slices are equal: the sample package's relabeler returns either for an
// empty block, depending on whether its scratch was used before).
func sameBatch(a, b *sample.MiniBatch) bool {
	if a == nil || b == nil || !slices.Equal(a.Seeds, b.Seeds) || len(a.Blocks) != len(b.Blocks) {
		return a == b
	}
	for i := range a.Blocks {
		x, y := &a.Blocks[i], &b.Blocks[i]
		if x.NumDst != y.NumDst || !slices.Equal(x.SrcNodes, y.SrcNodes) || !slices.Equal(x.Indptr, y.Indptr) ||
			!slices.Equal(x.Indices, y.Indices) || !slices.Equal(x.EdgeIDs, y.EdgeIDs) {
			return false
		}
	}
	return true
}
