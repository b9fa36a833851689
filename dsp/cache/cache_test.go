package cache

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
)

func randomGraph(t testing.TB, seed uint64, n int64, avg int) *graph.CSR {
	t.Helper()
	s := rng.NewStream(seed)
	g := &graph.CSR{NumRows: n, NumCols: n, Indptr: make([]int64, n+1)}
	for v := int64(0); v < n; v++ {
		d := s.Below(uint64(2*avg + 1))
		if s.Below(10) == 0 {
			d *= 8
		}
		for range d {
			g.Indices = append(g.Indices, graph.NodeID(s.Below(uint64(n))))
		}
		g.Indptr[v+1] = int64(len(g.Indices))
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	return g
}

func table(n, cols int) []float32 {
	x := make([]float32, n*cols)
	for i := range x {
		x[i] = float32(i)*0.5 + 1
	}
	return x
}

func evenBook(t testing.TB, n int64, k int) *book.Book {
	b, err := book.Even(n, k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLoaderReturnsTableRows: whatever the number of devices, policy,
// group size, budget and hotness, every device gets exactly the table's
// rows, and the hit counts add up.
func TestPlanPartition(t *testing.T) {
	const n, cols, k = 100, 2, 3
	b := evenBook(t, n, k)
	hot := make([]graph.NodeID, n)
	for i := range hot {
		hot[i] = graph.NodeID(n - 1 - i) // hottest = highest ID
	}
	plan, err := NewPlan(b, hot, cols, PlanConfig{BudgetBytes: 5 * cols * 4})
	if err != nil {
		t.Fatal(err)
	}
	for r := range k {
		rows := plan.Rows(r)
		if len(rows) != 5 {
			t.Fatalf("rank %d caches %d rows, want 5", r, len(rows))
		}
		lo, hi := b.Range(r)
		for i, v := range rows {
			if int64(v) < lo || int64(v) >= hi {
				t.Fatalf("rank %d caches %d outside its patch", r, v)
			}
			if int64(v) != hi-1-int64(i) {
				t.Fatalf("rank %d slot %d holds %d, want its %d-th hottest %d", r, i, v, i, hi-1-int64(i))
			}
			for q := range k {
				if dev, slot := plan.Holder(q, v); dev != r || slot != int32(i) {
					t.Fatalf("holder of %d for rank %d: (%d, %d), want (%d, %d)", v, q, dev, slot, r, i)
				}
			}
		}
	}
	if dev, _ := plan.Holder(0, 0); dev != -1 {
		t.Fatalf("cold node held by %d", dev)
	}
}

func TestPlanReplicateGroups(t *testing.T) {
	const n, cols, k, g = 60, 1, 4, 2
	b := evenBook(t, n, k)
	hot := make([]graph.NodeID, n)
	for i := range hot {
		hot[i] = graph.NodeID(i)
	}
	plan, err := NewPlan(b, hot, cols, PlanConfig{BudgetBytes: 3 * 4, Policy: Replicate, GroupSize: g})
	if err != nil {
		t.Fatal(err)
	}
	// Each group caches nodes 0..5, split between its two members.
	for r := range k {
		if !slices.Equal(plan.Rows(r), plan.Rows(r%g)) || len(plan.Rows(r)) != 3 {
			t.Fatalf("rank %d caches %v", r, plan.Rows(r))
		}
	}
	for v := graph.NodeID(0); v < 6; v++ {
		for r := range k {
			dev, _ := plan.Holder(r, v)
			if dev/g != r/g {
				t.Fatalf("node %d served to rank %d by rank %d of another group", v, r, dev)
			}
		}
	}
	for _, bad := range []PlanConfig{{Policy: Replicate, GroupSize: 3}, {Policy: Partition, GroupSize: 2}, {BudgetBytes: -1}, {Policy: "lru"}} {
		if _, err := NewPlan(b, hot, cols, bad); !errors.Is(err, ErrInput) {
			t.Fatalf("config %+v: %v", bad, err)
		}
	}
	if _, err := NewPlan(b, []graph.NodeID{1, 1}, cols, PlanConfig{}); !errors.Is(err, ErrInput) {
		t.Fatalf("repeated hot node: %v", err)
	}
}

// TestPlanAuto: the auto policy replicates over the smallest group
// whose budgets hold every hot row, and partitions when only all devices
// together can.
func TestPlanAuto(t *testing.T) {
	const n, cols, k = 60, 1, 4
	b := evenBook(t, n, k)
	hot := make([]graph.NodeID, n)
	for i := range hot {
		hot[i] = graph.NodeID(i)
	}
	for _, c := range []struct {
		rows  int64 // budget per device, in rows
		pol   Policy
		group int
	}{
		{60, Replicate, 1}, {100, Replicate, 1}, {30, Replicate, 2}, {20, Partition, 4}, {15, Partition, 4}, {5, Partition, 4}, {0, Partition, 4},
	} {
		plan, err := NewPlan(b, hot, cols, PlanConfig{BudgetBytes: c.rows * 4, Policy: Auto})
		if err != nil {
			t.Fatal(err)
		}
		if plan.Policy() != c.pol || plan.GroupSize() != c.group {
			t.Fatalf("budget %d rows: %s over %d devices, want %s over %d", c.rows, plan.Policy(), plan.GroupSize(), c.pol, c.group)
		}
		cached := 0
		for r := range plan.GroupSize() {
			cached += len(plan.Rows(r))
		}
		if want := min(int(c.rows)*c.group, n); c.pol == Replicate && cached != want {
			t.Fatalf("budget %d rows: a group caches %d rows, want %d", c.rows, cached, want)
		}
	}
	if _, err := NewPlan(b, hot, cols, PlanConfig{BudgetBytes: 4, Policy: Auto, GroupSize: 2}); !errors.Is(err, ErrInput) {
		t.Fatalf("auto with a group size: %v", err)
	}
}

// TestPageRank: on a star whose leaves all point to the center, the
// center ranks first and the scores sum to 1; reversed, the leaves lead.
func TestPageRank(t *testing.T) {
	const n = 6
	src, dst := []graph.NodeID{}, []graph.NodeID{}
	for v := graph.NodeID(1); v < n; v++ {
		src, dst = append(src, v), append(dst, 0) // v -> 0
	}
	out, err := graph.FromEdges(n, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := graph.Transpose(out)
	s, err := pageRank(in)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, x := range s {
		sum += x
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Fatalf("PageRank sums to %v", sum)
	}
	ord, _ := PageRank(in)
	if ord[0] != 0 {
		t.Fatalf("PageRank order %v, want the center first", ord)
	}
	rev, _ := ReversePageRank(in)
	if rev[len(rev)-1] != 0 {
		t.Fatalf("reverse PageRank order %v, want the center last", rev)
	}
	deg, _ := InDegree(in)
	if deg[0] != 0 || !slices.Equal(deg[1:], []graph.NodeID{1, 2, 3, 4, 5}) {
		t.Fatalf("in-degree order %v", deg)
	}
	if got := ByCounts([]int64{1, 5, 5, 0}); !slices.Equal(got, []graph.NodeID{1, 2, 0, 3}) {
		t.Fatalf("ByCounts %v", got)
	}
}
