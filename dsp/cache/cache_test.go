package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
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

func group(t testing.TB, k int, fn func(rank int, c comm.Comm) error) []error {
	t.Helper()
	cs, err := inproc.New(k, comm.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, k)
	var wg sync.WaitGroup
	for r := range k {
		wg.Go(func() { errs[r] = fn(r, cs[r]) })
	}
	wg.Wait()
	for _, c := range cs {
		c.Close()
	}
	return errs
}

// TestLoaderReturnsTableRows: whatever the number of devices, policy,
// group size, budget and hotness, every device gets exactly the table's
// rows, and the hit counts add up.
func TestLoaderReturnsTableRows(t *testing.T) {
	const n, cols = 300, 5
	g := randomGraph(t, 1, n, 4)
	x := table(n, cols)
	orders := map[string]func(*graph.CSR) ([]graph.NodeID, error){"in-degree": InDegree, "pagerank": PageRank, "reverse-pagerank": ReversePageRank}
	for k := 1; k <= 4; k++ {
		b := evenBook(t, n, k)
		type pc struct {
			pol   Policy
			group int
		}
		pcs := []pc{{Partition, 0}, {Replicate, 1}, {Replicate, k}}
		if k == 4 {
			pcs = append(pcs, pc{Replicate, 2})
		}
		for _, p := range pcs {
			for _, budget := range []int64{0, 7 * cols * 4, n * cols * 4} {
				for name, ord := range orders {
					t.Run(fmt.Sprintf("k=%d/%s-%d/budget=%d/%s", k, p.pol, p.group, budget, name), func(t *testing.T) {
						hot, err := ord(g)
						if err != nil {
							t.Fatal(err)
						}
						plan, err := NewPlan(b, hot, cols, PlanConfig{BudgetBytes: budget, Policy: p.pol, GroupSize: p.group})
						if err != nil {
							t.Fatal(err)
						}
						ms := make([]metrics.Counters, k)
						errs := group(t, k, func(r int, c comm.Comm) error {
							be, err := cpu.New(cpu.Options{})
							if err != nil {
								return err
							}
							l, err := NewLoader(c, be, plan, x, n, cols, &ms[r])
							if err != nil {
								return err
							}
							defer l.Close()
							for round := range 3 {
								s := rng.NewStream(uint64(100*r + round))
								var nodes []graph.NodeID
								if !(r == 1 && round == 1) { // one empty request
									for range 40 {
										nodes = append(nodes, graph.NodeID(s.Below(n)))
									}
								}
								got, err := l.Load(context.Background(), nodes)
								if err != nil {
									return err
								}
								if len(got) != len(nodes)*cols {
									return fmt.Errorf("%d values for %d nodes", len(got), len(nodes))
								}
								for i, v := range nodes {
									if !slices.Equal(got[i*cols:(i+1)*cols], x[int(v)*cols:(int(v)+1)*cols]) {
										return fmt.Errorf("round %d: row of node %d differs", round, v)
									}
								}
							}
							return nil
						})
						for r, err := range errs {
							if err != nil {
								t.Fatalf("rank %d: %v", r, err)
							}
						}
						for r := range k {
							s := ms[r].Snapshot(r)
							if s.Cache.Requests == 0 || s.Cache.Misses < 0 {
								t.Fatalf("rank %d: cache counts %+v", r, s.Cache)
							}
							switch budget {
							case 0:
								if s.Cache.HitRate != 0 {
									t.Fatalf("rank %d: budget 0 but hit rate %v", r, s.Cache.HitRate)
								}
							case n * cols * 4:
								if s.Cache.HitRate != 1 {
									t.Fatalf("rank %d: everything fits but hit rate %v", r, s.Cache.HitRate)
								}
							}
							if k == 1 && s.Cache.PeerHits != 0 {
								t.Fatalf("one device but %d peer hits", s.Cache.PeerHits)
							}
						}
					})
				}
			}
		}
	}
}

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

// TestLoaderBadNodes: a bad node on one device fails every device at
// once.
func TestLoaderBadNodes(t *testing.T) {
	const n, cols, k = 50, 3, 3
	b := evenBook(t, n, k)
	hot := ByCounts(make([]int64, n))
	plan, _ := NewPlan(b, hot, cols, PlanConfig{BudgetBytes: 10 * cols * 4})
	x := table(n, cols)
	start := time.Now()
	errs := group(t, k, func(r int, c comm.Comm) error {
		be, _ := cpu.New(cpu.Options{})
		l, err := NewLoader(c, be, plan, x, n, cols, nil)
		if err != nil {
			return err
		}
		defer l.Close()
		nodes := []graph.NodeID{1, 2}
		if r == 2 {
			nodes = []graph.NodeID{1, n}
		}
		_, err = l.Load(context.Background(), nodes)
		return err
	})
	if time.Since(start) > 5*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
	for r, err := range errs {
		want := ErrPeer
		if r == 2 {
			want = ErrInput
		}
		if !errors.Is(err, want) {
			t.Fatalf("rank %d: %v, want %v", r, err, want)
		}
	}
}
