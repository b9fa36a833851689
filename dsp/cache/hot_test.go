package cache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
)

// The counting sort gives the comparison sort's order (decreasing count,
// ties by ID) for any number of CPUs, and falls back to it for counts it
// cannot bucket.
func TestOrderCountsMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n = 300_000 // several chunks of 2^16
	power := make([]int64, n)
	for v := range power {
		// Power-law-ish: many ties at small counts, a few large ones.
		power[v] = int64(1 / (r.Float64() + 1e-4))
	}
	for name, counts := range map[string][]int64{
		"power law":    power,
		"all equal":    make([]int64, n),
		"over n":       append(slices.Clone(power[:1000]), n+5),
		"negative":     append(slices.Clone(power[:1000]), -1),
		"one node":     {7},
		"no nodes":     {},
		"ascending ID": {0, 1, 2, 3, 4, 5},
	} {
		want := orderScores(counts)
		for _, procs := range []int{1, 3, 8} {
			old := runtime.GOMAXPROCS(procs)
			got := orderCounts(counts)
			runtime.GOMAXPROCS(old)
			if !slices.Equal(got, want) {
				t.Errorf("%s, GOMAXPROCS %d: counting sort differs from the comparison sort", name, procs)
			}
		}
	}
}

func TestInDegreeChecksRows(t *testing.T) {
	good := &graph.CSR{NumRows: 3, NumCols: 3, Indptr: []int64{0, 1, 3, 3}, Indices: []int32{2, 0, 1}}
	got, err := InDegree(good)
	if err != nil || !slices.Equal(got, []graph.NodeID{1, 0, 2}) {
		t.Fatalf("InDegree = %v, %v; want [1 0 2]", got, err)
	}
	for name, g := range map[string]*graph.CSR{
		"nil":          nil,
		"not square":   {NumRows: 3, NumCols: 4, Indptr: []int64{0, 1, 3, 3}, Indices: []int32{2, 0, 1}},
		"short indptr": {NumRows: 3, NumCols: 3, Indptr: []int64{0, 1, 3}, Indices: []int32{2, 0, 1}},
		"wrong end":    {NumRows: 3, NumCols: 3, Indptr: []int64{0, 1, 3, 4}, Indices: []int32{2, 0, 1}},
		"decreasing":   {NumRows: 3, NumCols: 3, Indptr: []int64{0, 2, 1, 3}, Indices: []int32{2, 0, 1}},
	} {
		if _, err := InDegree(g); !errors.Is(err, ErrInput) {
			t.Errorf("%s: error %v, want ErrInput", name, err)
		}
	}
}

// refPlan is NewPlan's assignment done in one pass in hot order, the
// way it was written before it ran in parallel chunks.
func refPlan(b *book.Book, hot []graph.NodeID, capacity int64, pol Policy, g int) (member, slot []int32, rows [][]graph.NodeID) {
	n := b.NumNodes()
	member, slot = make([]int32, n), make([]int32, n)
	for v := range member {
		member[v] = -1
	}
	rows = make([][]graph.NodeID, g)
	if pol == Partition {
		for _, v := range hot {
			o := b.Owner(int64(v))
			if int64(len(rows[o])) < capacity {
				member[v], slot[v] = int32(o), int32(len(rows[o]))
				rows[o] = append(rows[o], v)
			}
		}
		return
	}
	top := min(int64(len(hot)), capacity*int64(g))
	for j, v := range hot[:top] {
		m := j % g
		member[v], slot[v] = int32(m), int32(len(rows[m]))
		rows[m] = append(rows[m], v)
	}
	return
}

// NewPlan's parallel passes give the one-pass assignment for any number
// of CPUs, and name the first bad hot entry as a serial check would.
func TestPlanParallel(t *testing.T) {
	const n, k, cols = 300_000, 4, 8
	r := rand.New(rand.NewPCG(7, 8))
	b, err := book.Even(n, k)
	if err != nil {
		t.Fatal(err)
	}
	hot := make([]graph.NodeID, 0, n)
	for _, v := range r.Perm(n)[:250_000] {
		hot = append(hot, graph.NodeID(v))
	}
	for _, tc := range []struct {
		pol      Policy
		g        int // PlanConfig.GroupSize
		caches   int // caches per group: k for Partition, g for Replicate
		capacity int64
	}{
		{Partition, 0, k, 20_000}, {Partition, 0, k, n}, {Replicate, 1, 1, 100_000}, {Replicate, 2, 2, 70_001}, {Replicate, 4, 4, n},
	} {
		wantM, wantS, wantR := refPlan(b, hot, tc.capacity, tc.pol, tc.caches)
		for _, procs := range []int{1, 3, 8} {
			old := runtime.GOMAXPROCS(procs)
			p, err := NewPlan(b, hot, cols, PlanConfig{BudgetBytes: tc.capacity * 4 * cols, Policy: tc.pol, GroupSize: tc.g})
			runtime.GOMAXPROCS(old)
			if err != nil {
				t.Fatal(err)
			}
			same := slices.Equal(p.member, wantM) && slices.Equal(p.slot, wantS) && len(p.rows) == len(wantR)
			for m := range wantR {
				same = same && slices.Equal(p.rows[m], wantR[m])
			}
			if !same {
				t.Errorf("%s/%d capacity %d, GOMAXPROCS %d: the plan differs from the one-pass assignment", tc.pol, tc.g, tc.capacity, procs)
			}
		}
	}
	// Bad entries: the first in hot order is named, whatever the chunks.
	dup := slices.Clone(hot)
	// Entry 200,000 repeats entry 3 and entry 150,000 repeats 100,000:
	// the first repeat in order is entry 150,000.
	dup[200_000], dup[100_000] = dup[3], dup[150_000]
	out := slices.Clone(hot)
	out[120_000], out[90_000] = n, -1
	for name, tc := range map[string]struct {
		hot  []graph.NodeID
		want string
	}{
		"repeat":       {dup, fmt.Sprintf("hot[150000] = %d repeats an earlier node", dup[150_000])},
		"out of range": {out, fmt.Sprintf("hot[90000] = -1 not in [0, %d)", n)},
	} {
		for _, procs := range []int{1, 8} {
			old := runtime.GOMAXPROCS(procs)
			_, err := NewPlan(b, tc.hot, cols, PlanConfig{BudgetBytes: 1 << 20, Policy: Partition})
			runtime.GOMAXPROCS(old)
			if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s, GOMAXPROCS %d: %v, want %q", name, procs, err, tc.want)
			}
		}
	}
}
