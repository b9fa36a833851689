package runner

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
// DIR/checkpoint.strata after every epoch, once it has evaluated it
// (package dsp/internal/ckpt, shared with the device engine: the
// parameters and optimizer state, the epochs done and the history).
// Options.Resume loads them on every device and goes on with the next
// epoch. Every random stream is a pure function of the seed, the epoch
// and the batch, and nothing else carries from one epoch to the next
// (the feature cache is fixed, the samplers keep no state), so a resumed
// run's losses and accuracies are an uninterrupted run's. The pipeline
// metrics count the work of this process only.

// CheckpointError reports a checkpoint that a run cannot resume, or would
// overwrite without Options.Resume (both engines return it).
type CheckpointError = ckpt.Error

// Diff names the first setting of c that differs from o's and would
// change a run's numbers ("" if none): the training configuration
// (train.Config.Diff: epochs may differ), the devices, partitioning,
// sampling scheme and rebalancing. Caches, hotness, queues, buckets,
// the coordinator and timeouts move work around without changing a
// number.
func (c *Config) Diff(o *Config) string {
	if d := c.Train.Diff(&o.Train); d != "" {
		return d
	}
	for _, f := range []struct {
		name string
		x, y any
	}{
		{"devices", c.Devices, o.Devices}, {"partition", c.Partition, o.Partition}, {"scheme", c.Scheme, o.Scheme},
		{"replace", c.Replace, o.Replace}, {"weighted", c.Weighted, o.Weighted}, {"rebalance", c.Rebalance, o.Rebalance},
	} {
		if f.x != f.y {
			return fmt.Sprintf("%s is %v, the checkpoint has %v", f.name, f.x, f.y)
		}
	}
	return ""
}

// openCheckpoints makes the checkpoint directory and loads the
// checkpoint to resume from, if any. orig is the caller's dataset (its
// fingerprint identifies the data).
func (s *shared) openCheckpoints(orig *dataset.Dataset) error {
	cfg := &s.cfg
	if err := os.MkdirAll(s.opts.CheckpointDir, 0o755); err != nil {
		return &RunError{Op: "checkpoint directory", Err: err}
	}
	// Before any training: a checkpoint that cannot be written would
	// otherwise fail after the first epoch.
	if err := atomicfile.Check(filepath.Join(s.opts.CheckpointDir, train.CheckpointFile)); err != nil {
		return &RunError{Op: "checkpoint directory", Err: err}
	}
	plan, err := assign(s.pd.ds.Train, s.pd.book, cfg.Train.BatchSize, cfg.Rebalance, cfg.Train.Seed, 0)
	if err != nil {
		return &RunError{Op: "batches", Err: err}
	}
	// The sampler sets these again every epoch; a run resumed with every
	// epoch done trains none.
	s.info.BatchesPerDevice, s.info.DroppedSeeds = len(plan.batches[0]), plan.dropped
	s.ckpt = &ckpt.Run[Config]{
		Dir: s.opts.CheckpointDir, Resume: s.opts.Resume, Log: s.opts.Log, Engine: ckpt.Host, Config: *cfg,
		Diff: func(run, c *Config) string { return run.Diff(c) }, Epochs: cfg.Train.Epochs,
		BatchesPerDevice: len(plan.batches[0]), Dataset: train.Identify(orig), Check: checkHistory,
		Wrap: func(op string, err error) error { return &RunError{Op: op, Err: err} },
	}
	if s.resumed, err = ckpt.Open(s.ckpt); err != nil || s.resumed == nil {
		return err
	}
	s.history = s.resumed.Meta.History
	return nil
}

// checkHistory checks a host run's history: every epoch done evaluated,
// with one loss per batch.
func checkHistory(m *ckpt.Meta[Config]) string {
	if len(m.History) != m.EpochsDone {
		return fmt.Sprintf("history of %d epochs for %d epochs done", len(m.History), m.EpochsDone)
	}
	for _, h := range m.History {
		if len(h.BatchLosses) != m.BatchesPerDevice {
			return fmt.Sprintf("epoch %d has %d batch losses, want %d", h.Epoch, len(h.BatchLosses), m.BatchesPerDevice)
		}
	}
	if len(m.EpochTrainSeconds)+len(m.EpochLosses)+len(m.EvalSeconds) != 0 {
		return "the device engine's per-epoch records in a host engine's checkpoint"
	}
	return ""
}

// firstEpoch is the first epoch this run trains.
func (s *shared) firstEpoch() int {
	if s.resumed == nil {
		return 0
	}
	return s.resumed.Meta.EpochsDone
}

// saveCheckpoint writes the state after done epochs (device 0, when
// checkpoints are on), after the epoch's evaluation is recorded.
func (d *device) saveCheckpoint(done int) error {
	s := d.s
	if d.rank != 0 || s.ckpt == nil {
		return nil
	}
	s.mu.Lock()
	m := ckpt.Meta[Config]{Engine: ckpt.Host, Config: s.cfg, Dataset: s.ckpt.Dataset, EpochsDone: done,
		BatchesPerDevice: s.ckpt.BatchesPerDevice, History: slices.Clone(s.history)}
	s.mu.Unlock()
	return ckpt.Save(s.ckpt.Path(), &m, d.b, d.model.Params(), d.opt)
}
