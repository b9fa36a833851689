package infer

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// board exchanges the round headers of a resident layer between the
// run's device workers, which are goroutines of this process: each posts
// its header and takes the others' from host memory. A header on the
// device communicator cost a download a round, which waited for the
// device's whole queue: the host could not queue round r+1 while the
// device ran round r.
//
// A worker posts round r+1 only after every worker posted round r, and
// reads round r before posting r+1, so two slots suffice.
type board struct {
	p     int
	mu    sync.Mutex
	slots [2]boardSlot
}

type boardSlot struct {
	round  int
	hdrs   [][]int64 // per device, its header (2 words per device)
	posted int
	full   chan struct{} // closed when every device posted
}

func newBoard(p int) *board {
	bd := &board{p: p}
	for i := range bd.slots {
		bd.slots[i] = boardSlot{round: i, hdrs: make([][]int64, p), full: make(chan struct{})}
	}
	return bd
}

// exchange posts device d's header of round (2 words per device) and
// returns, once every device posted its own, what each sent d (2 words
// per device). It waits at most timeout, then names the devices that did
// not post.
func (bd *board) exchange(ctx context.Context, d, round int, hdr []int64, timeout time.Duration, names func(int) string) ([]int64, error) {
	bd.mu.Lock()
	s := &bd.slots[round%2]
	if s.round != round {
		// The slot still holds round-2, which every device has read:
		// each read it before posting round-1, which completed before
		// any device could post this one.
		s.round, s.posted, s.full = round, 0, make(chan struct{})
		clear(s.hdrs)
	}
	s.hdrs[d] = hdr
	s.posted++
	full := s.full
	if s.posted == bd.p {
		close(full)
	}
	bd.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-full:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		bd.mu.Lock()
		var missing []string
		if s.round == round {
			for q, h := range s.hdrs {
				if h == nil {
					missing = append(missing, names(q))
				}
			}
		}
		bd.mu.Unlock()
		return nil, fmt.Errorf("exchange of the header of round %d: %v did not take part within %v", round+1, missing, timeout)
	}
	got := make([]int64, 2*bd.p)
	bd.mu.Lock() // the slot is not reset before this device posts round+1
	for q, h := range s.hdrs {
		got[2*q], got[2*q+1] = h[2*d], h[2*d+1]
	}
	bd.mu.Unlock()
	return got, nil
}
