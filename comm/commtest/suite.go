package commtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// DTypes, ReduceOps and Ops are what the suites cover.
var (
	DTypes    = []backend.DType{backend.Float32, backend.Int32, backend.Int64}
	ReduceOps = []comm.ReduceOp{comm.Sum, comm.Mean, comm.Max}
	Ops       = []comm.Op{comm.OpAllReduce, comm.OpBroadcast, comm.OpAllGather, comm.OpAllGatherV,
		comm.OpAllToAll, comm.OpAllToAllV, comm.OpReduceScatter, comm.OpBarrier}
)

// short reports testing.Short(), false in a child process of a
// multi-process test (whose test flags are not parsed).
func short() bool { return flag.Parsed() && testing.Short() }

// Lens are the per-rank lengths the conformance suite tries: 0, small odd
// sizes, and sizes that span many chunks or segments of a back end
// configured with small ones.
func Lens() []int {
	if short() {
		return []int{0, 1, 3, 8, 31, 100, 1025, 9001}
	}
	return []int{0, 1, 2, 3, 7, 8, 13, 31, 64, 100, 257, 1000, 4097, 20011, 65537}
}

// DeviceLens are Lens plus a length that spans many chunks of the GPU
// shared-memory pipeline (the full list in a child process).
func DeviceLens() []int {
	if !flag.Parsed() {
		return []int{0, 1, 2, 3, 7, 8, 13, 31, 64, 100, 257, 1000, 4097, 20011, 65537, 1<<20 + 3}
	}
	return append(Lens(), 1<<20+3)
}

// AllocLens are the lengths ConformanceAlloc tries: some below and some
// above the sizes from which back ends use their own memory directly.
func AllocLens() []int {
	if short() {
		return []int{0, 3, 20011}
	}
	return []int{0, 5, 4099, 20011, 65537}
}

