package gpurun

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/runner"
	"github.com/strata-gnn/strata/tensor/backend"
)

// presampleShared is the part of a run the pre-sampling pass reads: cfg
// (normalized here) over the tiny dataset partitioned for cfg.Devices
// devices, on the back ends bs.
func presampleShared(t testing.TB, cfg Config, bs []backend.Backend) *shared {
	t.Helper()
	if err := cfg.normalize(); err != nil {
		t.Fatal(err)
	}
	pd, err := runner.Partition(context.Background(), tiny(t), &cfg.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &shared{cfg: cfg, opts: Options{Backends: bs}, pd: pd, in: pd.Dataset.InGraph()}
	if s.in == nil {
		t.Fatal("invalid graph")
	}
	return s
}

// TestPresampleOnHostForCPUs: with CPU back ends the pre-sampling pass
// runs on the host (runner.PresampleOrder), its time is reported, and the
// device pass refuses back ends that are not GPUs.
func TestPresampleOnHostForCPUs(t *testing.T) {
	cfg := small(2, 1)
	cfg.Hotness = cache.ByPreSampling
	var log bytes.Buffer
	rep := run(t, cfg, Options{Log: &log})
	if !strings.Contains(log.String(), "pre-sampling hotness on the host") || !(rep.Run.PresampleSeconds > 0) {
		t.Fatalf("pre-sampling %.3fs; log:\n%s", rep.Run.PresampleSeconds, log.String())
	}
	cfg.Hotness = cache.ByInDegree
	log.Reset()
	if rep := run(t, cfg, Options{Log: &log}); rep.Run.PresampleSeconds != 0 || strings.Contains(log.String(), "pre-sampling") {
		t.Fatalf("in-degree hotness: pre-sampling %.3fs; log:\n%s", rep.Run.PresampleSeconds, log.String())
	}
	cfg.Hotness = cache.ByPreSampling
	s := presampleShared(t, cfg, cpus(t, 2))
	want, err := runner.PresampleOrder(context.Background(), s.in, s.pd, &s.cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	got, sec, err := s.hotOrder(context.Background(), false)
	if err != nil || len(got) != len(want) || sec <= 0 {
		t.Fatalf("host pass: %d nodes in %.3fs, %v", len(got), sec, err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("host pass: position %d holds node %d, runner.PresampleOrder %d", i, got[i], want[i])
		}
	}
	if _, err := s.presampleOnDevices(context.Background()); err == nil || !strings.Contains(err.Error(), "not a CUDA device") {
		t.Fatalf("device pass on CPU back ends: %v", err)
	}
}
