//go:build linux

package gpushm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/internal/nap"
)

// idler backs off while a wait makes no progress and checks, while it
// does, the deadline, the abort word and the ranks it depends on.
type idler struct {
	t        *transport
	ctx      context.Context
	dl       time.Time
	seq      uint64
	last     time.Time // last progress
	lastLive time.Time
	who      int // rank waited for (-1: this rank's copies or reducers)
	what     string
	closing  bool // Close's own wait: do not fail because of closing
}

func (t *transport) newIdler(ctx context.Context, dl time.Time, seq uint64) *idler {
	return &idler{t: t, ctx: ctx, dl: dl, seq: seq, last: time.Now(), who: -1}
}

func (w *idler) progress() { w.last = time.Now() }

// spinFor is how long an idle wait polls without sleeping: long where
// cores are plentiful (a sleep delays the next copy), short on small
// machines. hardSpin: poll in a tight loop instead of yielding (a wait
// runs on a goroutine locked to its thread, for which Gosched costs two
// thread hand-offs).
var (
	spinFor = func() time.Duration {
		if runtime.NumCPU() >= 8 {
			return 500 * time.Microsecond
		}
		return 50 * time.Microsecond
	}()
	hardSpin = runtime.NumCPU() >= 8
)

// nap sleeps for about d: package nap's precise sleep (20 us naps last
// about 25 us), or time.Sleep with goSleep (Options.Idle IdleGoSleep: a
// sub-millisecond time.Sleep lasts about a millisecond when the Go
// runtime has nothing else to do, its timers then waiting in epoll_wait,
// which counts in milliseconds, so a wait that had stopped spinning
// noticed a finished copy up to a millisecond late).
func (w *idler) nap(d time.Duration) {
	var t0 time.Time
	if w.t.tr != nil {
		t0 = time.Now()
	}
	if w.t.goSleep {
		time.Sleep(d)
	} else {
		nap.Sleep(d)
	}
	if w.t.tr != nil {
		w.t.tr.nap(time.Since(t0))
	}
}

func (w *idler) idle() error {
	since := time.Since(w.last)
	switch {
	case since < spinFor:
		if !hardSpin {
			runtime.Gosched()
		}
		return nil
	case since < 20*time.Millisecond:
		w.nap(20 * time.Microsecond)
	default:
		w.nap(500 * time.Microsecond)
	}
	return w.check()
}

// check fails the wait on an abort, a Close, the deadline or a departed
// rank.
func (w *idler) check() error {
	t := w.t
	if err := t.checkAbort(); err != nil {
		return err
	}
	if t.closing.Load() && !w.closing {
		return comm.ErrClosed
	}
	what := "its own copies"
	if w.who >= 0 {
		what = fmt.Sprintf("rank %d (%s)", w.who, w.what)
	} else if w.what != "" {
		what = w.what
	}
	if err := w.ctx.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		return fmt.Errorf("%w: waiting for %s", err, what)
	}
	if !w.dl.IsZero() && time.Until(w.dl) <= 0 {
		return fmt.Errorf("waiting for %s: %w", what, context.DeadlineExceeded)
	}
	if time.Since(w.lastLive) > 100*time.Millisecond || w.who >= 0 && w.lastLive.IsZero() {
		w.lastLive = time.Now()
		for r := 0; r < t.n; r++ {
			if r != t.rank && t.gone(r, w.seq) {
				return &comm.PeerError{Ranks: []int{r}, Err: comm.ErrPeerLost,
					Msg: fmt.Sprintf("rank %d closed its communicator or exited (while this rank waited for %s)", r, what)}
			}
		}
	}
	return nil
}