// WorldSizes are the group sizes Conformance tries.
func WorldSizes() []int {
	if short() {
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

// Env is one rank's part in the suites.
type Env struct {
	Rank, Size int
	// Backend holds the buffers: the CPU back end for host
	// communicators, the rank's GPU (or the CPU back end) for device ones.
	Backend backend.Backend
	// Open opens this rank's communicator of a new group with front-end
	// options o. Every rank calls it the same number of times, in step
	// (it is collective). The suites close what it returns.
	Open func(o comm.Options) (comm.Comm, error)
	// Barrier synchronizes the ranks outside any communicator (the
	// rendezvous store's barrier, or a goroutine barrier), with a name
	// for error messages.
	Barrier func(name string) error
	// Add adds delta to the counter name shared by the ranks and returns
	// its new value (the store's Add, or a counter in memory).
	Add func(name string, delta int64) (int64, error)
	// Logf, if set, receives progress lines.
	Logf func(format string, a ...any)
	// Skip names the fault scenarios the back end cannot run, with why
	// ("counts": it sends no header with its data, so ranks that pass
	// different element counts go unnoticed without Debug;
	// "close-during-op": its Close waits for the operation in flight);
	// RankFaults logs the reason and skips them.
	Skip map[string]string
}

func (e Env) logf(format string, a ...any) {
	if e.Logf != nil {
		e.Logf(format, a...)
	}
}

// RankConformance runs the conformance suite on this rank: every case
// for each of lens (buffers from the back end; from the communicator's
// Alloc with alloc), then barrier ordering (no rank leaves before the
// last, delayed, one entered) and sequence numbering.
func RankConformance(ctx context.Context, e Env, lens []int, alloc bool) error {
	be, err := orCPU(e.Backend)
	if err != nil {
		return err
	}
	c, err := e.Open(comm.Options{Timeout: time.Minute})
	if err != nil {
		return err
	}
	defer c.Close()
	start := time.Now()
	for i, l := range lens {
		for _, cs := range Cases(l, 77+uint64(i)) {
			cs.Alloc = alloc
			if err := RunCase(ctx, c, be, cs); err != nil {
				return err
			}
		}
	}
	e.logf("rank %d: %d lengths x %d cases in %v", e.Rank, len(lens), len(Cases(0, 0)), time.Since(start).Round(time.Millisecond))
	if alloc {
		return allocFree(ctx, e, c, be)
	}
	if err := barrierOrders(ctx, e, c); err != nil {
		return err
	}
	return history(ctx, e, c, be)
}

// barrierOrders: in each round one rank enters the barrier late; every
// rank counts its arrival before entering and, once out, must see all n
// arrivals counted.
func barrierOrders(ctx context.Context, e Env, c comm.Comm) error {
	for round := 0; round < 3; round++ {
		name := fmt.Sprintf("commtest/barrier-orders/%d", round)
		if e.Rank == (round+1)%e.Size {
			time.Sleep(20 * time.Millisecond) // a late rank, so that an early exit shows
		}
		if _, err := e.Add(name, 1); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		got, err := e.Add(name, 0)
		if err != nil {
			return err
		}
		if got != int64(e.Size) {
			return fmt.Errorf("rank %d left barrier round %d after %d of %d ranks arrived", e.Rank, round, got, e.Size)
		}
		// Every rank checks before the next round's late rank counts.
		if err := c.Barrier(ctx); err != nil {
			return err
		}
	}
	return nil
}

// history: an all-reduce and a barrier get consecutive numbers in the
// history, and the all-reduce sums the ranks.
func history(ctx context.Context, e Env, c comm.Comm, be backend.Backend) error {
	h := c.History()
	var before uint64
	if len(h) > 0 {
		before = h[len(h)-1].Seq
	}
	d := &bufs{be: be}
	defer d.free()
	b, err := d.put(host{dt: backend.Float32, f32: []float32{float32(e.Rank)}})
	if err != nil {
		return err
	}
	if err := c.AllReduce(ctx, b, comm.Sum); err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if err := c.Sync(ctx); err != nil {
		return err
	}
	h = c.History()
	if len(h) < 2 {
		return fmt.Errorf("rank %d: history has %d records", e.Rank, len(h))
	}
	a, z := h[len(h)-2], h[len(h)-1]
	if a.Op != comm.OpAllReduce || z.Op != comm.OpBarrier || a.Seq != before+1 || z.Seq != before+2 || a.Err != "" || a.Count != 1 {
		return fmt.Errorf("rank %d: last records %+v, %+v; previous seq %d", e.Rank, a, z, before)
	}
	got := newHost(backend.Float32, 1)
	if err := d.get(got, b); err != nil {
		return err
	}
	if want := float32(e.Size * (e.Size - 1) / 2); got.f32[0] != want {
		return fmt.Errorf("rank %d: sum of ranks = %v, want %v", e.Rank, got.f32[0], want)
	}
	return nil
}

// allocFree checks Alloc and Free themselves: zeroed buffers of the right
// type and length (also after a dirty one was freed), invalid requests
// refused, and Free of a buffer the back end allocated harmless.
func allocFree(ctx context.Context, e Env, c comm.Comm, be backend.Backend) error {
	for _, dt := range DTypes {
		for round := 0; round < 2; round++ {
			b, err := c.Alloc(dt, 1001)
			if err != nil {
				return err
			}
			if b.DType() != dt || b.Len() != 1001 {
				return fmt.Errorf("Alloc(%v, 1001) = %v x %d", dt, b.DType(), b.Len())
			}
			h := newHost(dt, 1001)
			h.poison()
			if err := be.Download(h.slice(), b); err != nil {
				return err
			}
			for i := 0; i < h.len(); i++ {
				if h.at(i) != "0" {
					return fmt.Errorf("element %d of a fresh %v buffer (round %d) is %s", i, dt, round, h.at(i))
				}
			}
			h.poison() // dirty it: the next Alloc must zero it again
			if err := be.Upload(b, h.slice()); err != nil {
				return err
			}
			if err := c.Free(b); err != nil {
				return err
			}
		}
	}
	if _, err := c.Alloc(backend.DType(0), 3); err == nil {
		return errors.New("Alloc of an invalid dtype succeeded")
	}
	if _, err := c.Alloc(backend.Float32, -1); err == nil {
		return errors.New("Alloc of -1 elements succeeded")
	}
	b, err := be.Alloc(backend.Float32, 8)
	if err != nil {
		return err
	}
	if err := c.Free(b); err != nil {
		return fmt.Errorf("Free of a buffer from the back end: %w", err)
	}
	return c.Barrier(ctx)
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

// RunLocalRanks runs f for ranks 0..n-1 on goroutines and joins their
// errors.
func RunLocalRanks(n int, f func(rank int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// NewGroup opens a group of n communicators in this process (index =
// rank) with front-end options o.
type NewGroup func(n int, o comm.Options) ([]comm.Comm, error)

// LocalOpeners turns a function that opens a whole group at once (for
// goroutine ranks) into per-rank openers: the k-th call of every rank
// gets its member of the k-th group.
func LocalOpeners(n int, open NewGroup) []func(o comm.Options) (comm.Comm, error) {
	var mu sync.Mutex
	type grp struct {
		comms []comm.Comm
		err   error
		done  chan struct{}
	}
	var groups []*grp
	calls := make([]int, n)
	ops := make([]func(o comm.Options) (comm.Comm, error), n)
	for r := range ops {
		ops[r] = func(o comm.Options) (comm.Comm, error) {
			mu.Lock()
			k := calls[r]
			calls[r]++
			for len(groups) <= k {
				groups = append(groups, nil)
			}
			g := groups[k]
			if g == nil {
				g = &grp{done: make(chan struct{})}
				groups[k] = g
				mu.Unlock()
				g.comms, g.err = open(n, o)
				if g.err == nil && len(g.comms) != n {
					g.err = fmt.Errorf("commtest: a group of %d opened %d communicators", n, len(g.comms))
				}
				close(g.done)
			} else {
				mu.Unlock()
				<-g.done
			}
			if g.err != nil {
				return nil, g.err
			}
			return g.comms[r], nil
		}
	}
	return ops
}

// LocalBarrier returns a reusable barrier for n goroutine ranks. All
// ranks must use the same name; a rank that waits more than two minutes
// gives up with an error.
func LocalBarrier(n int) func(name string) error {
	var mu sync.Mutex
	count := 0
	genName := ""
	release := make(chan struct{})
	return func(name string) error {
		mu.Lock()
		if count == 0 {
			genName = name
		} else if name != genName {
			mu.Unlock()
			return fmt.Errorf("barrier %q: another rank waits at barrier %q", name, genName)
		}
		count++
		if count == n {
			count = 0
			close(release)
			release = make(chan struct{})
			mu.Unlock()
			return nil
		}
		ch := release
		mu.Unlock()
		select {
		case <-ch:
			return nil
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("barrier %q: the other ranks did not arrive within 2 minutes", name)
		}
	}
}

// LocalCounters returns shared counters for goroutine ranks (Env.Add).
func LocalCounters() func(name string, delta int64) (int64, error) {
	var mu sync.Mutex
	m := map[string]int64{}
	return func(name string, delta int64) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		m[name] += delta
		return m[name], nil
	}
}

// LocalEnvs returns the environments of n goroutine ranks whose groups
// open makes, with buffers of be (nil: the CPU back end) and skip as
// Env.Skip.
func LocalEnvs(t testing.TB, n int, be backend.Backend, open NewGroup, skip map[string]string) []Env {
	opens := LocalOpeners(n, open)
	bar, add := LocalBarrier(n), LocalCounters()
	es := make([]Env, n)
	for r := range es {
		es[r] = Env{Rank: r, Size: n, Backend: be, Open: opens[r], Barrier: bar, Add: add, Logf: t.Logf, Skip: skip}
	}
	return es
}

// Conformance runs the conformance suite on goroutine ranks, for each of
// WorldSizes(), with Lens() and three seeded random lengths, on buffers
// of be (nil: the CPU back end).
func Conformance(t *testing.T, be backend.Backend, open NewGroup) {
	for _, n := range WorldSizes() {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 7))
			lens := Lens()
			for k := 0; k < 3; k++ {
				lens = append(lens, rng.IntN(3000)) // odd ones are likely
			}
			es := LocalEnvs(t, n, be, open, nil)
			if err := RunLocalRanks(n, func(r int) error { return RankConformance(context.Background(), es[r], lens, false) }); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// ConformanceAlloc runs the cases with buffers from Comm.Alloc (and Free
// after each), which back ends with memory of their own (shm) serve from
// it, on groups of 1 to 3, and checks Alloc and Free themselves.
func ConformanceAlloc(t *testing.T, be backend.Backend, open NewGroup) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			es := LocalEnvs(t, n, be, open, nil)
			if err := RunLocalRanks(n, func(r int) error { return RankConformance(context.Background(), es[r], AllocLens(), true) }); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Faults runs the fault suite on goroutine ranks, in groups of two and
// three, on buffers of be (nil: the CPU back end), skipping the scenarios
// skip names (see Env.Skip).
func Faults(t *testing.T, be backend.Backend, open NewGroup, skip map[string]string) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			es := LocalEnvs(t, n, be, open, skip)
			if err := RunLocalRanks(n, func(r int) error { return RankFaults(context.Background(), es[r]) }); err != nil {
				t.Fatal(err)
			}
		})
	}
}
