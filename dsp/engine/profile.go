package engine

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/strata-gnn/strata/tensor/backend"
)

// OpProfile is one device's trainer ops over the profiled epoch
// (Config.ProfileEpoch): device time and count per op, from the back
// end's Profiler.
type OpProfile struct {
	Rank  int `json:"rank"`
	Epoch int `json:"epoch"` // 1-based
	Steps int `json:"steps"`
	// WallSeconds runs from the epoch's first step to its last step's
	// end on the device; DeviceMs sums the ops' times (more than the
	// wall time's share only where the queue waited for the host:
	// backend.Profiler).
	WallSeconds float64          `json:"wall_seconds"`
	DeviceMs    float64          `json:"device_ms"`
	Launches    int64            `json:"launches"`
	Ops         []backend.OpTime `json:"ops"`
}

// profiler times the trainer's ops of one epoch on one device.
type profiler struct {
	epoch int // 0-based; -1: off
	p     backend.Profiler
	start time.Time
	on    bool
	out   *OpProfile
}

func newProfiler(b backend.Backend, epoch int) (*profiler, error) {
	if epoch <= 0 {
		return &profiler{epoch: -1}, nil
	}
	p, ok := b.(backend.Profiler)
	if !ok {
		return nil, &ConfigError{Field: "profile_epoch", Msg: fmt.Sprintf("%s has no op profiler (backend.Profiler: CUDA devices)", b.Name())}
	}
	return &profiler{epoch: epoch - 1, p: p}, nil
}

// before starts the profile at the profiled epoch's first step.
func (p *profiler) before(it *item) error {
	if p == nil || p.epoch != it.epoch || it.batch != 0 || p.on {
		return nil
	}
	if err := p.p.StartProfile(); err != nil {
		return fmt.Errorf("op profile: %w", err)
	}
	p.on, p.start = true, time.Now()
	return nil
}

// after ends it after the epoch's last step.
func (p *profiler) after(rank int, it *item) error {
	if p == nil || !p.on || !it.last {
		return nil
	}
	p.on = false
	ops, err := p.p.StopProfile()
	if err != nil {
		return fmt.Errorf("op profile: %w", err)
	}
	o := &OpProfile{Rank: rank, Epoch: it.epoch + 1, Steps: it.batch + 1, WallSeconds: time.Since(p.start).Seconds(), Ops: ops}
	for _, t := range ops {
		o.DeviceMs += t.Ms
		o.Launches += t.Calls
	}
	p.out = o
	return nil
}

// writeProfile prints o's ops, per step, largest first.
func writeProfile(w io.Writer, o *OpProfile, top int) {
	steps := float64(max(o.Steps, 1))
	var b strings.Builder
	fmt.Fprintf(&b, "op profile, device %d, epoch %d: %d steps, %.3f s wall (%.3f ms a step), ops %.3f ms a step, %.1f launches a step\n",
		o.Rank, o.Epoch, o.Steps, o.WallSeconds, 1e3*o.WallSeconds/steps, o.DeviceMs/steps, float64(o.Launches)/steps)
	fmt.Fprintf(&b, "  %-28s %10s %10s %7s\n", "op", "calls/step", "ms/step", "share")
	for i, t := range o.Ops {
		if i == top {
			var ms float64
			var calls int64
			for _, r := range o.Ops[i:] {
				ms, calls = ms+r.Ms, calls+r.Calls
			}
			fmt.Fprintf(&b, "  %-28s %10.1f %10.4f %6.1f%%\n", fmt.Sprintf("(%d more)", len(o.Ops)-i), float64(calls)/steps, ms/steps, 100*ms/max(o.DeviceMs, 1e-12))
			break
		}
		fmt.Fprintf(&b, "  %-28s %10.1f %10.4f %6.1f%%\n", t.Name, float64(t.Calls)/steps, t.Ms/steps, 100*t.Ms/max(o.DeviceMs, 1e-12))
	}
	io.WriteString(w, b.String())
}
