package cuda

import (
	"slices"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
)

// OpTime is the device time spent in one kind of op while profiling.
type OpTime = backend.OpTime

var _ backend.Profiler = (*Device)(nil)

// profiler brackets every op the Device queues with two events while on.
// An op's time runs from its start event to its end event, so it is
// exact when the stream is busy and includes launch latency when the
// stream was idle. Callers hold the Device lock.
type profiler struct {
	on      bool
	marks   []profMark
	free    []cu.Event
	totals  map[string]*OpTime
	fnNames map[cu.Function]string // kernels launched through Locked
}

type profMark struct {
	name       string
	start, end cu.Event
}

// maxMarks bounds the events outstanding before they are read (which
// synchronizes).
const maxMarks = 1 << 14

func (p *profiler) event() (cu.Event, error) {
	if k := len(p.free); k > 0 {
		e := p.free[k-1]
		p.free = p.free[:k-1]
		return e, nil
	}
	return cu.EventCreate(cu.EventDefault)
}

// time queues fn between two events.
func (p *profiler) time(d *Device, name string, fn func() error) error {
	if len(p.marks) >= maxMarks {
		if err := p.collect(d); err != nil {
			return err
		}
	}
	s, err := p.event()
	if err != nil {
		return err
	}
	e, err := p.event()
	if err != nil {
		p.free = append(p.free, s)
		return err
	}
	if err := s.Record(d.stream); err != nil {
		p.free = append(p.free, s, e)
		return err
	}
	ferr := fn()
	if err := e.Record(d.stream); err != nil {
		p.free = append(p.free, s, e)
		return err
	}
	p.marks = append(p.marks, profMark{name: name, start: s, end: e})
	return ferr
}

// collect waits for the stream and adds the pending marks to the totals.
func (p *profiler) collect(d *Device) error {
	if err := d.stream.Synchronize(); err != nil {
		return err
	}
	if p.totals == nil {
		p.totals = map[string]*OpTime{}
	}
	var first error
	for _, m := range p.marks {
		ms, err := cu.ElapsedMs(m.start, m.end)
		if err != nil && first == nil {
			first = err
		}
		t := p.totals[m.name]
		if t == nil {
			t = &OpTime{Name: m.name}
			p.totals[m.name] = t
		}
		t.Calls++
		t.Ms += float64(ms)
		p.free = append(p.free, m.start, m.end)
	}
	p.marks = p.marks[:0]
	return first
}

// timed runs fn, bracketed by events when profiling.
func (d *Device) timed(name string, fn func() error) error {
	if !d.prof.on {
		return fn()
	}
	return d.prof.time(d, name, fn)
}

// StartProfile turns on per-op device timing: every kernel, cuBLAS call,
// memset and copy the Device queues (those of other packages' kernels
// launched through Do included) is bracketed by two events. It costs two
// event records per op on the host. Earlier totals are cleared.
func (d *Device) StartProfile() error {
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	if err := d.prof.collect(d); err != nil {
		return err
	}
	d.prof.totals = nil
	d.prof.on = true
	return nil
}

// StopProfile waits for queued work, turns timing off and returns the
// device time per op name since StartProfile, largest first.
func (d *Device) StopProfile() ([]OpTime, error) {
	leave, err := d.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	d.prof.on = false
	err = d.prof.collect(d)
	out := make([]OpTime, 0, len(d.prof.totals))
	for _, t := range d.prof.totals {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b OpTime) int {
		switch {
		case a.Ms > b.Ms:
			return -1
		case a.Ms < b.Ms:
			return 1
		}
		return 0
	})
	d.prof.totals = nil
	return out, err
}

// releaseProfiler destroys the profiler's events (stream idle).
func (p *profiler) release() error {
	var first error
	for _, m := range p.marks {
		p.free = append(p.free, m.start, m.end)
	}
	p.marks = nil
	for _, e := range p.free {
		if err := e.Destroy(); err != nil && first == nil {
			first = err
		}
	}
	p.free = nil
	return first
}

// fnName names a kernel launched through Locked for the profile.
func (d *Device) fnName(f cu.Function) string {
	if n, ok := d.prof.fnNames[f]; ok {
		return n
	}
	return "kernel"
}
