package infer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBoardRounds: three workers at their own pace over many rounds
// each get, every round, exactly what every worker addressed to them.
func TestBoardRounds(t *testing.T) {
	const p, rounds = 3, 200
	bd := newBoard(p)
	name := func(q int) string { return fmt.Sprint("dev", q) }
	var wg sync.WaitGroup
	errs := make([]error, p)
	for d := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				if (r+d)%7 == 0 {
					time.Sleep(time.Duration(d) * 100 * time.Microsecond)
				}
				hdr := make([]int64, 2*p)
				for q := range p {
					hdr[2*q], hdr[2*q+1] = int64(r), int64(100*d+q)
				}
				got, err := bd.exchange(context.Background(), d, r, hdr, time.Minute, name)
				if err != nil {
					errs[d] = err
					return
				}
				for q := range p {
					if got[2*q] != int64(r) || got[2*q+1] != int64(100*q+d) {
						errs[d] = fmt.Errorf("device %d round %d: from %d got %d, %d", d, r, q, got[2*q], got[2*q+1])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestBoardMissing: a worker that never posts is named after the
// timeout; a cancelled context ends the wait at once.
func TestBoardMissing(t *testing.T) {
	bd := newBoard(3)
	name := func(q int) string { return fmt.Sprint("dev", q) }
	go bd.exchange(context.Background(), 0, 0, make([]int64, 6), time.Minute, name)
	_, err := bd.exchange(context.Background(), 2, 0, make([]int64, 6), 20*time.Millisecond, name)
	if err == nil || !strings.Contains(err.Error(), "[dev1] did not take part") {
		t.Fatalf("got %v, want dev1 named", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	bd = newBoard(2)
	if _, err := bd.exchange(ctx, 0, 0, make([]int64, 4), time.Minute, name); err != context.Canceled {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}
