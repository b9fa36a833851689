package gpurun

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/internal/ckpt"
	"github.com/strata-gnn/strata/dsp/runner"
	"github.com/strata-gnn/strata/train"
)

// Checkpoints. With Options.CheckpointDir, device 0 writes
// DIR/checkpoint.strata after every epoch (package dsp/internal/ckpt,
// shared with the host engine: written to a temporary file, synced and
// renamed): the parameters and the optimizer state, which every device
// holds identically, the number of epochs done, the report's history so
// far and the per-epoch timings. Options.Resume loads them on every
// device and goes on with the next epoch. Every random stream is a pure
// function of the seed, the epoch and the batch, so a resumed run
// produces the losses of an uninterrupted one.

type ckptMeta = ckpt.Meta[Config]

// resumed is what a run continues from.
type resumed struct {
	meta ckptMeta
	st   *ckpt.State[Config]
}

// CheckpointError reports a checkpoint that cannot be resumed by this run
// (the host engine's type).
type CheckpointError = runner.CheckpointError

func (s *shared) checkpointPath() string {
	return filepath.Join(s.opts.CheckpointDir, train.CheckpointFile)
}

// numbersDiff names the first setting of c that differs from o's and
// would change the run's numbers ("" if none): the host runner's
// (runner.Config.Diff). The device-side switches change no number.
func numbersDiff(c, o *Config) string { return c.Config.Diff(&o.Config) }

// restore reads the checkpoint when resuming, or makes sure none would be
// overwritten otherwise. nb is the number of batches per device and epoch.
func (s *shared) restore(orig *dataset.Dataset, nb int) (*resumed, error) {
	st, err := ckpt.Open(&ckpt.Run[Config]{
		Dir: s.opts.CheckpointDir, Resume: s.opts.Resume, Log: s.opts.Log, Engine: ckpt.Device, Config: s.cfg,
		Diff: numbersDiff, Epochs: s.cfg.Train.Epochs, BatchesPerDevice: nb, Dataset: s.datasetID(orig),
		Check: func(m *ckptMeta) string {
			if len(m.EpochTrainSeconds) != m.EpochsDone || len(m.EpochLosses) != m.EpochsDone || len(m.EvalSeconds) != m.EpochsDone {
				return fmt.Sprintf("per-epoch records for %d/%d/%d epochs, want %d", len(m.EpochTrainSeconds), len(m.EpochLosses), len(m.EvalSeconds), m.EpochsDone)
			}
			return ""
		},
		Wrap: func(op string, err error) error { return &RunError{Op: op, Err: err} },
	})
	if err != nil || st == nil {
		return nil, err
	}
	return &resumed{meta: st.Meta, st: st}, nil
}

// datasetID fingerprints the caller's dataset once per run.
func (s *shared) datasetID(orig *dataset.Dataset) train.DatasetID {
	if s.dsID == nil {
		id := train.Identify(orig)
		s.dsID = &id
	}
	return *s.dsID
}

// loadResumed puts the resumed parameters and optimizer state on the device.
func (d *device) loadResumed(r *resumed) error {
	return r.st.Load(d.b, d.model.Params(), d.opt)
}

// saveCheckpoint writes the state after done epochs (device 0, when
// checkpoints are on). The device's queued steps are complete: reading
// the parameters waits for them.
func (d *device) saveCheckpoint(done int) error {
	s := d.s
	if d.rank != 0 || s.opts.CheckpointDir == "" {
		return nil
	}
	s.mu.Lock()
	m := ckptMeta{Engine: ckpt.Device, Config: s.cfg, Dataset: *s.dsID, EpochsDone: done, BatchesPerDevice: s.info.BatchesPerDevice,
		History: slices.Clone(s.history), EpochTrainSeconds: slices.Clone(s.gpu.EpochTrainSeconds),
		EpochLosses: slices.Clone(s.gpu.EpochLosses), EvalSeconds: slices.Clone(s.gpu.EvalSeconds)}
	s.mu.Unlock()
	return ckpt.Save(s.checkpointPath(), &m, d.b, d.model.Params(), d.opt)
}

// resumeEpoch is the first epoch a run trains.
func (s *shared) resumeEpoch() int {
	if s.resumed == nil {
		return 0
	}
	return s.resumed.meta.EpochsDone
}
