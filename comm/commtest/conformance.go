package commtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// NewGroup creates a fresh group of n communicators (index = rank) with
// the given front-end options. The suite closes them.
type NewGroup func(t testing.TB, n int, o comm.Options) []comm.Comm

// DTypes, ReduceOps and Ops are what the suites cover.
var (
	DTypes    = []backend.DType{backend.Float32, backend.Int32, backend.Int64}
	ReduceOps = []comm.ReduceOp{comm.Sum, comm.Mean, comm.Max}
	Ops       = []comm.Op{comm.OpAllReduce, comm.OpBroadcast, comm.OpAllGather, comm.OpAllGatherV,
		comm.OpAllToAll, comm.OpAllToAllV, comm.OpReduceScatter, comm.OpBarrier}
)

// Lens are the per-rank lengths the conformance suite tries: 0, small odd
// sizes, and sizes that span many chunks or segments of a back end
// configured with small ones.
func Lens() []int {
	if testing.Short() {
		return []int{0, 1, 3, 8, 31, 100, 1025, 9001}
	}
	return []int{0, 1, 2, 3, 7, 8, 13, 31, 64, 100, 257, 1000, 4097, 20011, 65537}
}

// WorldSizes are the group sizes the conformance suite tries.
func WorldSizes() []int {
	if testing.Short() {
		return []int{1, 2, 3}
	}
	return []int{1, 2, 3, 4}
}

// Cases lists every (op, dtype, reduction) combination with the given
// length and seed.
func Cases(length int, seed uint64) []Case {
	var cs []Case
	for _, op := range Ops {
		if op == comm.OpBarrier {
			cs = append(cs, Case{Op: op, Len: length, Seed: seed})
			continue
		}
		for _, dt := range DTypes {
			if op == comm.OpAllReduce || op == comm.OpReduceScatter {
				for _, red := range ReduceOps {
					cs = append(cs, Case{Op: op, DType: dt, Red: red, Len: length, Seed: seed})
				}
				continue
			}
			cs = append(cs, Case{Op: op, DType: dt, Len: length, Seed: seed})
		}
	}
	return cs
}

// group keeps a live group for a world size, replacing it after a failure
// (a failed collective breaks a communicator).
type group struct {
	t     *testing.T
	n     int
	make  NewGroup
	o     comm.Options
	comms []comm.Comm
}

func (g *group) get(t testing.TB) []comm.Comm {
	if g.comms == nil {
		g.comms = g.make(t, g.n, g.o)
		if len(g.comms) != g.n {
			t.Fatalf("NewGroup(%d) returned %d communicators", g.n, len(g.comms))
		}
	}
	return g.comms
}

func (g *group) reset() {
	for _, c := range g.comms {
		c.Close()
	}
	g.comms = nil
}

// OnAll runs f concurrently on every rank and returns the errors by rank.
func OnAll(comms []comm.Comm, f func(c comm.Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(c)
		}()
	}
	wg.Wait()
	return errs
}

// Conformance runs every case on groups of each of WorldSizes(), each rank
// driven by its own goroutine, then checks barrier ordering and the
// sequence numbers in History.
func Conformance(t *testing.T, newGroup NewGroup) { conformance(t, newGroup, false, Lens()) }

// AllocLens are the lengths ConformanceAlloc tries: some below and some
// above the sizes from which back ends use their own memory directly.
func AllocLens() []int {
	if testing.Short() {
		return []int{0, 3, 20011}
	}
	return []int{0, 5, 4099, 20011, 65537}
}

