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
	phaseForward
	phaseOutput
	numPhases
)

var phaseNames = [numPhases]string{"block", "input", "forward", "output"}

// phaseClock adds the host time between its marks to a device's phases.
type phaseClock struct {
	acc  *[numPhases]time.Duration
	last time.Time
}

func (w *worker) clock() phaseClock {
	return phaseClock{acc: &w.r.phases[w.d], last: time.Now()}
}

// mark adds the time since the last mark to phase i.
func (c *phaseClock) mark(i int) {
	now := time.Now()
	c.acc[i] += now.Sub(c.last)
	c.last = now
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
