package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/strata-gnn/strata/internal/rng"
)

// Hook is called by the stages at every step (point is the stage's name)
// and before every collective (point "comm/<stage>"). It is a test seam:
// production runs pass nil. A hook must return when ctx is done.
type Hook func(ctx context.Context, rank int, point string)

// RandomDelays returns a hook that sleeps a random duration in [0, max)
// at every call (a fraction of calls, about prob, sleeps; the rest return
// at once), drawn from a stream of seed so failures can be replayed.
func RandomDelays(seed uint64, max time.Duration, prob float64) Hook {
	var mu sync.Mutex
	st := rng.NewStream(seed)
	return func(ctx context.Context, rank int, point string) {
		mu.Lock()
		sleep := float64(st.Uniform01()) < prob
		d := time.Duration(st.Below(uint64(max) + 1))
		mu.Unlock()
		if !sleep || d == 0 {
			return
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}
