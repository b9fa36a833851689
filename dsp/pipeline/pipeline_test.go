package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

func TestQueueFIFOAndStats(t *testing.T) {
	q := NewQueue[int]("a->b", 0, 2, time.Second)
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 10 {
			if err := q.Push(ctx, "a", i); err != nil {
				t.Error(err)
			}
		}
		q.Close()
	})
	for want := 0; ; want++ {
		time.Sleep(time.Millisecond)
		v, ok, err := q.Pop(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			if want != 10 {
				t.Fatalf("closed after %d items", want)
			}
			break
		}
		if v != want {
			t.Fatalf("got %d, want %d", v, want)
		}
	}
	wg.Wait()
	s := q.Stats()
	if s.Capacity != 2 || s.Pushes != 10 || s.MaxOccupancy < 1 || s.MaxOccupancy > 2 || s.MeanOccupancy <= 0 || s.MeanOccupancy > 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestQueueStalls(t *testing.T) {
	q := NewQueue[int]("sampler->loader", 3, 1, 50*time.Millisecond)
	ctx := context.Background()
	_, _, err := q.Pop(ctx, "loader")
	var se *StallError
	if !errors.As(err, &se) || se.Op != "pop" || se.Rank != 3 || !strings.Contains(err.Error(), "rank 3 loader") {
		t.Fatalf("pop on an empty queue: %v", err)
	}
	if err := q.Push(ctx, "sampler", 1); err != nil {
		t.Fatal(err)
	}
	err = q.Push(ctx, "sampler", 2)
	if !errors.As(err, &se) || se.Op != "push" || !strings.Contains(err.Error(), "sampler->loader") {
		t.Fatalf("push on a full queue: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := q.Push(cctx, "sampler", 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("push with a cancelled context: %v", err)
	}
	n := 0
	q.Drain(func(int) { n++ })
	if n != 1 {
		t.Fatalf("drained %d items", n)
	}
}

func TestGroupFirstError(t *testing.T) {
	g, ctx := NewGroup(context.Background())
	boom := errors.New("boom")
	g.Go("a", func() error { return boom })
	g.Go("b", func() error { <-ctx.Done(); return ctx.Err() })
	g.Go("c", func() error { panic("oops") })
	err := g.Wait()
	if !errors.Is(err, boom) && !strings.Contains(fmt.Sprint(err), "panicked") {
		t.Fatalf("Wait: %v", err)
	}
}

// TestCommOrdersStages: three stages per device issue all-reduces of
// different lengths concurrently on ONE communicator per device, with
// random delays, through Comm wrappers sharing the device's
// comm.Coordinator. Without coordination the devices would pair different
// stages' collectives; with it every all-reduce gets its own stage's sum.
func TestCommOrdersStages(t *testing.T) {
	const k, stages, rounds = 3, 3, 25
	o := comm.Options{Timeout: 10 * time.Second}
	cs, err := inproc.New(k, o)
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := inproc.New(k, o)
	if err != nil {
		t.Fatal(err)
	}
	coords := make([]*comm.Coordinator, k)
	for r := range coords {
		coords[r] = comm.NewCoordinator(ctrl[r], comm.CoordOptions{Timeout: 10 * time.Second})
	}
	defer func() {
		for r := range k {
			coords[r].Close()
			cs[r].Close()
		}
	}()
	hook := RandomDelays(7, 2*time.Millisecond, 0.5)
	var tracked sync.Map
	g, ctx := NewGroup(context.Background())
	for r := range k {
		for s := range stages {
			c := &Comm{Comm: cs[r], Launch: coords[r], Stage: s, Name: fmt.Sprint(s), Hook: hook,
				Track: func(b string) { tracked.Store(b, true) }}
			g.Go(fmt.Sprintf("rank %d stage %d", r, s), func() error {
				for i := range rounds {
					buf := make([]float32, s+1)
					for j := range buf {
						buf[j] = float32(100*r + 10*s + i)
					}
					if err := c.AllReduce(ctx, cpu.WrapF32(buf), comm.Sum); err != nil {
						return err
					}
					want := float32(100*(0+1+2) + 3*(10*s+i))
					for _, v := range buf {
						if v != want {
							return fmt.Errorf("rank %d stage %d round %d: sum %v, want %v", r, s, i, v, want)
						}
					}
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for r := range k {
		if n := len(coords[r].Launched()); n != stages*rounds {
			t.Fatalf("rank %d launched %d collectives, want %d", r, n, stages*rounds)
		}
	}
	for _, want := range []string{"waiting for its turn to launch all_reduce", "in all_reduce", ""} {
		if _, ok := tracked.Load(want); !ok {
			t.Fatalf("Track never got %q", want)
		}
	}
}

// TestWrappersPassEveryCollective: Comm runs every collective of the
// wrapped communicators (host ones, and staged ones over host ones on
// CPU back ends) through the hook and the launcher, with the wrapped
// results, and leaves the tracked state cleared after each.
func TestWrappersPassEveryCollective(t *testing.T) {
	const k = 2
	o := comm.Options{Timeout: 10 * time.Second}
	hs, err1 := inproc.New(k, o)
	ds, err2 := inproc.New(k, o)
	ctrl, err3 := inproc.New(k, o)
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	var hooks atomic.Int64
	hook := func(context.Context, int, string) { hooks.Add(1) }
	g, ctx := NewGroup(context.Background())
	for r := range k {
		g.Go(fmt.Sprint(r), func() error {
			b, err := cpu.New(cpu.Options{})
			if err != nil {
				return err
			}
			coord := comm.NewCoordinator(ctrl[r], comm.CoordOptions{Timeout: 10 * time.Second})
			defer coord.Close()
			var last atomic.Value
			track := func(s string) { last.Store(s) }
			hc := &Comm{Comm: hs[r], Launch: coord, Stage: 0, Name: "host", Hook: hook, Track: track}
			dc := &Comm{Comm: staged.Open(ds[r], b, o), Launch: coord, Stage: 1, Name: "device", Hook: hook, Track: track}
			defer dc.Close()
			x := []float32{float32(r + 1), float32(10 * (r + 1))}
			all := make([]float32, 2*k)
			ops := []func() error{
				func() error { return hc.AllReduce(ctx, cpu.WrapF32(x[:1]), comm.Sum) },
				func() error { return hc.Broadcast(ctx, cpu.WrapF32(x[1:]), 0) },
				func() error { return hc.AllGather(ctx, cpu.WrapF32(all), cpu.WrapF32(x)) },
				func() error { return hc.AllGatherV(ctx, cpu.WrapF32(all[:k]), cpu.WrapF32(x[:1]), []int{1, 1}) },
				func() error { return hc.AllToAll(ctx, cpu.WrapF32(all[:k]), cpu.WrapF32(x)) },
				func() error { return hc.AllToAllV(ctx, cpu.WrapF32(all[:k]), []int{1, 1}, cpu.WrapF32(x), []int{1, 1}) },
				func() error { return hc.ReduceScatter(ctx, cpu.WrapF32(all[:1]), cpu.WrapF32(x), comm.Sum) },
				func() error { return hc.Barrier(ctx) },
			}
			dev := func(f func(v, w, u backend.Buffer) error) func() error {
				return func() error {
					var bufs []backend.Buffer
					defer func() {
						for _, x := range bufs {
							b.Free(x)
						}
					}()
					for _, n := range []int{2, 2 * k, 2} {
						x, err := b.Alloc(backend.Float32, n)
						if err != nil {
							return err
						}
						bufs = append(bufs, x)
					}
					if err := b.Upload(bufs[0], x); err != nil {
						return err
					}
					return f(bufs[0], bufs[1], bufs[2])
				}
			}
			ops = append(ops,
				dev(func(v, _, _ backend.Buffer) error { return dc.AllReduce(ctx, v, comm.Sum) }),
				dev(func(v, _, _ backend.Buffer) error { return dc.Broadcast(ctx, v, 1) }),
				dev(func(v, w, _ backend.Buffer) error { return dc.AllGather(ctx, w, v) }),
				dev(func(v, w, _ backend.Buffer) error { return dc.AllGatherV(ctx, w, v, []int{2, 2}) }),
				dev(func(v, _, u backend.Buffer) error { return dc.AllToAll(ctx, u, v) }),
				dev(func(v, _, u backend.Buffer) error { return dc.AllToAllV(ctx, u, []int{1, 1}, v, []int{1, 1}) }),
				dev(func(_, w, u backend.Buffer) error { return dc.ReduceScatter(ctx, u, w, comm.Sum) }),
				func() error { return dc.Barrier(ctx) },
			)
			for i, op := range ops {
				if err := op(); err != nil {
					return fmt.Errorf("collective %d: %w", i, err)
				}
				if s, _ := last.Load().(string); s != "" {
					return fmt.Errorf("collective %d: tracked %q after it returned", i, s)
				}
			}
			if x[0] != 3 || x[1] != 10 {
				return fmt.Errorf("all-reduce and broadcast gave %v", x)
			}
			if n := len(coord.Launched()); n != len(ops) {
				return fmt.Errorf("%d collectives launched, want %d", n, len(ops))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if hooks.Load() != 2*16 {
		t.Fatalf("%d hook calls, want %d", hooks.Load(), 2*16)
	}
}
