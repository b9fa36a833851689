package engine

import (
	"math"
	"testing"

	"github.com/strata-gnn/strata/internal/testkit/gputest"
)

// TestGPULayerMatchesCPU: with the layer scheme on 1, 2 and 4 GPUs
// (csp.LayerSampler) every batch loss agrees with the same run on CPU
// back ends (the same protocol on csp's CPU machine), replacement or not, and
// the pipeline off and a split topology give the same numbers bit for
// bit.
func TestGPULayerMatchesCPU(t *testing.T) {
	for _, k := range []int{1, 2, 4} {
		visible := len(gputest.All(t))
		if visible < k {
			t.Logf("skipping %d GPUs: %d available", k, visible)
			continue
		}
		for _, replace := range []bool{false, true} {
			cfg := layerConfig(k, 2)
			cfg.Replace = replace
			want := run(t, cfg, Options{})
			got := run(t, cfg, Options{Backends: gpus(t, k)})
			wl, gl := losses(want), losses(got)
			if len(wl) != len(gl) || len(wl) == 0 {
				t.Fatalf("k=%d replace=%v: %d losses, want %d", k, replace, len(gl), len(wl))
			}
			worst := 0.0
			for i := range wl {
				worst = max(worst, math.Abs(gl[i]-wl[i])/math.Abs(wl[i]))
			}
			t.Logf("k=%d replace=%v: %d losses, largest relative difference to the CPU %.2e; test accuracy %.4f (CPU %.4f)",
				k, replace, len(wl), worst, got.TestAccuracy, want.TestAccuracy)
			if worst > 1e-3 {
				t.Fatalf("k=%d replace=%v: losses differ from the CPU run by up to %.2e relative", k, replace, worst)
			}
			if math.Abs(got.TestAccuracy-want.TestAccuracy) > 0.02 || !got.Run.ReplicasEqual {
				t.Fatalf("k=%d: test accuracy %.4f (CPU %.4f), replicas equal %v", k, got.TestAccuracy, want.TestAccuracy, got.Run.ReplicasEqual)
			}
			if replace || k != min(visible, 4) {
				continue
			}
			for name, f := range map[string]func(*Config){
				"pipeline off":   func(c *Config) { c.NoPipeline = true },
				"split topology": func(c *Config) { c.TopologyBytes = 11000 },
				"2 samplers":     func(c *Config) { c.SamplerWorkers = 2 },
			} {
				vc := cfg
				f(&vc)
				vl := losses(run(t, vc, Options{Backends: gpus(t, k)}))
				for i := range gl {
					if vl[i] != gl[i] {
						t.Fatalf("k=%d %s: batch %d loss %v, want %v", k, name, i, vl[i], gl[i])
					}
				}
			}
		}
	}
}
