package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
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
					if err := c.AllReduce(ctx, comm.F32(buf), comm.Sum); err != nil {
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
