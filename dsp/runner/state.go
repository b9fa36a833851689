package runner

import (
	"fmt"
	"sync"
	"time"
)

// tracker records what each stage of a device is doing, so that a failed
// run can say which stage stalled: a stage that has been working (not
// waiting on a queue, a turn or a collective) for a long time when the
// run fails is the likely culprit; the others are waiting on it.
type tracker struct {
	mu sync.Mutex
	st [3]stageState
}

type stageState struct {
	work  string // what the stage is working on
	block string // what it is waiting for ("" = working)
	since time.Time
	done  bool
}

func (t *tracker) work(stage int, what string) {
	t.mu.Lock()
	t.st[stage] = stageState{work: what, since: time.Now()}
	t.mu.Unlock()
}

// block marks the stage waiting for what; "" means back to its work.
func (t *tracker) block(stage int, what string) {
	t.mu.Lock()
	s := &t.st[stage]
	s.block, s.since = what, time.Now()
	t.mu.Unlock()
}

func (t *tracker) finish(stage int) {
	t.mu.Lock()
	t.st[stage] = stageState{done: true, since: time.Now()}
	t.mu.Unlock()
}

// diagnose lists every device's unfinished stages, and separately those
// that have been working for at least stall.
func (s *shared) diagnose(stall time.Duration) (stalled, states []string) {
	now := time.Now()
	for r := range s.trk {
		t := &s.trk[r]
		t.mu.Lock()
		for i, st := range t.st {
			if st.done || st.since.IsZero() {
				continue
			}
			d := now.Sub(st.since).Round(time.Millisecond)
			if st.block != "" {
				line := fmt.Sprintf("rank %d %s: %s for %v", r, stageNames[i], st.block, d)
				if st.work != "" {
					line += " (" + st.work + ")"
				}
				states = append(states, line)
				continue
			}
			line := fmt.Sprintf("rank %d %s: %s for %v", r, stageNames[i], st.work, d)
			states = append(states, line)
			if now.Sub(st.since) >= stall {
				stalled = append(stalled, line)
			}
		}
		t.mu.Unlock()
	}
	return stalled, states
}
