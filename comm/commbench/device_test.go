package commbench

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/comm/gpushm"
)

// TestRunDeviceOnCPU runs the device back ends with the CPU back end in
// place of GPUs: gpu-auto must pick gpushm (one host, no GPUs), gpu-tcp
// stages through TCP, and nccl fails cleanly without GPUs.
func TestRunDeviceOnCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Setenv(DeviceEnv, "cpu")
	// The ranks take gpushm's settings from the job, not from their
	// environment (which they inherit).
	t.Setenv(gpushm.EnvSlots, "3")
	gso := gpushm.Options{Slots: 4, Chunks: 2, Idle: gpushm.IdleGoSleep}
	cfg := Config{Backends: []string{"gpushm", "gpu-auto", "gpu-tcp", "nccl"}, MinBytes: 4 << 10, MaxBytes: 1 << 20, Budget: 1 << 20,
		MinIters: 1, MaxIters: 10, Repeats: 1, Self: []string{os.Args[0], "-test.run=^$"}, GPUShm: gso}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"gpushm": "gpushm", "gpu-auto": "gpushm", "gpu-tcp": "tcp"}
	for _, s := range rep.Series {
		if s.Backend == "nccl" {
			if !strings.Contains(s.Error, "GPU") {
				t.Errorf("nccl on CPU: error %q, want one saying it needs GPUs", s.Error)
			}
			continue
		}
		if s.Error != "" {
			t.Fatalf("%s: %s", s.Backend, s.Error)
		}
		if s.Chosen != want[s.Backend] || s.Reason == "" {
			t.Errorf("%s chose %q (%s), want %q", s.Backend, s.Chosen, s.Reason, want[s.Backend])
		}
		if got := s.GPUShm; (s.Chosen == "gpushm") != (got != nil) || got != nil && (got.Slots != 4 || got.Chunks != 2 || got.Idle != gpushm.IdleGoSleep) {
			t.Errorf("%s (%s): gpushm settings %+v, want %+v", s.Backend, s.Chosen, got, gso)
		}
		if len(s.Points) != 5 {
			t.Fatalf("%s: %d points", s.Backend, len(s.Points))
		}
		for i, p := range s.Points {
			if p.Bytes != int64(4<<10)<<(2*i) || p.Iters < 1 || p.Seconds <= 0 || p.BusBW <= 0 {
				t.Errorf("%s point %d: %+v", s.Backend, i, p)
			}
		}
	}
}

func TestDeviceKinds(t *testing.T) {
	for _, k := range []string{"nccl", "gpushm", "gpu-auto", "gpu-tcp"} {
		if !isDevice(k) {
			t.Errorf("%s is not a device kind", k)
		}
	}
	if isDevice("shm") || deviceKind("gpu-auto") != "auto" || deviceKind("gpu-tcp") != "tcp" || deviceKind("nccl") != "nccl" {
		t.Error("device kinds")
	}
	if err := (&Config{Backends: []string{"gpu-x"}}).defaults(); err == nil {
		t.Error("unknown back end accepted")
	}
	if err := (&Config{GPUShm: gpushm.Options{ChunkBytes: 1000}}).defaults(); err == nil || !strings.Contains(err.Error(), "ChunkBytes") {
		t.Errorf("gpushm ChunkBytes 1000: %v", err)
	}
}
