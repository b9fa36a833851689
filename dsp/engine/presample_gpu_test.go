package engine

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
)

// TestGPUPresampleMatchesHost: on 1 and 2 GPUs the pre-sampling pass on
// the devices ranks the nodes exactly as presampleOnHost does: node-wise with csp and with the full sampler, layer-wise
// with and without replacement, with the topology split between device
// and host memory, and with the histogram flushed every 2 batches.
func TestGPUPresampleMatchesHost(t *testing.T) {
	visible := len(gputest.All(t))
	defaultFlush := presampleFlushEvery
	t.Cleanup(func() { presampleFlushEvery = defaultFlush })
	for _, k := range []int{1, 2} {
		if visible < k {
			t.Logf("skipping %d GPUs: %d available", k, visible)
			continue
		}
		variants := []struct {
			name  string
			f     func(*Config)
			flush int // batches between histogram flushes (0: the default)
		}{
			{"csp", func(*Config) {}, 0},
			{"full sampler", func(c *Config) { c.Sampler = SamplerFull }, 0},
			{"layer", func(c *Config) { c.Scheme, c.Train.Fanouts = LayerWise, []int{300, 600} }, 0},
			{"layer with replacement", func(c *Config) { c.Scheme, c.Train.Fanouts, c.Replace = LayerWise, []int{300, 600}, true }, 0},
			// The whole tiny graph takes ~91 kB.
			{"split topology", func(c *Config) { c.TopologyBytes = 40000 }, 0},
			{"split topology, full sampler", func(c *Config) { c.TopologyBytes, c.Sampler = 40000, SamplerFull }, 0},
			{"flush every 2 batches", func(*Config) {}, 2},
		}
		for _, v := range variants {
			cfg := small(k, 1)
			cfg.Hotness = cache.ByPreSampling
			cfg.Train.BatchSize = 32 // several batches per device
			v.f(&cfg)
			presampleFlushEvery = defaultFlush
			if v.flush > 0 {
				presampleFlushEvery = v.flush
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			s := setupShared(t, cfg, gpus(t, k))
			want, err := s.presampleOnHost(ctx, runtime.GOMAXPROCS(0))
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			t0 := time.Now()
			got, err := s.presampleOnDevices(ctx)
			cancel()
			if err != nil {
				t.Fatalf("k=%d %s: %v", k, v.name, err)
			}
			if i := firstDifference(got, want); i >= 0 {
				t.Fatalf("k=%d %s: %d nodes ranked (want %d); they differ at position %d", k, v.name, len(got), len(want), i)
			}
			t.Logf("k=%d %s: %d batches per device, the host pass's order (%.3fs)", k, v.name,
				len(mustPlan(t, s).batches[0]), time.Since(t0).Seconds())
		}
	}
}

func mustPlan(t *testing.T, s *shared) *presamplePlan {
	t.Helper()
	p, err := newPresamplePlan(s.pd, &s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func firstDifference[T comparable](a, b []T) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestGPUPresampleRun: a run on GPUs with pre-sampling hotness ranks the
// nodes on the devices (its log and report say so) and caches what the
// same run on CPU back ends (the host pass) caches: the same hits on the
// same batches.
func TestGPUPresampleRun(t *testing.T) {
	k := min(len(gputest.All(t)), 2)
	cfg := small(k, 1)
	cfg.CacheBytes = 60 * 16 * 4
	cfg.Hotness = cache.ByPreSampling
	want := run(t, cfg, Options{})
	var log bytes.Buffer
	got := run(t, cfg, Options{Backends: gpus(t, k), Log: &log})
	if !strings.Contains(log.String(), fmt.Sprintf("pre-sampling hotness on %d GPUs", k)) || !(got.Run.PresampleSeconds > 0) {
		t.Fatalf("pre-sampling %.3fs; log:\n%s", got.Run.PresampleSeconds, log.String())
	}
	w, g := want.Metrics.Summary.Cache, got.Metrics.Summary.Cache
	if g.Requests != w.Requests || g.LocalHits != w.LocalHits || g.PeerHits != w.PeerHits || g.Misses == 0 {
		t.Fatalf("k=%d: GPU run's cache %+v, CPU run's %+v", k, g, w)
	}
	t.Logf("k=%d: pre-sampling on the GPUs %.3fs (CPU back ends, host pass: %.3fs); cache %+v", k, got.Run.PresampleSeconds, want.Run.PresampleSeconds, g)
	wl, gl := losses(want), losses(got)
	if len(wl) != len(gl) || len(wl) == 0 {
		t.Fatalf("k=%d: %d losses, CPU run %d", k, len(gl), len(wl))
	}
	for i := range wl {
		if d := math.Abs(gl[i]-wl[i]) / math.Abs(wl[i]); d > 1e-3 {
			t.Fatalf("k=%d batch %d: loss %v, CPU run %v", k, i, gl[i], wl[i])
		}
	}
}