// ConformanceAlloc runs the cases with buffers from Comm.Alloc (and Free
// after each), which back ends with memory of their own (shm) serve from
// it, and checks Alloc and Free themselves.
func ConformanceAlloc(t *testing.T, newGroup NewGroup) {
	conformance(t, newGroup, true, AllocLens())
	t.Run("alloc-free", func(t *testing.T) {
		comms := newGroup(t, 2, comm.Options{Timeout: 10 * time.Second})
		defer closeAll(comms)
		c := comms[0]
		for _, dt := range DTypes {
			b, err := c.Alloc(dt, 1001)
			if err != nil {
				t.Fatal(err)
			}
			if b.DType() != dt || b.Len() != 1001 || len(b.Bytes()) != 1001*dt.Size() {
				t.Fatalf("Alloc(%v, 1001) = %v x %d", dt, b.DType(), b.Len())
			}
			for i, x := range b.Bytes() {
				if x != 0 {
					t.Fatalf("byte %d of a fresh buffer is %d", i, x)
				}
				b.Bytes()[i] = 0xff // dirty it: the next Alloc must zero it again
			}
			if err := c.Free(b); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Alloc(backend.DType(0), 3); err == nil {
			t.Error("Alloc of an invalid dtype succeeded")
		}
		if _, err := c.Alloc(backend.Float32, -1); err == nil {
			t.Error("Alloc of -1 elements succeeded")
		}
		// Freeing memory that did not come from Alloc is harmless.
		if err := c.Free(comm.F32(make([]float32, 8))); err != nil {
			t.Errorf("Free of a heap slice: %v", err)
		}
	})
}

func conformance(t *testing.T, newGroup NewGroup, alloc bool, lens []int) {
	o := comm.Options{Timeout: 60 * time.Second}
	for _, n := range WorldSizes() {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			g := &group{t: t, n: n, make: newGroup, o: o}
			defer g.reset()
			for _, c0 := range Cases(0, 0) {
				name := c0.String()
				name = name[:len(name)-len(fmt.Sprintf("/len=%d/seed=%d", 0, 0))]
				t.Run(name, func(t *testing.T) {
					// The fixed lengths, then a few random ones (seeded, so
					// a failure reproduces; odd ones are likely).
					rng := rand.New(rand.NewPCG(uint64(n), uint64(len(name))))
					ls := append([]int(nil), lens...)
					for k := 0; k < 3; k++ {
						ls = append(ls, rng.IntN(3000))
					}
					for i, l := range ls {
						c := c0
						c.Len, c.Seed, c.Alloc = l, uint64(1000*n+i), alloc
						comms := g.get(t)
						errs := OnAll(comms, func(cm comm.Comm) error { return RunCase(context.Background(), cm, c) })
						failed := false
						for _, err := range errs {
							if err != nil {
								t.Error(err)
								failed = true
							}
						}
						if failed {
							g.reset()
							return
						}
					}
				})
			}
			if !alloc {
				t.Run("barrier-orders", func(t *testing.T) { barrierOrders(t, g.get(t)) })
				t.Run("history", func(t *testing.T) { history(t, g.get(t)) })
			}
		})
	}
}

// barrierOrders checks that no rank leaves a barrier before the last rank
// (delayed on purpose) has entered it.
func barrierOrders(t *testing.T, comms []comm.Comm) {
	n := len(comms)
	for round := 0; round < 3; round++ {
		var arrived atomic.Int32
		errs := OnAll(comms, func(c comm.Comm) error {
			if c.Rank() == (round+1)%n {
				time.Sleep(20 * time.Millisecond)
			}
			arrived.Add(1)
			if err := c.Barrier(context.Background()); err != nil {
				return err
			}
			if a := arrived.Load(); int(a) != n {
				return fmt.Errorf("rank %d left the barrier after %d of %d ranks arrived", c.Rank(), a, n)
			}
			return nil
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		// Separate rounds so no rank re-increments before all checked.
		for _, err := range OnAll(comms, func(c comm.Comm) error { return c.Barrier(context.Background()) }) {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// history checks sequence numbering and the flight recorder.
func history(t *testing.T, comms []comm.Comm) {
	before := make([]uint64, len(comms))
	for r, c := range comms {
		if h := c.History(); len(h) > 0 {
			before[r] = h[len(h)-1].Seq
		}
	}
	errs := OnAll(comms, func(c comm.Comm) error {
		x := []float32{float32(c.Rank())}
		if err := c.AllReduce(context.Background(), comm.F32(x), comm.Sum); err != nil {
			return err
		}
		return c.Barrier(context.Background())
	})
	for r, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		h := comms[r].History()
		if len(h) < 2 {
			t.Fatalf("rank %d: history has %d records", r, len(h))
		}
		a, b := h[len(h)-2], h[len(h)-1]
		if a.Op != comm.OpAllReduce || b.Op != comm.OpBarrier || a.Seq != before[r]+1 || b.Seq != before[r]+2 || a.Err != "" || a.Count != 1 {
			t.Fatalf("rank %d: last records %+v, %+v; previous seq %d", r, a, b, before[r])
		}
		if first := comms[0].History(); first[len(first)-1].Seq != b.Seq {
			t.Fatalf("rank %d is at #%d but rank 0 at #%d", r, b.Seq, first[len(first)-1].Seq)
		}
	}
}
