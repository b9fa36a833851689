package progress

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Phases times the phases of a long task, such as a training run's setup
// (open, verify, build, place), and shows each one while it runs: a phase
// that counts its work gets a bar with rate and ETA, the others a line
// saying how long they have run (on a pipe every five seconds from the
// fifth, so short phases print nothing). Phases may run concurrently and
// spans may be recorded from any goroutine. A nil *Phases does nothing.
type Phases struct {
	// Quiet times the phases without showing them.
	Quiet bool

	mu    sync.Mutex
	spans []Span
}

// Span is a finished phase: Device is the device it ran for, or -1 for
// a phase of the whole task.
type Span struct {
	Name    string
	Device  int
	Seconds float64
}

// Phase is a running phase (Phases.Begin).
type Phase struct {
	p     *Phases
	name  string
	start time.Time
	bar   *Bar
	stop  chan struct{}
	once  sync.Once
	took  time.Duration
}

// tick is how often a running phase refreshes its line: a bar draws only
// when told of progress, and a phase that counts nothing tells it of none.
var tick = time.Second

// Begin starts phase name; total > 0 is its work in units that Add
// counts (bytes, rows), shown with an ETA. End it with End.
func (p *Phases) Begin(name string, total int64) *Phase {
	ph := &Phase{p: p, name: name, start: time.Now()}
	if p == nil {
		return ph
	}
	if p.Quiet {
		return ph
	}
	if ph.bar = New(total, name); ph.bar != nil {
		ph.stop = make(chan struct{})
		go func() {
			t := time.NewTicker(tick)
			defer t.Stop()
			for {
				select {
				case <-ph.stop:
					return
				case <-t.C:
					ph.bar.Add(0)
				}
			}
		}()
	}
	return ph
}

// Add counts n more units of the phase's work done.
func (ph *Phase) Add(n int64) {
	if ph != nil {
		ph.bar.Add(n)
	}
}

// End finishes the phase, records its span and returns its duration;
// calling it again returns the same duration and records nothing.
func (ph *Phase) End() time.Duration {
	if ph == nil {
		return 0
	}
	ph.once.Do(func() {
		ph.took = time.Since(ph.start)
		if ph.stop != nil {
			close(ph.stop)
		}
		ph.bar.Finish()
		ph.p.Record(ph.name, -1, ph.took)
	})
	return ph.took
}

// Record adds a span timed elsewhere (device -1: the whole task's).
func (p *Phases) Record(name string, device int, d time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spans = append(p.spans, Span{Name: name, Device: device, Seconds: d.Seconds()})
}

// Spans returns the recorded spans in the order they were recorded.
func (p *Phases) Spans() []Span {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Span(nil), p.spans...)
}

// Summary lists the spans in one line, in the order they were recorded:
// "open 0.10s, verify 2.31s, placement 1.20s (devices 1.10s..1.20s)".
// Per-device spans of a name are folded into one entry placed where the
// first of them was recorded, unless the whole task has a span of that
// name (which then carries their range).
func (p *Phases) Summary() string {
	spans := p.Spans()
	type entry struct {
		name     string
		seconds  float64
		whole    bool
		min, max float64
		devices  int
	}
	var order []*entry
	byName := map[string]*entry{}
	for _, s := range spans {
		e := byName[s.Name]
		if e == nil {
			e = &entry{name: s.Name}
			byName[s.Name] = e
			order = append(order, e)
		}
		if s.Device < 0 {
			e.whole = true
			e.seconds += s.Seconds
			continue
		}
		if e.devices == 0 || s.Seconds < e.min {
			e.min = s.Seconds
		}
		e.max = max(e.max, s.Seconds)
		e.devices++
	}
	parts := make([]string, 0, len(order))
	for _, e := range order {
		s := e.name
		switch {
		case e.whole && e.devices > 0:
			s += fmt.Sprintf(" %.2fs (devices %.2fs..%.2fs)", e.seconds, e.min, e.max)
		case e.whole:
			s += fmt.Sprintf(" %.2fs", e.seconds)
		default:
			s += fmt.Sprintf(" %.2fs..%.2fs (%d devices)", e.min, e.max, e.devices)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}
