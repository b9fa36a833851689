package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/internal/ckpt"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/train"
)

// Checkpoints. With Options.CheckpointDir, device 0 writes
// DIR/checkpoint.strata after every epoch (package dsp/internal/ckpt:
// written to a temporary file, synced and renamed): the parameters and
// the optimizer state, which every device holds identically, the number
// of epochs done, the report's history so far and the per-epoch timings.
// Options.Resume loads them on every device and goes on with the next
// epoch. Every random stream is a pure function of the seed, the epoch
// and the batch, and nothing else carries from one epoch to the next
// (the feature cache is fixed, the samplers keep no state), so a resumed
// run's losses and accuracies are an uninterrupted run's. The pipeline
// metrics count the work of this process only.

// CheckpointError reports a checkpoint that a run cannot resume, or would
// overwrite without Options.Resume.
type CheckpointError = ckpt.Error

// openCheckpoints makes the checkpoint directory and loads the checkpoint
// to resume from, if any. orig is the caller's dataset (its fingerprint
// identifies the data).
func (s *shared) openCheckpoints(orig *dataset.Dataset) error {
	if err := os.MkdirAll(s.opts.CheckpointDir, 0o755); err != nil {
		return &RunError{Op: "checkpoint directory", Err: err}
	}
	// Before any training: a checkpoint that cannot be written would
	// otherwise fail after the first epoch.
	if err := atomicfile.Check(filepath.Join(s.opts.CheckpointDir, train.CheckpointFile)); err != nil {
		return &RunError{Op: "checkpoint directory", Err: err}
	}
	cfg := &s.cfg
	plan, err := assign(s.pd.ds.Train, s.pd.book, cfg.Train.BatchSize, cfg.Rebalance, cfg.Train.Seed, 0)
	if err != nil {
		return &RunError{Op: "batches", Err: err}
	}
	// The samplers set these again every epoch; a run resumed with every
	// epoch done trains none.
	s.info.BatchesPerDevice, s.info.DroppedSeeds = len(plan.batches[0]), plan.dropped
	s.ckpt = &ckpt.Run[Config]{
		Dir: s.opts.CheckpointDir, Resume: s.opts.Resume, Log: s.opts.Log, Config: *cfg,
		Diff: func(run, c *Config) string { return run.Diff(c) }, Epochs: cfg.Train.Epochs,
		BatchesPerDevice: len(plan.batches[0]), Dataset: train.Identify(orig),
		Check: func(m *ckpt.Meta[Config]) string {
			if len(m.EpochTrainSeconds) != m.EpochsDone || len(m.EpochLosses) != m.EpochsDone || len(m.EvalSeconds) != m.EpochsDone {
				return fmt.Sprintf("per-epoch records for %d/%d/%d epochs, want %d", len(m.EpochTrainSeconds), len(m.EpochLosses), len(m.EvalSeconds), m.EpochsDone)
			}
			return ""
		},
		Wrap: func(op string, err error) error { return &RunError{Op: op, Err: err} },
	}
	if s.resumed, err = ckpt.Open(s.ckpt); err != nil || s.resumed == nil {
		return err
	}
	m := &s.resumed.Meta
	s.history = m.History
	s.run.EpochTrainSeconds, s.run.EpochLosses, s.run.EvalSeconds = m.EpochTrainSeconds, m.EpochLosses, m.EvalSeconds
	return nil
}

// firstEpoch is the first epoch this run trains.
func (s *shared) firstEpoch() int {
	if s.resumed == nil {
		return 0
	}
	return s.resumed.Meta.EpochsDone
}

// saveCheckpoint writes the state after done epochs (device 0, when
// checkpoints are on). The device's queued steps are complete: reading
// the parameters waits for them.
func (d *device) saveCheckpoint(done int) error {
	s := d.s
	if d.rank != 0 || s.ckpt == nil {
		return nil
	}
	s.mu.Lock()
	m := ckpt.Meta[Config]{Engine: ckpt.Device, Config: s.cfg, Dataset: s.ckpt.Dataset, EpochsDone: done,
		BatchesPerDevice: s.ckpt.BatchesPerDevice, History: slices.Clone(s.history),
		EpochTrainSeconds: slices.Clone(s.run.EpochTrainSeconds), EpochLosses: slices.Clone(s.run.EpochLosses),
		EvalSeconds: slices.Clone(s.run.EvalSeconds)}
	s.mu.Unlock()
	return ckpt.Save(s.ckpt.Path(), &m, d.b, d.model.Params(), d.opt)
}
