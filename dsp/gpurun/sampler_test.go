package gpurun

import (
	"slices"
	"strings"
	"testing"
)

// TestCPUSamplesCollectively: on CPU back ends the default sampler is
// the collective one, node-wise and layer-wise (dsp/gpucsp on the CPU
// machine, the code GPUs run: its exchanges count as sampling bytes
// between the devices), and the full sampler (sample.NeighborSampler
// over the whole graph on every device) draws the same batches, hence
// the same losses, without exchanging anything.
func TestCPUSamplesCollectively(t *testing.T) {
	peer := func(r *Report) int64 { return r.Metrics.Summary.Bytes["sample"]["peer"] }
	cfg := small(2, 1)
	cfg.SamplerWorkers = 2
	got := run(t, cfg, Options{})
	if !strings.HasPrefix(got.Run.Sampler, "collective sampling") || peer(got) <= 0 {
		t.Fatalf("sampler %q, %d sampling bytes between devices: want collective sampling", got.Run.Sampler, peer(got))
	}
	full := cfg
	full.Sampler = SamplerFull
	want := run(t, full, Options{})
	if !strings.HasPrefix(want.Run.Sampler, "host") || peer(want) != 0 {
		t.Fatalf("full sampler %q, %d sampling bytes between devices", want.Run.Sampler, peer(want))
	}
	if !slices.Equal(losses(got), losses(want)) {
		t.Fatalf("collective sampling's losses %v differ from the full sampler's %v", losses(got), losses(want))
	}
	layer := run(t, layerConfig(2, 1), Options{})
	if !strings.HasPrefix(layer.Run.Sampler, "collective layer-wise sampling") || peer(layer) <= 0 {
		t.Fatalf("layer-wise sampler %q, %d sampling bytes between devices", layer.Run.Sampler, peer(layer))
	}
}
