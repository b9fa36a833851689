package fullgraph

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/train"
	"github.com/strata-gnn/strata/train/checkpoint"
)

// sameEpochs requires the same losses, bit for bit, and the same
// evaluations in every epoch of two runs.
func sameEpochs(t *testing.T, name string, got, want *Report) {
	t.Helper()
	if len(got.Epochs) != len(want.Epochs) {
		t.Fatalf("%s: %d epochs, want %d", name, len(got.Epochs), len(want.Epochs))
	}
	for i := range want.Epochs {
		g, w := got.Epochs[i], want.Epochs[i]
		g.Seconds, w.Seconds, g.EvalSeconds, w.EvalSeconds = 0, 0, 0, 0
		if math.Float64bits(g.Loss) != math.Float64bits(w.Loss) || !reflect.DeepEqual(g, w) {
			t.Fatalf("%s epoch %d:\n got %+v\nwant %+v", name, i+1, g, w)
		}
	}
	if got.TestAccuracy != want.TestAccuracy || got.SelectedEpoch != want.SelectedEpoch {
		t.Fatalf("%s: headline %v at epoch %d, want %v at %d", name, got.TestAccuracy, got.SelectedEpoch, want.TestAccuracy, want.SelectedEpoch)
	}
}

// TestCheckpointResumeIsExact: a run interrupted after some epochs (a
// checkpoint every 2 epochs and one at the interruption) and resumed
// gives the uninterrupted run's losses and evaluations bit for bit, on
// one device (SGD with momentum, evaluated every 2 epochs) and on two
// (Adam); a finished run resumes to its report without training, and one
// with more epochs goes on.
func TestCheckpointResumeIsExact(t *testing.T) {
	ds := cora(t)
	for _, tc := range []struct {
		name  string
		model string
		p     int
		edit  func(*Config)
	}{
		{"gcn sgd 1 device", GCN, 1, func(c *Config) { c.Optimizer, c.LR, c.Momentum, c.EvalEvery = "sgd", 0.2, 0.9, 2 }},
		{"sage 2 devices", SAGE, 2, func(c *Config) { c.Hidden = 16 }},
	} {
		cfg := Defaults(tc.model)
		cfg.Epochs = 7
		tc.edit(&cfg)
		want := run(t, ds, cfg, tc.p)

		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		opts := Options{Backends: devices(t, tc.p), CheckpointDir: dir, CheckpointEvery: 2,
			OnEpoch: func(r train.EpochRecord) {
				if r.Epoch == 5 {
					cancel()
				}
			}}
		if _, err := Run(ctx, ds, cfg, opts); !errors.Is(err, ErrInterrupted) || !errors.Is(err, train.ErrInterrupted) {
			t.Fatalf("%s: %v, want ErrInterrupted", tc.name, err)
		}
		opts.OnEpoch, opts.Resume = nil, true
		got, err := Run(context.Background(), ds, cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got.ResumedFrom == nil || *got.ResumedFrom != (train.Cursor{Epoch: 5}) {
			t.Fatalf("%s: resumed from %+v, want epoch 5", tc.name, got.ResumedFrom)
		}
		sameEpochs(t, tc.name+" resumed", got, want)
		if !reflect.DeepEqual(got.EpochComm, want.EpochComm) || got.Comm.Broadcasts != want.Comm.Broadcasts {
			t.Fatalf("%s: communication %+v after resuming, %+v uninterrupted", tc.name, got.Comm, want.Comm)
		}

		// Finished: the same report, nothing trained.
		again, err := Run(context.Background(), ds, cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		if *again.ResumedFrom != (train.Cursor{Epoch: 7}) {
			t.Fatalf("%s: resumed a finished run from %+v", tc.name, again.ResumedFrom)
		}
		sameEpochs(t, tc.name+" finished", again, want)

		// Longer: goes on as a longer run (whose epoch 7 was not the last,
		// so perhaps not evaluated).
		cfg.Epochs = 9
		longer, err := Run(context.Background(), ds, cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		ref := run(t, ds, cfg, tc.p)
		if len(longer.Epochs) != 9 {
			t.Fatalf("%s extended: %d epochs", tc.name, len(longer.Epochs))
		}
		for i, w := range ref.Epochs {
			g := longer.Epochs[i]
			if g.Loss != w.Loss || !g.EvalSkipped && !w.EvalSkipped && (g.TestAccuracy != w.TestAccuracy || g.ValLoss != w.ValLoss) {
				t.Fatalf("%s extended, epoch %d:\n got %+v\nwant %+v", tc.name, i+1, g, w)
			}
		}
	}
}

// TestCheckpointMisuse: an existing checkpoint is not overwritten without
// Resume; another configuration, device count or dataset, a corrupt file
// and staleness are refused, naming what differs.
func TestCheckpointMisuse(t *testing.T) {
	ds := cora(t)
	cfg := Defaults(GCN)
	cfg.Epochs = 2
	dir := t.TempDir()
	opts := Options{Backends: devices(t, 1), CheckpointDir: dir}
	if _, err := Run(context.Background(), ds, cfg, opts); err != nil {
		t.Fatal(err)
	}
	var ce *train.CheckpointError
	if _, err := Run(context.Background(), ds, cfg, opts); !errors.As(err, &ce) || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("overwrite: %v", err)
	}
	opts.Resume = true
	other := cfg
	other.Hidden = 32
	if _, err := Run(context.Background(), ds, other, opts); !errors.As(err, &ce) || !strings.Contains(err.Error(), "hidden is 32") {
		t.Fatalf("other config: %v", err)
	}
	two := opts
	two.Backends = devices(t, 2)
	if _, err := Run(context.Background(), ds, cfg, two); !errors.As(err, &ce) || !strings.Contains(err.Error(), "written on 1 devices, this run has 2") {
		t.Fatalf("other devices: %v", err)
	}
	changed := *ds
	changed.Labels = append([]int32(nil), ds.Labels...)
	changed.Labels[ds.Train[0]] = (changed.Labels[ds.Train[0]] + 1) % int32(ds.NumClasses)
	if _, err := Run(context.Background(), &changed, cfg, opts); !errors.As(err, &ce) || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("other data: %v", err)
	}
	stale := cfg
	stale.Staleness = DefaultStaleness()
	var cfe *ConfigError
	if _, err := Run(context.Background(), ds, stale, opts); !errors.As(err, &cfe) || cfe.Field != "staleness" {
		t.Fatalf("staleness: %v", err)
	}
	// The sampled trainer's checkpoint is another format.
	sdir := t.TempDir()
	tc := train.Defaults(SAGE)
	tc.Epochs, tc.Hidden = 1, 8
	if _, err := train.Run(context.Background(), ds, tc, train.Options{Backend: cpuBackend(t), CheckpointDir: sdir}); err != nil {
		t.Fatal(err)
	}
	sampled := opts
	sampled.CheckpointDir = sdir
	if _, err := Run(context.Background(), ds, cfg, sampled); !errors.As(err, &ce) || !strings.Contains(err.Error(), `metadata format "strata-train/1"`) {
		t.Fatalf("sampled trainer's checkpoint: %v", err)
	}
	path := filepath.Join(dir, train.CheckpointFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), ds, cfg, opts); !errors.Is(err, checkpoint.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("corrupt: %v", err)
	}
}
