package gpurun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/train"
	"github.com/strata-gnn/strata/train/checkpoint"
)

// Checkpoints. With Options.CheckpointDir, device 0 writes
// DIR/checkpoint.strata (package train/checkpoint's format: written to a
// temporary file, synced and renamed) after every epoch: the parameters
// and the optimizer state, which every device holds identically, the
// number of epochs done and the report's history so far. Options.Resume
// loads them on every device and goes on with the next epoch. Every
// random stream is a pure function of the seed, the epoch and the batch,
// so a resumed run produces the losses of an uninterrupted one.

// ckptFormat names the metadata layout of a device run's checkpoint.
const ckptFormat = "strata-dsp/1"

type ckptMeta struct {
	Format            string              `json:"format"`
	StrataVersion     string              `json:"strata_version"`
	Config            Config              `json:"config"`
	Dataset           train.DatasetID     `json:"dataset"`
	EpochsDone        int                 `json:"epochs_done"`
	BatchesPerDevice  int                 `json:"batches_per_device"`
	Optimizer         string              `json:"optimizer"`
	OptimizerStep     int                 `json:"optimizer_step"`
	Shapes            map[string][2]int   `json:"shapes"`
	History           []train.EpochRecord `json:"history"`
	EpochTrainSeconds []float64           `json:"epoch_train_seconds"`
	EpochLosses       []float64           `json:"epoch_losses"`
	EvalSeconds       []float64           `json:"eval_seconds"`
}

// resumed is what a run continues from.
type resumed struct {
	meta   ckptMeta
	params []nn.NamedTensor
	opt    optim.State
}

// CheckpointError reports a checkpoint that cannot be resumed by this run.
type CheckpointError struct {
	Path string
	Msg  string
}

func (e *CheckpointError) Error() string { return "dsp/gpurun: checkpoint " + e.Path + ": " + e.Msg }

func (s *shared) checkpointPath() string {
	return filepath.Join(s.opts.CheckpointDir, train.CheckpointFile)
}

