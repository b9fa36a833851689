package gpucache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

func evenBook(t testing.TB, n int64, k int) *book.Book {
	b, err := book.Even(n, k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hotOrder is a fixed pseudo-random ranking of n nodes.
func hotOrder(n int, seed uint64) []graph.NodeID {
	s := rng.NewStream(seed)
	out := make([]graph.NodeID, n)
	for i := range out {
		out[i] = graph.NodeID(i)
	}
	for i := n - 1; i > 0; i-- {
		j := int(s.Below(uint64(i + 1)))
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func randomNodes(n, count int, seed uint64) []graph.NodeID {
	s := rng.NewStream(seed)
	out := make([]graph.NodeID, count)
	for i := range out {
		out[i] = graph.NodeID(s.Below(uint64(n)))
	}
	return out
}

// TestRoute: every position lands on a staging row holding its node, the
// local rows are the cached and cold ones, requests go to the holders in
// rank order, and the counts add up.
func TestRoute(t *testing.T) {
	const n, cols = 500, 3
	for _, k := range []int{1, 2, 4} {
		b := evenBook(t, n, k)
		for _, pc := range []cache.PlanConfig{
			{BudgetBytes: 0},
			{BudgetBytes: 40 * 4 * cols, Policy: cache.Partition},
			{BudgetBytes: n * 4 * cols, Policy: cache.Partition},
			{BudgetBytes: 60 * 4 * cols, Policy: cache.Replicate, GroupSize: k},
			{BudgetBytes: 60 * 4 * cols, Policy: cache.Replicate, GroupSize: 1},
		} {
			plan, err := cache.NewPlan(b, hotOrder(n, 3), cols, pc)
			if err != nil {
				t.Fatal(err)
			}
			for rank := range k {
				r, err := NewRouter(plan, rank, n)
				if err != nil {
					t.Fatal(err)
				}
				nodes := randomNodes(n, 300, uint64(rank+1))
				rt, err := r.Route(nodes)
				if err != nil {
					t.Fatal(err)
				}
				staging := append(slices.Clone(rt.Local), rt.Send...)
				if len(rt.Perm) != len(nodes) || len(staging) != len(nodes) {
					t.Fatalf("k=%d %+v rank %d: %d perm, %d staging rows for %d nodes", k, pc, rank, len(rt.Perm), len(staging), len(nodes))
				}
				for i, v := range nodes {
					if staging[rt.Perm[i]] != v {
						t.Fatalf("position %d: staging row %d holds %d, want %d", i, rt.Perm[i], staging[rt.Perm[i]], v)
					}
				}
				hits, cold := 0, 0
				for _, v := range rt.Local {
					switch h, _ := plan.Holder(rank, v); h {
					case rank:
						hits++
					case -1:
						cold++
					default:
						t.Fatalf("local node %d is held by %d", v, h)
					}
				}
				if hits != rt.Hits || cold != rt.Cold {
					t.Fatalf("hits/cold %d/%d, counted %d/%d", rt.Hits, rt.Cold, hits, cold)
				}
				at := 0
				for p, c := range rt.SendCounts {
					if p == rank && c != 0 {
						t.Fatalf("rank %d asks itself for %d rows", rank, c)
					}
					for _, v := range rt.Send[at : at+c] {
						if h, _ := plan.Holder(rank, v); h != p {
							t.Fatalf("node %d asked of %d, held by %d", v, p, h)
						}
					}
					at += c
				}
				if at != len(rt.Send) || rt.Hits+rt.Cold+rt.Peer() != len(nodes) {
					t.Fatalf("counts do not add up: %+v", rt.SendCounts)
				}
			}
		}
	}
}

// TestRouteChunked: a batch large enough to be routed by several
// goroutines gives the sequential result: every holder's rows in
// position order.
func TestRouteChunked(t *testing.T) {
	const n, cols, k = 5000, 2, 4
	plan, err := cache.NewPlan(evenBook(t, n, k), hotOrder(n, 5), cols, cache.PlanConfig{BudgetBytes: 700 * 4 * cols})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(plan, 2, n)
	if err != nil {
		t.Fatal(err)
	}
	nodes := randomNodes(n, 5*routeChunk+123, 9)
	rt, err := r.Route(nodes)
	if err != nil {
		t.Fatal(err)
	}
	var local []int32
	send := make([][]int32, k)
	for _, v := range nodes {
		h, _ := plan.Holder(2, v)
		if h < 0 || h == 2 {
			local = append(local, v)
		} else {
			send[h] = append(send[h], v)
		}
	}
	var wantSend []int32
	for _, s := range send {
		wantSend = append(wantSend, s...)
	}
	if !slices.Equal(rt.Local, local) || !slices.Equal(rt.Send, wantSend) {
		t.Fatal("chunked route differs from the sequential order")
	}
	staging := append(slices.Clone(rt.Local), rt.Send...)
	for i, v := range nodes {
		if staging[rt.Perm[i]] != v {
			t.Fatalf("position %d: staging row %d holds %d, want %d", i, rt.Perm[i], staging[rt.Perm[i]], v)
		}
	}
	if _, err := r.Route(append(nodes, n)); !errors.Is(err, ErrInput) {
		t.Fatalf("bad node in a chunked batch: %v", err)
	}
}

func TestRouteErrors(t *testing.T) {
	plan, err := cache.NewPlan(evenBook(t, 10, 2), nil, 2, cache.PlanConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(plan, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]graph.NodeID{{-1}, {3, 10}} {
		if _, err := r.Route(bad); !errors.Is(err, ErrInput) {
			t.Fatalf("Route(%v): %v", bad, err)
		}
	}
	if _, err := NewRouter(plan, 2, 10); !errors.Is(err, ErrInput) {
		t.Fatalf("rank 2 of 2: %v", err)
	}
	if _, err := NewRouter(plan, 0, 11); !errors.Is(err, ErrInput) {
		t.Fatalf("rows beyond the plan: %v", err)
	}
	if _, err := NewRouter(nil, 0, 10); !errors.Is(err, ErrInput) {
		t.Fatalf("nil plan: %v", err)
	}
}

// devices runs fn on k CPU "devices" with device communicators (staged
// over inproc) and host communicators.
func devices(t *testing.T, k int, fn func(rank int, b backend.Backend, dc comm.DeviceComm, hc comm.Comm) error) []error {
	t.Helper()
	o := comm.Options{Timeout: 20 * time.Second}
	hs, err := inproc.New(k, o)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := inproc.New(k, o)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, k)
	var wg sync.WaitGroup
	for r := range k {
		wg.Go(func() {
			b, err := cpu.New(cpu.Options{})
			if err != nil {
				errs[r] = err
				return
			}
			dc := staged.Open(ds[r], b, o)
			defer dc.Close()
			errs[r] = fn(r, b, dc, hs[r])
		})
	}
	wg.Wait()
	for _, c := range hs {
		c.Close()
	}
	return errs
}

func table(n, cols int) []float32 {
	x := make([]float32, n*cols)
	for i := range x {
		x[i] = float32(i)*0.25 + 1
	}
	return x
}

// TestLoaderRowsEqualTable: for every policy and budget on 1-4 devices,
// the loaded rows equal the table's, and the cache counts add up.
func TestLoaderRowsEqualTable(t *testing.T) {
	const n, cols = 400, 5
	x := table(n, cols)
	for _, k := range []int{1, 2, 3, 4} {
		b := evenBook(t, n, k)
		for _, pc := range []cache.PlanConfig{
			{BudgetBytes: 0},
			{BudgetBytes: 30 * 4 * cols, Policy: cache.Partition},
			{BudgetBytes: n * 4 * cols, Policy: cache.Partition},
			{BudgetBytes: 50 * 4 * cols, Policy: cache.Replicate, GroupSize: 1},
			{BudgetBytes: 50 * 4 * cols, Policy: cache.Replicate, GroupSize: k},
		} {
			plan, err := cache.NewPlan(b, hotOrder(n, 7), cols, pc)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("k=%d %s/%d budget %d", k, pc.Policy, pc.GroupSize, pc.BudgetBytes)
			ms := make([]metrics.Counters, k)
			errs := devices(t, k, func(rank int, be backend.Backend, dc comm.DeviceComm, hc comm.Comm) error {
				l, err := New(Config{Plan: plan, Rank: rank, Rows: n, Cols: cols, Backend: be,
					Store: &HostStore{B: be, Table: x, Rows: n, Cols: cols, Hot: len(plan.Rows(rank))},
					Dev:   dc, Host: hc, Metrics: &ms[rank]})
				if err != nil {
					return err
				}
				defer l.Close()
				if l.Exchanges() != (k > 1 && pc.BudgetBytes > 0 && !(pc.Policy == cache.Replicate && pc.GroupSize == 1)) {
					return fmt.Errorf("Exchanges() = %v", l.Exchanges())
				}
				for batch := range 3 {
					// Different sizes on different devices, unique or not.
					nodes := randomNodes(n, 50+37*rank+11*batch, uint64(100*rank+batch))
					if batch == 2 {
						nodes = nil // an empty batch
					}
					out, err := l.Load(context.Background(), nodes)
					if err != nil {
						return err
					}
					got := make([]float32, out.Len())
					if err := be.Download(got, out); err != nil {
						return err
					}
					be.Free(out)
					if len(got) != len(nodes)*cols {
						return fmt.Errorf("batch %d: %d values for %d nodes", batch, len(got), len(nodes))
					}
					for i, v := range nodes {
						for c := range cols {
							if got[i*cols+c] != x[int(v)*cols+c] {
								return fmt.Errorf("batch %d row %d (node %d) col %d: %v, want %v", batch, i, v, c, got[i*cols+c], x[int(v)*cols+c])
							}
						}
					}
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("%s: rank %d: %v", name, r, err)
				}
			}
			for r := range k {
				s := ms[r].Snapshot(r).Cache
				want := int64(50+37*r) + int64(50+37*r+11)
				if s.Requests != want || s.LocalHits+s.PeerHits+s.Misses != s.Requests {
					t.Fatalf("%s: rank %d cache %+v, want %d requests", name, r, s, want)
				}
				if pc.BudgetBytes == 0 && s.Misses != s.Requests {
					t.Fatalf("%s: nothing cached but %+v", name, s)
				}
				if k > 1 && pc.Policy == cache.Partition && pc.BudgetBytes > 0 && s.PeerHits == 0 {
					t.Fatalf("%s: rank %d got nothing from peers: %+v", name, r, s)
				}
			}
		}
	}
}

// TestLoaderBadInputFailsEveryDevice: one device's bad node makes every
// device's load fail at once (ErrInput there, ErrPeer elsewhere).
func TestLoaderBadInputFailsEveryDevice(t *testing.T) {
	const n, cols, k = 100, 2, 3
	x := table(n, cols)
	plan, err := cache.NewPlan(evenBook(t, n, k), hotOrder(n, 1), cols, cache.PlanConfig{BudgetBytes: 20 * 4 * cols})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	errs := devices(t, k, func(rank int, be backend.Backend, dc comm.DeviceComm, hc comm.Comm) error {
		l, err := New(Config{Plan: plan, Rank: rank, Rows: n, Cols: cols, Backend: be,
			Store: &HostStore{B: be, Table: x, Rows: n, Cols: cols}, Dev: dc, Host: hc})
		if err != nil {
			return err
		}
		nodes := []graph.NodeID{1, 2, 3}
		if rank == 1 {
			nodes[1] = n + 5
		}
		_, err = l.Load(context.Background(), nodes)
		return err
	})
	if time.Since(start) > 10*time.Second {
		t.Fatalf("failing took %v", time.Since(start))
	}
	for r, err := range errs {
		want := ErrPeer
		if r == 1 {
			want = ErrInput
		}
		if !errors.Is(err, want) {
			t.Fatalf("rank %d: %v, want %v", r, err, want)
		}
	}
}

func TestLoaderConfigErrors(t *testing.T) {
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := cache.NewPlan(evenBook(t, 10, 2), hotOrder(10, 1), 2, cache.PlanConfig{BudgetBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	st := &HostStore{B: be, Rows: 10, Cols: 2, Table: table(10, 2)}
	for name, cfg := range map[string]Config{
		"nil store":    {Plan: plan, Rank: 0, Rows: 10, Cols: 2, Backend: be},
		"nil plan":     {Rank: 0, Rows: 10, Cols: 2, Backend: be, Store: st},
		"wrong width":  {Plan: plan, Rank: 0, Rows: 10, Cols: 3, Backend: be, Store: st},
		"no comms":     {Plan: plan, Rank: 0, Rows: 10, Cols: 2, Backend: be, Store: st},
		"bad rank":     {Plan: plan, Rank: 5, Rows: 10, Cols: 2, Backend: be, Store: st},
		"nil back end": {Plan: plan, Rank: 0, Rows: 10, Cols: 2, Store: st},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInput) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
