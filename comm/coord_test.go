package comm_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/tcp"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// TestCoordinator: three stages per rank issue collectives on one shared
// data communicator, concurrently and with different timing on every
// rank. The coordinator makes all ranks launch them in one order, so every
// collective matches (Debug mode would report a mismatch) and completes.
func TestCoordinator(t *testing.T) {
	groups := map[string]func(n int, o comm.Options) ([]comm.Comm, error){
		"inproc": inproc.New,
		"tcp":    func(n int, o comm.Options) ([]comm.Comm, error) { return tcp.NewLocal(n, tcp.Options{Options: o}) },
	}
	for name, mk := range groups {
		t.Run(name, func(t *testing.T) {
			const n, stages, rounds = 3, 3, 15
			o := comm.Options{Timeout: 20 * time.Second, Debug: true}
			data, err := mk(n, o)
			if err != nil {
				t.Fatal(err)
			}
			ctrl, err := mk(n, o)
			if err != nil {
				t.Fatal(err)
			}
			coords := make([]*comm.Coordinator, n)
			for r := range coords {
				coords[r] = comm.NewCoordinator(ctrl[r], comm.CoordOptions{Timeout: 10 * time.Second})
			}
			defer func() {
				for r := range coords {
					coords[r].Close()
					data[r].Close()
				}
			}()
			errs := make(chan error, n*stages)
			var wg sync.WaitGroup
			for r := 0; r < n; r++ {
				for s := 0; s < stages; s++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(r), uint64(s)))
						for i := 0; i < rounds; i++ {
							time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
							// Stage s's i-th collective: an all-reduce of
							// (s+1)*10 elements (sizes differ per stage, so
							// a wrong pairing is a mismatch).
							x := make([]int64, (s+1)*10)
							for k := range x {
								x[k] = int64(r*1000 + s*100 + i)
							}
							err := coords[r].Do(context.Background(), s, func(ctx context.Context) error {
								return data[r].AllReduce(ctx, cpu.WrapI64(x), comm.Sum)
							})
							if err != nil {
								errs <- fmt.Errorf("rank %d stage %d round %d: %w", r, s, i, err)
								return
							}
							want := int64(0)
							for q := 0; q < n; q++ {
								want += int64(q*1000 + s*100 + i)
							}
							if x[0] != want || x[len(x)-1] != want {
								errs <- fmt.Errorf("rank %d stage %d round %d: got %d, want %d", r, s, i, x[0], want)
								return
							}
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			order := coords[0].Launched()
			if len(order) != stages*rounds {
				t.Fatalf("launched %d collectives, want %d", len(order), stages*rounds)
			}
			for r := 1; r < n; r++ {
				if !slices.Equal(coords[r].Launched(), order) {
					t.Fatalf("rank %d launched in order %v, rank 0 in %v", r, coords[r].Launched(), order)
				}
			}
		})
	}
}

// TestCoordinatorDeadline: stage 1 never becomes ready on rank 2. Every
// rank's Do fails within its deadline instead of waiting forever.
func TestCoordinatorDeadline(t *testing.T) {
	const n = 3
	data, _ := inproc.New(n, comm.Options{Timeout: 5 * time.Second})
	ctrl, _ := inproc.New(n, comm.Options{Timeout: 5 * time.Second})
	coords := make([]*comm.Coordinator, n)
	for r := range coords {
		coords[r] = comm.NewCoordinator(ctrl[r], comm.CoordOptions{Timeout: 300 * time.Millisecond})
		defer coords[r].Close()
	}
	start := time.Now()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		if r == 2 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			errs[r] = coords[r].Do(ctx, 1, func(ctx context.Context) error { return data[r].Barrier(ctx) })
		}()
	}
	wg.Wait()
	for r := 0; r < 2; r++ {
		if !errors.Is(errs[r], comm.ErrCoordinator) {
			t.Errorf("rank %d: %v, want a coordinator error", r, errs[r])
		}
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %v", el)
	}
	// Rank 2's coordinator is broken too: its control communicator's peers
	// are gone.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := coords[2].Do(ctx, 0, func(context.Context) error { return nil }); err == nil {
		t.Error("rank 2's Do succeeded after the others failed")
	}
	if err := coords[0].Do(context.Background(), 99, nil); err == nil {
		t.Error("stage 99 accepted")
	}
}
