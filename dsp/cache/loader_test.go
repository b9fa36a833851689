package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

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

// devices runs fn on k CPU "devices" with device communicators (staged
// over inproc) and host communicators.
func devices(t *testing.T, k int, fn func(rank int, b backend.Backend, dc comm.Comm, hc comm.Comm) error) []error {
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

// TestLoaderRowsEqualTable: for every policy and budget on 1-4 devices,
// the loaded rows equal the table's, and the cache counts add up.
func TestLoaderRowsEqualTable(t *testing.T) {
	const n, cols = 400, 5
	x := table(n, cols)
	for _, k := range []int{1, 2, 3, 4} {
		b := evenBook(t, n, k)
		for _, pc := range []PlanConfig{
			{BudgetBytes: 0},
			{BudgetBytes: 30 * 4 * cols, Policy: Partition},
			{BudgetBytes: n * 4 * cols, Policy: Partition},
			{BudgetBytes: 50 * 4 * cols, Policy: Replicate, GroupSize: 1},
			{BudgetBytes: 50 * 4 * cols, Policy: Replicate, GroupSize: k},
		} {
			plan, err := NewPlan(b, hotOrder(n, 7), cols, pc)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("k=%d %s/%d budget %d", k, pc.Policy, pc.GroupSize, pc.BudgetBytes)
			ms := make([]metrics.Counters, k)
			errs := devices(t, k, func(rank int, be backend.Backend, dc comm.Comm, hc comm.Comm) error {
				l, err := NewLoader(LoaderConfig{Plan: plan, Rank: rank, Rows: n, Cols: cols, Backend: be,
					Store: &HostStore{B: be, Table: x, Rows: n, Cols: cols, Hot: len(plan.Rows(rank))},
					Dev:   dc, Host: hc, Metrics: &ms[rank]})
				if err != nil {
					return err
				}
				defer l.Close()
				if l.Exchanges() != (k > 1 && pc.BudgetBytes > 0 && !(pc.Policy == Replicate && pc.GroupSize == 1)) {
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
				if k > 1 && pc.Policy == Partition && pc.BudgetBytes > 0 && s.PeerHits == 0 {
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
	plan, err := NewPlan(evenBook(t, n, k), hotOrder(n, 1), cols, PlanConfig{BudgetBytes: 20 * 4 * cols})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	errs := devices(t, k, func(rank int, be backend.Backend, dc comm.Comm, hc comm.Comm) error {
		l, err := NewLoader(LoaderConfig{Plan: plan, Rank: rank, Rows: n, Cols: cols, Backend: be,
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
	plan, err := NewPlan(evenBook(t, 10, 2), hotOrder(10, 1), 2, PlanConfig{BudgetBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	st := &HostStore{B: be, Rows: 10, Cols: 2, Table: table(10, 2)}
	for name, cfg := range map[string]LoaderConfig{
		"nil store":    {Plan: plan, Rank: 0, Rows: 10, Cols: 2, Backend: be},
		"nil plan":     {Rank: 0, Rows: 10, Cols: 2, Backend: be, Store: st},
		"wrong width":  {Plan: plan, Rank: 0, Rows: 10, Cols: 3, Backend: be, Store: st},
		"no comms":     {Plan: plan, Rank: 0, Rows: 10, Cols: 2, Backend: be, Store: st},
		"bad rank":     {Plan: plan, Rank: 5, Rows: 10, Cols: 2, Backend: be, Store: st},
		"rows":         {Plan: plan, Rank: 0, Rows: 11, Cols: 2, Backend: be, Store: st},
		"nil back end": {Plan: plan, Rank: 0, Rows: 10, Cols: 2, Store: st},
	} {
		if _, err := NewLoader(cfg); !errors.Is(err, ErrInput) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// TestLoaderDropout: a load with input dropout returns, bit for bit,
// what the plain load followed by backend.Dropout (the model's input
// dropout) gives, on one device (the local gather) and with rows
// exchanged between devices (the dropout in the scatter, at the batch
// positions' flat indices); a rate outside [0, 1) fails every device.
func TestLoaderDropout(t *testing.T) {
	const n, cols = 300, 6
	x := table(n, cols)
	for _, k := range []int{1, 3} {
		plan, err := NewPlan(evenBook(t, n, k), hotOrder(n, 5), cols, PlanConfig{BudgetBytes: 40 * 4 * cols, Policy: Partition})
		if err != nil {
			t.Fatal(err)
		}
		errs := devices(t, k, func(rank int, be backend.Backend, dc comm.Comm, hc comm.Comm) error {
			l, err := NewLoader(LoaderConfig{Plan: plan, Rank: rank, Rows: n, Cols: cols, Backend: be,
				Store: &HostStore{B: be, Table: x, Rows: n, Cols: cols, Hot: len(plan.Rows(rank))}, Dev: dc, Host: hc})
			if err != nil {
				return err
			}
			defer l.Close()
			if l.Exchanges() != (k > 1) {
				return fmt.Errorf("Exchanges() = %v", l.Exchanges())
			}
			for batch, p := range []float32{0.5, 0.1, 0} {
				nodes := randomNodes(n, 40+13*rank+7*batch, uint64(10*rank+batch))
				seed := uint64(1000 + 17*rank + batch)
				plain, err := l.Load(context.Background(), nodes)
				if err != nil {
					return err
				}
				want := make([]float32, plain.Len())
				if p > 0 {
					mask, _ := be.Alloc(backend.Float32, plain.Len())
					err = be.Dropout(plain, mask, plain, p, seed)
					be.Free(mask)
					if err != nil {
						return err
					}
				}
				if err := be.Download(want, plain); err != nil {
					return err
				}
				be.Free(plain)
				out, err := l.LoadDropout(context.Background(), nodes, Dropout{P: p, Seed: seed})
				if err != nil {
					return err
				}
				got := make([]float32, out.Len())
				if err := be.Download(got, out); err != nil {
					return err
				}
				be.Free(out)
				zeros := 0
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						return fmt.Errorf("p %v value %d: %v, want %v (Load then Dropout)", p, i, got[i], want[i])
					}
					if got[i] == 0 {
						zeros++
					}
				}
				if p == 0.5 && (zeros < len(got)/4 || zeros > 3*len(got)/4) {
					return fmt.Errorf("p 0.5: %d of %d values dropped", zeros, len(got))
				}
			}
			// Every device asks for a bad rate: each fails with ErrInput.
			_, err = l.LoadDropout(context.Background(), randomNodes(n, 5, 1), Dropout{P: 1})
			if !errors.Is(err, ErrInput) {
				return fmt.Errorf("rate 1: %v, want ErrInput", err)
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("k=%d rank %d: %v", k, r, err)
			}
		}
	}
}

// plainStore hides HostStore's BF16Gatherer: a store that writes only
// float32 rows.
type plainStore struct{ Store }

// TestLoaderBFloat16Rows: a loader asked for bfloat16 rows returns, bit
// for bit, the float32 load (with its input dropout) rounded to nearest
// even, as backend.Convert rounds (what the trainer converted before),
// on one device (the local gather) and with rows exchanged (the
// scatter); a store that cannot write them keeps float32 rows.
func TestLoaderBFloat16Rows(t *testing.T) {
	const n, cols = 300, 6
	x := table(n, cols)
	for _, k := range []int{1, 3} {
		plan, err := NewPlan(evenBook(t, n, k), hotOrder(n, 5), cols, PlanConfig{BudgetBytes: 40 * 4 * cols, Policy: Partition})
		if err != nil {
			t.Fatal(err)
		}
		errs := devices(t, k, func(rank int, be backend.Backend, dc comm.Comm, hc comm.Comm) error {
			store := func() *HostStore { return &HostStore{B: be, Table: x, Rows: n, Cols: cols, Hot: len(plan.Rows(rank))} }
			cfg := LoaderConfig{Plan: plan, Rank: rank, Rows: n, Cols: cols, Backend: be, Store: store(), Dev: dc, Host: hc}
			lf, err := NewLoader(cfg)
			if err != nil {
				return err
			}
			defer lf.Close()
			cfg.Store, cfg.BFloat16Rows = store(), true
			lh, err := NewLoader(cfg)
			if err != nil {
				return err
			}
			defer lh.Close()
			cfg.Store = plainStore{store()}
			lp, err := NewLoader(cfg)
			if err != nil {
				return err
			}
			defer lp.Close()
			if lf.RowType() != backend.Float32 || lh.RowType() != backend.BFloat16 || lp.RowType() != backend.Float32 {
				return fmt.Errorf("row types %v, %v, %v; want float32, bfloat16, float32", lf.RowType(), lh.RowType(), lp.RowType())
			}
			for batch, p := range []float32{0.5, 0} {
				nodes := randomNodes(n, 40+13*rank+7*batch, uint64(10*rank+batch))
				drop := Dropout{P: p, Seed: uint64(1000 + 17*rank + batch)}
				ref, err := lf.LoadDropout(context.Background(), nodes, drop)
				if err != nil {
					return err
				}
				wide := make([]float32, ref.Len())
				if err := be.Download(wide, ref); err != nil {
					return err
				}
				conv, _ := be.Alloc(backend.BFloat16, ref.Len())
				if err := be.Convert(conv, ref); err != nil {
					return err
				}
				be.Free(ref)
				want := make([]uint16, conv.Len())
				if err := be.Download(want, conv); err != nil {
					return err
				}
				be.Free(conv)
				out, err := lh.LoadDropout(context.Background(), nodes, drop)
				if err != nil {
					return err
				}
				if out.DType() != backend.BFloat16 || out.Len() != len(want) {
					return fmt.Errorf("p %v: rows of %v x %d, want bfloat16 x %d", p, out.DType(), out.Len(), len(want))
				}
				got := make([]uint16, out.Len())
				if err := be.Download(got, out); err != nil {
					return err
				}
				be.Free(out)
				rounded := 0
				for i := range want {
					if got[i] != want[i] {
						return fmt.Errorf("p %v value %d: bfloat16 %#04x, want %#04x (float32 load %v, converted)", p, i, got[i], want[i], wide[i])
					}
					if backend.BF16Value(got[i]) != wide[i] {
						rounded++
					}
				}
				if rounded == 0 {
					return fmt.Errorf("p %v: no value was rounded: the test table is bfloat16 already", p)
				}
				if out, err = lp.LoadDropout(context.Background(), nodes, drop); err != nil {
					return err
				}
				if out.DType() != backend.Float32 {
					return fmt.Errorf("a float32-only store returned %v rows", out.DType())
				}
				be.Free(out)
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("k=%d rank %d: %v", k, r, err)
			}
		}
	}
}

// TestHostStoreOnlyHot: with OnlyHot the store gathers its Order's rows
// and refuses any other, naming the node and its position.
func TestHostStoreOnlyHot(t *testing.T) {
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := table(10, 2)
	st := &HostStore{B: be, Rows: 10, Cols: 2, Table: x, Hot: 3, Order: []graph.NodeID{7, 2, 5}, OnlyHot: true}
	gather := func(ids ...int32) ([]float32, error) {
		out := make([]float32, 2*len(ids))
		err := st.Gather(cpu.WrapF32(out), cpu.WrapI32(ids))
		return out, err
	}
	got, err := gather(5, 7, 2, 7)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range []int{5, 7, 2, 7} {
		if got[2*i] != x[2*v] || got[2*i+1] != x[2*v+1] {
			t.Fatalf("row %d (node %d) = %v, want %v", i, v, got[2*i:2*i+2], x[2*v:2*v+2])
		}
	}
	if _, err := gather(2, 3); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "node 3 (position 1)") {
		t.Fatalf("node 3 not cached: %v", err)
	}
	st.OnlyHot = false
	if _, err := gather(2, 3); err != nil {
		t.Fatalf("without OnlyHot: %v", err)
	}
}
