package gpurun

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/strata-gnn/strata/dsp/internal/devbuf"
)

// tracker records what each stage of a device is doing, so that a failed
// or stalled run can say where every stage was.
type tracker struct {
	mu sync.Mutex
	st [numStages]struct {
		what, block string
		since, at   time.Time
	}
}

// set records what the stage works on now.
func (t *tracker) set(stage int, format string, args ...any) {
	if t == nil {
		return
	}
	t.mu.Lock()
	s := &t.st[stage]
	s.what, s.since, s.block = fmt.Sprintf(format, args...), time.Now(), ""
	t.mu.Unlock()
}

// blocked records what the stage waits for inside its work ("": nothing).
func (t *tracker) blocked(stage int, what string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	s := &t.st[stage]
	s.block, s.at = what, time.Now()
	t.mu.Unlock()
}

// dump writes every device's stage states to w.
func dump(w io.Writer, trk []tracker) {
	if w == nil {
		return
	}
	now := time.Now()
	for r := range trk {
		t := &trk[r]
		t.mu.Lock()
		for i, s := range t.st {
			if s.since.IsZero() {
				continue
			}
			line := fmt.Sprintf("  rank %d %s: %s for %v", r, stageNames[i], s.what, now.Sub(s.since).Round(time.Millisecond))
			if s.block != "" {
				line += fmt.Sprintf("; %s for %v", s.block, now.Sub(s.at).Round(time.Millisecond))
			}
			fmt.Fprintln(w, line)
		}
		t.mu.Unlock()
	}
}

// deferred frees batches once the trainer's stream has run the work
// queued before them (their blocks' copies): a ring of fences, so that a
// batch is freed two steps later, when its fence has long passed.
type deferred struct {
	fences [3]*devbuf.Fence
	items  [3][]func()
	next   int
}

// add marks the trainer's stream and queues frees to run after the mark.
func (q *deferred) add(frees ...func()) error {
	i := q.next
	q.next = (i + 1) % len(q.fences)
	if q.items[i] != nil {
		if err := q.fences[i].Wait(); err != nil {
			return err
		}
		runAll(q.items[i])
		q.items[i] = nil
	}
	if err := q.fences[i].Record(); err != nil {
		return err // leaked: the run fails anyway
	}
	q.items[i] = frees
	return nil
}

func runAll(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// drain waits for every mark and runs the frees.
func (q *deferred) drain() error {
	var first error
	for i, fs := range q.items {
		if fs == nil {
			continue
		}
		if err := q.fences[i].Wait(); err != nil && first == nil {
			first = err
		}
		runAll(fs)
		q.items[i] = nil
	}
	return first
}

func (q *deferred) close() {
	q.drain()
	for _, f := range q.fences {
		f.Close()
	}
}
