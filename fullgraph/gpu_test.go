package fullgraph

import (
	"context"
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/tensor/backend"
)

// The tests below need CUDA GPUs and skip without them (the GPU test run
// sets STRATA_CUDA_POISON=1, so a buffer read before it is written turns
// the run into NaNs).

// sameLosses compares two runs' per-epoch losses to a relative tolerance
// (the GPU sums in another order and with fused multiply-adds).
func sameLosses(t *testing.T, name string, got, want *Report, tol float64) {
	t.Helper()
	if len(got.Epochs) != len(want.Epochs) {
		t.Fatalf("%s: %d epochs, want %d", name, len(got.Epochs), len(want.Epochs))
	}
	for e := range want.Epochs {
		if d := relDiff(got.Epochs[e].Loss, want.Epochs[e].Loss); !(d <= tol) {
			t.Fatalf("%s epoch %d: loss %.9f, CPU %.9f (rel diff %.2g)", name, e+1, got.Epochs[e].Loss, want.Epochs[e].Loss, d)
		}
	}
	t.Logf("%s: losses within %.0e of the CPU's; test accuracy %.4f (CPU %.4f)", name, tol, got.LastTestAcc, want.LastTestAcc)
}

// TestGPUMatchesCPU: GCN, GraphSAGE and GAT on one GPU give the CPU's losses,
// and two ranks sharing the GPU with device communicators staged through
// an in-process group (the device path on CUDA buffers) give the CPU's
// two-device losses.
func TestGPUMatchesCPU(t *testing.T) {
	g := gpus(t, 1)[0]
	ds := cora(t)
	for _, model := range []string{GCN, SAGE, GAT} {
		cfg := Defaults(model)
		cfg.Epochs = 8
		sameLosses(t, model+" 1 GPU", runOn(t, ds, cfg, []backend.Backend{g}, nil), run(t, ds, cfg, 1), 1e-4)

		want := run(t, ds, cfg, 2)
		bs := []backend.Backend{g, g}
		sameLosses(t, model+" 2 ranks on 1 GPU, staged device comms", runOn(t, ds, cfg, bs, deviceComms(t, g, 2)), want, 1e-4)
	}
}

// TestGPUDeviceComms: on two GPUs, NCCL and the GPU shared-memory
// collectives give the CPU's two-device losses, exactly and with
// skip-broadcast (whose decisions may differ from the CPU's within the
// bounds, so only the exact runs are compared).
func TestGPUDeviceComms(t *testing.T) {
	bs := gpus(t, 2)
	ds := cora(t)
	cfg := Defaults(SAGE)
	cfg.Epochs = 8
	want := run(t, ds, cfg, 2)
	for _, kind := range []string{CommNCCL, CommGPUShm} {
		dcs, used, why, err := OpenDeviceComms(context.Background(), kind, bs, CommOptions{})
		if err != nil {
			t.Errorf("%s: %v", kind, err)
			continue
		}
		t.Logf("%s: %s", used, why)
		sameLosses(t, kind, runOn(t, ds, cfg, bs, dcs), want, 1e-4)
		st := cfg
		st.Staleness = DefaultStaleness()
		rep := runOn(t, ds, st, bs, dcs)
		checkBounds(t, rep, st.Staleness)
		t.Logf("%s skip-broadcast: %.1f%% of broadcast bytes avoided, test accuracy %.4f", kind, 100*rep.Comm.AvoidedFraction, rep.LastTestAcc)
		for _, c := range dcs {
			c.Close()
		}
	}
}

func runOn(t *testing.T, ds *dataset.Dataset, cfg Config, bs []backend.Backend, dcs []comm.Comm) *Report {
	t.Helper()
	rep, err := Run(context.Background(), ds, cfg, Options{Backends: bs, DeviceComms: dcs})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
