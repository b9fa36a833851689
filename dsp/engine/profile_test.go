package engine

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

// gemmProfiler is a CPU back end whose "profile" counts the Gemm calls
// queued while it is on.
type gemmProfiler struct {
	backend.Backend
	mu            sync.Mutex
	on            bool
	starts, gemms int
}

func (g *gemmProfiler) Gemm(ta, tb bool, m, n, k int, alpha float32, a, b backend.Buffer, beta float32, c backend.Buffer) error {
	g.mu.Lock()
	if g.on {
		g.gemms++
	}
	g.mu.Unlock()
	return g.Backend.Gemm(ta, tb, m, n, k, alpha, a, b, beta, c)
}

func (g *gemmProfiler) StartProfile() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.on, g.gemms = true, 0
	g.starts++
	return nil
}

func (g *gemmProfiler) StopProfile() ([]backend.OpTime, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.on = false
	return []backend.OpTime{{Name: "sgemm", Calls: int64(g.gemms), Ms: float64(g.gemms)}}, nil
}

func TestProfileEpoch(t *testing.T) {
	cfg := small(2, 3)
	cfg.ProfileEpoch = 2
	cfg.Sampler = SamplerFull // the wrapper hides the capabilities csp's CPU machine asserts
	cfg.Train.EvalEvery = cfg.Train.Epochs
	bs := cpus(t, 2)
	gp := []*gemmProfiler{{Backend: bs[0]}, {Backend: bs[1]}}
	var log bytes.Buffer
	rep := run(t, cfg, Options{Backends: []backend.Backend{gp[0], gp[1]}, Log: &log})
	nb := rep.DSP.BatchesPerDevice
	if len(rep.Run.OpProfiles) != 2 {
		t.Fatalf("%d op profiles, want one per device", len(rep.Run.OpProfiles))
	}
	for i, o := range rep.Run.OpProfiles {
		g := gp[o.Rank]
		if g.starts != 1 || o.Epoch != 2 || o.Steps != nb || o.Launches != int64(g.gemms) || g.gemms == 0 || g.gemms%nb != 0 {
			t.Fatalf("profile %d %+v: %d starts, %d gemms, %d batches an epoch", i, o, g.starts, g.gemms, nb)
		}
	}
	if !strings.Contains(log.String(), "op profile, device 0, epoch 2") || !strings.Contains(log.String(), "sgemm") {
		t.Fatalf("log lacks the op table: %q", log.String())
	}

	// A back end without a profiler is refused by name.
	_, err := Run(t.Context(), tiny(t), cfg, Options{Backends: cpus(t, 2)})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "profile_epoch" || !strings.Contains(err.Error(), "profiler") {
		t.Fatalf("err %v, want a profile_epoch config error", err)
	}
	cfg.ProfileEpoch = 4
	if _, err := Run(t.Context(), tiny(t), cfg, Options{Backends: bs}); !errors.As(err, &ce) || ce.Field != "profile_epoch" {
		t.Fatalf("epoch 4 of 3: err %v", err)
	}
}