// numbersDiff names the first setting of c that differs from o's and
// would change the run's numbers ("" if none). Caches, queues, samplers,
// streams and timeouts move work around without changing a number.
func numbersDiff(c, o *Config) string {
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

// restore reads the checkpoint when resuming, or makes sure none would be
// overwritten otherwise. nb is the number of batches per device and epoch.
func (s *shared) restore(orig *dataset.Dataset, nb int) (*resumed, error) {
	path := s.checkpointPath()
	// A run killed while writing leaves its temporary file behind.
	stale, _ := filepath.Glob(filepath.Join(s.opts.CheckpointDir, "."+train.CheckpointFile+".tmp-*"))
	for _, p := range stale {
		os.Remove(p)
	}
	f, err := checkpoint.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if s.opts.Resume && s.opts.Log != nil {
			fmt.Fprintf(s.opts.Log, "no checkpoint in %s: starting from the beginning\n", s.opts.CheckpointDir)
		}
		return nil, nil
	}
	if err != nil {
		return nil, &RunError{Op: "resume", Err: err}
	}
	if !s.opts.Resume {
		return nil, &CheckpointError{Path: path, Msg: "a checkpoint already exists: resume it (--resume) or use another directory"}
	}
	bad := func(format string, args ...any) (*resumed, error) {
		return nil, &CheckpointError{Path: path, Msg: fmt.Sprintf(format, args...)}
	}
	var m ckptMeta
	dec := json.NewDecoder(bytes.NewReader(f.Meta))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return bad("metadata: %v", err)
	}
	if m.Format != ckptFormat {
		return bad("metadata format %q, this build reads %q", m.Format, ckptFormat)
	}
	if d := numbersDiff(&s.cfg, &m.Config); d != "" {
		return bad("written by a different configuration: %s", d)
	}
	if id := s.datasetID(orig); id != m.Dataset {
		return bad("written for dataset %s (%d nodes, %d edges, fingerprint %s), not %s (%d nodes, %d edges, fingerprint %s)",
			m.Dataset.Name, m.Dataset.Nodes, m.Dataset.Edges, m.Dataset.Fingerprint, id.Name, id.Nodes, id.Edges, id.Fingerprint)
	}
	epochs := s.cfg.Train.Epochs
	switch {
	case m.EpochsDone < 1:
		return bad("%d epochs done", m.EpochsDone)
	case m.EpochsDone >= epochs:
		return bad("the checkpoint has done %d epochs, this run has %d: nothing to resume (raise --epochs to train longer)", m.EpochsDone, epochs)
	case m.BatchesPerDevice != nb:
		return bad("%d batches per device and epoch, this run has %d", m.BatchesPerDevice, nb)
	case m.OptimizerStep != m.EpochsDone*nb:
		return bad("optimizer step %d, want %d after %d epochs of %d batches", m.OptimizerStep, m.EpochsDone*nb, m.EpochsDone, nb)
	case len(m.EpochTrainSeconds) != m.EpochsDone || len(m.EpochLosses) != m.EpochsDone || len(m.EvalSeconds) != m.EpochsDone:
		return bad("per-epoch records for %d/%d/%d epochs, want %d", len(m.EpochTrainSeconds), len(m.EpochLosses), len(m.EvalSeconds), m.EpochsDone)
	}
	for i, h := range m.History {
		if h.Epoch < 1 || h.Epoch > m.EpochsDone || (i > 0 && h.Epoch <= m.History[i-1].Epoch) {
			return bad("history entry %d is epoch %d", i, h.Epoch)
		}
	}
	params, bufs, err := train.SplitState(f.Tensors, m.Shapes)
	if err != nil {
		return bad("%v", err)
	}
	r := &resumed{meta: m, params: params, opt: optim.State{Kind: m.Optimizer, Step: m.OptimizerStep, Buffers: bufs}}
	if s.opts.Log != nil {
		fmt.Fprintf(s.opts.Log, "resuming from %s after epoch %d\n", path, m.EpochsDone)
	}
	return r, nil
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
	if err := nn.LoadParams(d.b, d.model.Params(), r.params); err != nil {
		return &CheckpointError{Path: d.s.checkpointPath(), Msg: err.Error()}
	}
	if err := d.opt.LoadState(r.opt); err != nil {
		return &CheckpointError{Path: d.s.checkpointPath(), Msg: err.Error()}
	}
	return nil
}

// saveCheckpoint writes the state after done epochs (device 0, when
// checkpoints are on). The device's queued steps are complete: reading
// the parameters waits for them.
func (d *device) saveCheckpoint(done int) error {
	s := d.s
	if d.rank != 0 || s.opts.CheckpointDir == "" {
		return nil
	}
	params, err := nn.SaveParams(d.b, d.model.Params())
	if err != nil {
		return err
	}
	st, err := d.opt.State()
	if err != nil {
		return err
	}
	s.mu.Lock()
	m := ckptMeta{Format: ckptFormat, StrataVersion: train.Version, Config: s.cfg, Dataset: *s.dsID, EpochsDone: done,
		BatchesPerDevice: s.info.BatchesPerDevice, Optimizer: st.Kind, OptimizerStep: st.Step,
		History: slices.Clone(s.history), EpochTrainSeconds: slices.Clone(s.gpu.EpochTrainSeconds),
		EpochLosses: slices.Clone(s.gpu.EpochLosses), EvalSeconds: slices.Clone(s.gpu.EvalSeconds)}
	s.mu.Unlock()
	f := &checkpoint.File{}
	f.Tensors, m.Shapes = train.StateTensors(params, st.Buffers)
	if f.Meta, err = json.Marshal(&m); err != nil {
		return err
	}
	if err := checkpoint.WriteFile(s.checkpointPath(), f); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// resumeEpoch is the first epoch a run trains.
func (s *shared) resumeEpoch() int {
	if s.resumed == nil {
		return 0
	}
	return s.resumed.meta.EpochsDone
}
