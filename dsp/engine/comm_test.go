package engine

import (
	"errors"
	"math"
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/train"
)

// TestCommKindsSameLosses: every --comm kind CPU devices accept trains
// Cora on two devices to the losses of the default (in-process) run. The
// kinds that add gradients in rank order (shm, gpushm's host pipeline)
// give them bit for bit; so does tcp here, whose ring order is the same
// for two ranks (a sum of two terms commutes). With three devices (not in
// -short) tcp's ring adds in another order: its losses are checked
// within 1e-6, the rank-order kinds' still bit for bit.
func TestCommKindsSameLosses(t *testing.T) {
	ks := []int{2}
	if !testing.Short() {
		ks = append(ks, 3)
	}
	for _, k := range ks {
		cfg := small(k, 2)
		cfg.Train.Eval = train.Full
		want := runOn(t, cora(t), cfg, Options{})
		if want.DSP.Comm != comm.KindInproc || want.DSP.CommReason == "" {
			t.Fatalf("auto on CPU devices chose %q (%q), want inproc and why", want.DSP.Comm, want.DSP.CommReason)
		}
		for _, kind := range []string{comm.KindShm, comm.KindGPUShm, comm.KindTCP} {
			c := cfg
			c.Comm = kind
			got := runOn(t, cora(t), c, Options{})
			if got.DSP.Comm != kind || got.DSP.CommReason != "requested" {
				t.Fatalf("k=%d %s: the report says %q (%q)", k, kind, got.DSP.Comm, got.DSP.CommReason)
			}
			if kind != comm.KindTCP || k == 2 {
				sameEpochs(t, &got.Report, &want.Report)
				continue
			}
			g, w := losses(got), losses(want)
			if len(g) != len(w) || len(w) == 0 {
				t.Fatalf("k=%d tcp: %d losses, want %d", k, len(g), len(w))
			}
			for i := range w {
				if d := math.Abs(g[i] - w[i]); d > 1e-6 {
					t.Fatalf("k=%d tcp: batch loss %d = %v, want %v within 1e-6", k, i, g[i], w[i])
				}
			}
		}
	}
}

// TestCommKindErrors: an unknown kind, and NCCL on CPU devices, are
// configuration errors naming the field, before anything runs.
func TestCommKindErrors(t *testing.T) {
	for _, kind := range []string{"nccl", "host", "mpi"} {
		cfg := small(2, 1)
		cfg.Comm = kind
		_, err := Run(t.Context(), tiny(t), cfg, Options{Backends: cpus(t, 2)})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "comm" {
			t.Fatalf("--comm %s on CPU devices: %v, want a config error for comm", kind, err)
		}
	}
	one := small(1, 1)
	one.Comm = comm.KindShm
	if rep := run(t, one, Options{}); rep.DSP.Comm != "none" || rep.DSP.CommReason != "one device" {
		t.Fatalf("one device: %q (%q)", rep.DSP.Comm, rep.DSP.CommReason)
	}
}

// TestGPUCommKinds: on two GPUs every --comm kind (NCCL by default,
// gpushm, and shm and tcp staging the GPU buffers through host memory)
// trains to the losses of the CPU devices' run within the tolerance of
// TestGPUMatchesCPU, with the feature exchange on, and the report names
// the kind.
func TestGPUCommKinds(t *testing.T) {
	bs := gpus(t, 2)
	cfg := small(2, 2)
	cfg.CacheBytes = 300 * 16 * 4
	want := losses(run(t, cfg, Options{}))
	for _, kind := range []string{comm.KindAuto, comm.KindGPUShm, comm.KindShm, comm.KindTCP} {
		c := cfg
		c.Comm = kind
		got := run(t, c, Options{Backends: bs})
		wantKind := kind
		if kind == comm.KindAuto {
			wantKind = comm.KindNCCL
		}
		if got.DSP.Comm != wantKind {
			t.Fatalf("--comm %s: the report says %q, want %q", kind, got.DSP.Comm, wantKind)
		}
		gl := losses(got)
		if len(gl) != len(want) || len(want) == 0 {
			t.Fatalf("--comm %s: %d losses, want %d", kind, len(gl), len(want))
		}
		worst := 0.0
		for i := range want {
			worst = max(worst, math.Abs(gl[i]-want[i])/math.Abs(want[i]))
		}
		t.Logf("--comm %s (%s): largest relative difference to the CPU %.2e", kind, got.DSP.CommReason, worst)
		if worst > 1e-3 || !got.Run.ReplicasEqual || !got.Run.Exchange {
			t.Fatalf("--comm %s: losses differ from the CPU run by up to %.2e relative; replicas equal %v, exchange %v",
				kind, worst, got.Run.ReplicasEqual, got.Run.Exchange)
		}
	}
}
