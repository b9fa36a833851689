package engine

import (
	"fmt"
	"sync"
	"time"
)

// tracker records what each stage of a device is doing, so that a failed
// run can say where every stage was and which stalled: a stage that has
// been working (not waiting for a queue, its turn or a collective) for a
// long time when the run fails is the likely culprit; the others wait on
// it.
type tracker struct {
	mu sync.Mutex
	st [numStages]struct {
		what, block string // block: what it waits for ("": working)
		since, at   time.Time
	}
}

// set records what the stage works on now; wait, what it waits for
// between its work items (a queue).
func (t *tracker) set(stage int, format string, args ...any)  { t.mark(stage, false, format, args...) }
func (t *tracker) wait(stage int, format string, args ...any) { t.mark(stage, true, format, args...) }

func (t *tracker) mark(stage int, waiting bool, format string, args ...any) {
	t.mu.Lock()
	s := &t.st[stage]
	s.what, s.since, s.at, s.block = fmt.Sprintf(format, args...), time.Now(), time.Now(), ""
	if waiting {
		s.block = s.what
	}
	t.mu.Unlock()
}

// blocked records what the stage waits for inside its work ("": nothing).
func (t *tracker) blocked(stage int, what string) {
	t.mu.Lock()
	s := &t.st[stage]
	s.block, s.at = what, time.Now()
	t.mu.Unlock()
}

// diagnose lists every device's stages that have started, and separately
// those that have been working for at least stall.
func diagnose(trk []tracker, stall time.Duration) (stalled, states []string) {
	now := time.Now()
	for r := range trk {
		t := &trk[r]
		t.mu.Lock()
		for i, s := range t.st {
			if s.since.IsZero() {
				continue
			}
			line := fmt.Sprintf("rank %d %s: %s for %v", r, stageNames[i], s.what, now.Sub(s.since).Round(time.Millisecond))
			if s.block != "" && s.block != s.what {
				line += fmt.Sprintf("; %s for %v", s.block, now.Sub(s.at).Round(time.Millisecond))
			}
			states = append(states, line)
			if s.block == "" && now.Sub(s.at) >= stall {
				stalled = append(stalled, line)
			}
		}
		t.mu.Unlock()
	}
	return stalled, states
}
