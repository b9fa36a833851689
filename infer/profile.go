package infer

import (
	"fmt"
	"strings"
	"time"

	"github.com/strata-gnn/strata/tensor/backend"
)

// The phases of a chunk whose host time LayerStats.Phases reports.
const (
	phaseBlock = iota
	phaseInput
	// phaseLockstep is a resident input's round header: the device
	// waits there for every other device to reach the round, split out
	// of input.
	phaseLockstep
	phaseForward
	phaseOutput
	// phaseFree is the chunk's device buffers freed after its output
	// (the tape, its input rows, its block).
	phaseFree
	numPhases
)

var phaseNames = [numPhases]string{"block", "input", "lockstep", "forward", "output", "free"}

// phaseClock adds the host time between its marks to a device's phases.
type phaseClock struct {
	acc  *[numPhases]time.Duration
	last time.Time
}

// clock starts the worker's phase clock (w.clk, which fetch marks too)
// and returns it.
func (w *worker) clock() *phaseClock {
	w.clk = phaseClock{acc: &w.r.phases[w.d], last: time.Now()}
	return &w.clk
}

// mark adds the time since the last mark to phase i.
func (c *phaseClock) mark(i int) {
	now := time.Now()
	c.acc[i] += now.Sub(c.last)
	c.last = now
}

// span is when a device's goroutine of a layer started, began its first
// chunk (or round), ended its last and returned: with the phases and
// the build wait it accounts for the device's whole part of the layer.
type span struct {
	start, first, last, end time.Time
}

// DeviceTime is where one device's part of a layer's wall time went
// (LayerStats.Devices), in seconds; the parts add up to the layer's
// Seconds less its SetupSeconds and FinishSeconds.
type DeviceTime struct {
	// Start: from the devices' start to its first chunk (scratch,
	// the builders' start).
	Start float64 `json:"start"`
	// Phases: its chunks' phases (LayerStats.Phases, this device's sum);
	// BuildWait: waiting for its chunks' blocks; Other: the rest of its
	// chunk loop, in no phase.
	Phases    float64 `json:"phases"`
	BuildWait float64 `json:"build_wait"`
	Other     float64 `json:"other"`
	// End: after its last chunk until its goroutine returned (the
	// builders' stop); Idle: from then until the last device returned.
	End  float64 `json:"end"`
	Idle float64 `json:"idle"`
}

// deviceTimes accounts for each device's part of the layer whose devices
// ran from r.devStart to r.devEnd.
func (r *run) deviceTimes() []DeviceTime {
	out := make([]DeviceTime, len(r.spans))
	for d, s := range r.spans {
		if s.start.IsZero() {
			continue
		}
		if s.end.IsZero() {
			s.end = r.devEnd
		}
		if s.first.IsZero() || s.last.IsZero() { // no chunk, no round
			s.first, s.last = s.end, s.end
		}
		var ph time.Duration
		for _, t := range r.phases[d] {
			ph += t
		}
		t := &out[d]
		t.Start = s.first.Sub(r.devStart).Seconds()
		t.Phases, t.BuildWait = ph.Seconds(), r.buildWait[d].Seconds()
		t.Other = (s.last.Sub(s.first) - ph - r.buildWait[d]).Seconds()
		t.End = s.end.Sub(s.last).Seconds()
		t.Idle = r.devEnd.Sub(s.end).Seconds()
	}
	return out
}

// startProfiles starts the op profiler of every distinct back end that
// has one (Options.ProfileOps), and reports whether any started.
func (r *run) startProfiles() bool {
	if !r.opts.ProfileOps {
		return false
	}
	started := false
	for d, b := range r.opts.Backends {
		if pr, ok := b.(backend.Profiler); ok && sameBackend(r.opts.Backends[:d], b) < 0 {
			started = pr.StartProfile() == nil || started
		}
	}
	return started
}

// stopProfiles stops them and returns each device's op times (nil for a
// device without a profiler or sharing an earlier device's back end).
func (r *run) stopProfiles() [][]backend.OpTime {
	ops := make([][]backend.OpTime, len(r.opts.Backends))
	for d, b := range r.opts.Backends {
		if pr, ok := b.(backend.Profiler); ok && sameBackend(r.opts.Backends[:d], b) < 0 {
			ops[d], _ = pr.StopProfile()
		}
	}
	return ops
}

// logProfile writes a layer's phases and each device's largest ops.
func (r *run) logProfile(st LayerStats) {
	var b strings.Builder
	fmt.Fprintf(&b, "inference layer %d host time (slowest device):", st.Layer)
	for _, name := range phaseNames {
		fmt.Fprintf(&b, " %s %.2f s", name, st.Phases[name])
	}
	fmt.Fprintln(r.opts.Log, b.String())
	// Where the wall time went: the layer's own setup and finish around
	// its devices, and each device's part, so that nothing is unaccounted.
	b.Reset()
	fmt.Fprintf(&b, "inference layer %d wall %.2f s: setup %.2f s (host output allocated in %.2f s), finish %.2f s; a device's start+phases+build wait+other+end+idle:",
		st.Layer, st.Seconds, st.SetupSeconds, st.AllocSeconds, st.FinishSeconds)
	for d, t := range st.Devices {
		if d > 0 {
			b.WriteByte(',')
		}
		name := r.opts.Backends[d].Name()
		for e, o := range r.opts.Backends {
			if e != d && o.Name() == name { // virtual devices: cpu#0, cpu#1
				name = fmt.Sprintf("%s#%d", name, d)
				break
			}
		}
		fmt.Fprintf(&b, " %s %.2f+%.2f+%.2f+%.2f+%.2f+%.2f", name, t.Start, t.Phases, t.BuildWait, t.Other, t.End, t.Idle)
	}
	fmt.Fprintln(r.opts.Log, b.String())
	for d, ops := range st.Ops {
		if len(ops) == 0 {
			continue
		}
		b.Reset()
		fmt.Fprintf(&b, "inference layer %d ops on %s:", st.Layer, r.opts.Backends[d].Name())
		for i, op := range ops[:min(len(ops), 10)] {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " %s %.1f ms (%d)", op.Name, op.Ms, op.Calls)
		}
		fmt.Fprintln(r.opts.Log, b.String())
	}
}
