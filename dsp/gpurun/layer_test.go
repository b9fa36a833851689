package gpurun

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dsp/runner"
)

// layerConfig is small with the layer-wise scheme: Fanouts are edges per
// layer.
func layerConfig(k, epochs int) Config {
	cfg := small(k, epochs)
	cfg.Scheme = runner.LayerWise
	cfg.Train.Fanouts = []int{300, 600}
	cfg.CacheBytes = 300 * 16 * 4
	return cfg
}

// TestLayerMatchesHostRunner: with the layer scheme on CPU back ends the
// device run samples collectively (gpucsp.LayerSampler on the CPU
// machine), csp.LayerSampler's batches, which are the host runner's
// collective ones: every batch loss agrees
// (up to the loss's summation order, as node-wise) and so do the
// accuracies; the losses differ from node-wise sampling with the same
// fanouts (the scheme is used).
func TestLayerMatchesHostRunner(t *testing.T) {
	ks := []int{1, 2, 3}
	if testing.Short() {
		ks = []int{2}
	}
	for _, k := range ks {
		for _, replace := range []bool{false, true} {
			cfg := layerConfig(k, 2)
			cfg.Replace = replace
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			want, err := runner.Run(ctx, tiny(t), cfg.Config, runner.Options{})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			got := run(t, cfg, Options{})
			wl, gl := trainLosses(&want.Report), losses(got)
			if len(wl) != len(gl) || len(wl) == 0 {
				t.Fatalf("k=%d replace=%v: %d losses, want %d", k, replace, len(gl), len(wl))
			}
			for i := range wl {
				if d := math.Abs(gl[i]-wl[i]) / math.Abs(wl[i]); d > 1e-4 {
					t.Fatalf("k=%d replace=%v batch %d: loss %v, host runner %v", k, replace, i, gl[i], wl[i])
				}
			}
			if math.Abs(got.TestAccuracy-want.TestAccuracy) > 0.01 || math.Abs(got.ValAccuracy-want.ValAccuracy) > 0.01 {
				t.Fatalf("k=%d replace=%v: val/test %.4f/%.4f, host runner %.4f/%.4f", k, replace, got.ValAccuracy, got.TestAccuracy, want.ValAccuracy, want.TestAccuracy)
			}
			if !got.Run.ReplicasEqual || got.DSP.BatchesPerDevice != want.DSP.BatchesPerDevice || got.DSP.Scheme != runner.LayerWise {
				t.Fatalf("k=%d: replicas equal %v, %d batches per device (host %d), scheme %q", k, got.Run.ReplicasEqual,
					got.DSP.BatchesPerDevice, want.DSP.BatchesPerDevice, got.DSP.Scheme)
			}
			if k == 2 && !replace {
				node := cfg
				node.Scheme = runner.NodeWise
				if nl := losses(run(t, node, Options{})); slices.Equal(nl, gl) {
					t.Fatalf("node-wise sampling with fanouts %v gives the layer-wise losses", cfg.Train.Fanouts)
				}
			}
		}
	}
}

// TestLayerConfigErrors: the layer scheme refuses the full sampler
// (node-wise over the whole graph).
func TestLayerConfigErrors(t *testing.T) {
	for name, f := range map[string]func(*Config){
		"full sampler": func(c *Config) { c.Sampler = SamplerFull },
	} {
		cfg := layerConfig(2, 1)
		f(&cfg)
		_, err := Run(context.Background(), tiny(t), cfg, Options{Backends: cpus(t, 2)})
		var ce *runner.ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("%s: %v, want a config error", name, err)
		}
	}
}
