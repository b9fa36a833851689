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
	"github.com/strata-gnn/strata/graph/graphtest"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
)

// randomGraph draws an n-node in-adjacency with skewed degrees (some rows
// empty, a few long), repeated entries and weights that include zeros.
func randomGraph(t testing.TB, seed uint64, n int64, avg int) *graph.CSR {
	t.Helper()
	g := graphtest.Skewed(seed, n, avg, 10)
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
	return graphtest.DistinctNodes(seed, n, k)
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
