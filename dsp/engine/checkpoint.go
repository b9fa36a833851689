package engine

import (
	"bytes"
	"context"
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
// DIR/checkpoint.strata after every epoch, once it is evaluated, in
// package train/checkpoint's format (a temporary file, synced and
// renamed): the parameters and the optimizer state, which every device
// holds identically under BSP, the number of epochs done, the report's
// history so far and the per-epoch timings (metadata format
// CheckpointFormat). Options.Resume loads them on every device and goes
// on with the next epoch. Every random stream is a pure function of the
// seed, the epoch and the batch, and nothing else carries from one epoch
// to the next (the feature cache is fixed, the samplers keep no state),
// so a resumed run's losses and accuracies are an uninterrupted run's.
// The pipeline metrics count the work of this process only.
//
// A job of several processes (Options.World) checkpoints the same way:
// the state is replicated, so process 0's file is the one copy, and its
// metadata records the job's layout (devices per process); every
// process also writes DIR/process-P.json, its ranks' state (world.
// RankState: the epochs done and a hash of its replica). A resume needs
// DIR on every process (shared, or copied): every process loads the one
// copy, the processes check through the store that they loaded the same
// one (world.AgreeCheckpoint), and each checks its own state file
// against it (world.CheckState). A resume with another layout (world
// size, devices per process) is refused naming both.
//
// Before anything is loaded the checkpoint is checked against the run:
// the format, the engine that wrote it (the removed host engine's
// checkpoints are refused), every setting that changes the numbers (the
// first difference is named), the dataset's fingerprint, the schedule
// and the tensors' shapes. A run that does not resume never overwrites a
// checkpoint.

// CheckpointFormat names the metadata layout of a run's checkpoint
// (3: the job's layout, devices per process; 2, still read: the
// evaluation cadence is the training configuration's train.eval_every,
// and one process; layout 1 had the engine's own eval_every).
const CheckpointFormat = "strata-dsp/3"

// ckptFormat2 is the previous layout, read as a one-process job's.
const ckptFormat2 = "strata-dsp/2"

// The engines a checkpoint names. This engine writes "device" (the name
// of its GPU engine before the engines were merged; its checkpoints from
// before engines were named have none). The host engine (dsp/runner,
// removed) summed in other orders: its checkpoints are refused.
const (
	ckptEngine     = "device"
	ckptHostEngine = "host"
)

// ckptMeta is a checkpoint's metadata.
type ckptMeta struct {
	Format           string          `json:"format"`
	StrataVersion    string          `json:"strata_version"`
	Engine           string          `json:"engine,omitempty"`
	Config           Config          `json:"config"`
	Dataset          train.DatasetID `json:"dataset"`
	EpochsDone       int             `json:"epochs_done"`
	BatchesPerDevice int             `json:"batches_per_device"`
	// Layout is the job's devices per process ([Devices] when absent:
	// format 2).
	Layout        []int               `json:"layout,omitempty"`
	Optimizer     string              `json:"optimizer"`
	OptimizerStep int                 `json:"optimizer_step"`
	Shapes        map[string][2]int   `json:"shapes"`
	History       []train.EpochRecord `json:"history"`
	// The per-epoch training times, mean losses and evaluation times
	// (the report's device_run).
	EpochTrainSeconds []float64 `json:"epoch_train_seconds,omitempty"`
	EpochLosses       []float64 `json:"epoch_losses,omitempty"`
	EvalSeconds       []float64 `json:"eval_seconds,omitempty"`
}

// CheckpointError reports a checkpoint that a run cannot resume, or would
// overwrite without Options.Resume.
type CheckpointError struct {
	Path string
	Msg  string
}

func (e *CheckpointError) Error() string { return "dsp: checkpoint " + e.Path + ": " + e.Msg }

// resumeState is the checkpoint a run continues from.
type resumeState struct {
	path   string
	meta   ckptMeta
	params []nn.NamedTensor
	opt    optim.State
}

// openCheckpoints makes the checkpoint directory and loads the checkpoint
// to resume from, if any (a checkpoint that has done every epoch too: the
// run then trains nothing and reports its history). It removes the
// temporary file a run killed while writing leaves behind. orig is the
// caller's dataset (its fingerprint identifies the data).
func (s *shared) openCheckpoints(ctx context.Context, orig *dataset.Dataset) error {
	dir := s.opts.CheckpointDir
	var re *train.RunError
	path, err := train.CheckpointPath(dir) // checked before any training
	if errors.As(err, &re) {
		return &RunError{Op: re.Op, Err: re.Err}
	}
	s.ckptPath = path
	cfg := &s.cfg
	plan, err := assign(s.pd.ds.Train, s.pd.book, cfg.Train.BatchSize, cfg.Rebalance, cfg.Train.Seed, 0)
	if err != nil {
		return &RunError{Op: "batches", Err: err}
	}
	// The samplers set these again every epoch; a run resumed with every
	// epoch done trains none.
	s.info.BatchesPerDevice, s.info.DroppedSeeds = len(plan.batches[0]), plan.dropped
	s.dsID = train.Identify(orig)
	if s.w.Process() == 0 { // the one writer: nobody writes before every process is set up
		stale, _ := filepath.Glob(filepath.Join(dir, "."+train.CheckpointFile+".tmp-*"))
		for _, p := range stale {
			os.Remove(p)
		}
	}
	f, err := checkpoint.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if s.opts.Resume && s.opts.Log != nil {
			fmt.Fprintf(s.opts.Log, "no checkpoint in %s: starting from the beginning\n", dir)
		}
		if s.opts.Resume {
			return s.w.AgreeCheckpoint(ctx, 0, nil)
		}
		return nil
	}
	if err != nil {
		return &RunError{Op: "resume", Err: err} // a *checkpoint.FormatError naming the file, offset and defect
	}
	bad := func(msg string) error { return &CheckpointError{Path: path, Msg: msg} }
	if ckptEngineOf(f.Meta) == ckptHostEngine {
		return bad("written by the host engine, which this build no longer has (one engine runs every device): " +
			"it cannot be resumed; remove it or use another directory and start again without --resume")
	}
	if !s.opts.Resume {
		return bad("a checkpoint already exists: resume it (--resume) or use another directory")
	}
	m, msg := s.checkMeta(f.Meta, len(plan.batches[0]))
	if msg != "" {
		return bad(msg)
	}
	params, bufs, err := train.SplitState(f.Tensors, m.Shapes)
	if err != nil {
		return bad(err.Error())
	}
	if err := s.w.AgreeCheckpoint(ctx, m.EpochsDone, f.Meta); err != nil {
		return err
	}
	s.resumed = &resumeState{path: path, meta: *m, params: params, opt: optim.State{Kind: m.Optimizer, Step: m.OptimizerStep, Buffers: bufs}}
	if log := s.opts.Log; log != nil {
		if m.EpochsDone == cfg.Train.Epochs {
			fmt.Fprintf(log, "%s has done all %d epochs: nothing to train, its results follow (raise --epochs to train longer)\n", path, m.EpochsDone)
		} else {
			fmt.Fprintf(log, "resuming from %s after epoch %d\n", path, m.EpochsDone)
		}
	}
	s.history = m.History
	s.opts.Keep.Resumed(m.History)
	s.run.EpochTrainSeconds, s.run.EpochLosses, s.run.EvalSeconds = m.EpochTrainSeconds, m.EpochLosses, m.EvalSeconds
	return nil
}

// ckptEngineOf is the engine named in raw metadata (ckptEngine when it
// names none; "" when it cannot be read).
func ckptEngineOf(raw []byte) string {
	var head struct {
		Engine *string `json:"engine"`
	}
	if json.Unmarshal(raw, &head) != nil {
		return ""
	}
	if head.Engine == nil || *head.Engine == "" {
		return ckptEngine
	}
	return *head.Engine
}

// checkMeta decodes the metadata and checks it against the run (nb
// batches per device and epoch); the message says what does not match
// ("" if all does).
func (s *shared) checkMeta(raw []byte, nb int) (*ckptMeta, string) {
	// The format and the engine first: another format has other fields,
	// which the strict decoding below would report instead.
	var head struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Sprintf("metadata: %v", err)
	}
	if head.Format != CheckpointFormat && head.Format != ckptFormat2 {
		return nil, fmt.Sprintf("metadata format %q, this build reads %q", head.Format, CheckpointFormat)
	}
	if e := ckptEngineOf(raw); e != ckptEngine {
		return nil, fmt.Sprintf("written by engine %q, this build reads the device engine's", e)
	}
	var m ckptMeta
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Sprintf("metadata: %v", err)
	}
	if d := s.cfg.Diff(&m.Config); d != "" {
		return nil, "written by a different configuration: " + d
	}
	layout := m.Layout
	if layout == nil {
		layout = []int{m.Config.Devices}
	}
	if d := s.w.LayoutDiff(layout); d != "" {
		return nil, "another layout: " + d
	}
	if id := s.dsID; id != m.Dataset {
		return nil, fmt.Sprintf("written for dataset %s (%d nodes, %d edges, fingerprint %s), not %s (%d nodes, %d edges, fingerprint %s)",
			m.Dataset.Name, m.Dataset.Nodes, m.Dataset.Edges, m.Dataset.Fingerprint, id.Name, id.Nodes, id.Edges, id.Fingerprint)
	}
	done := m.EpochsDone
	switch {
	case done < 1:
		return nil, fmt.Sprintf("%d epochs done", done)
	case done > s.cfg.Train.Epochs:
		return nil, fmt.Sprintf("the checkpoint has done %d epochs, past this run's %d", done, s.cfg.Train.Epochs)
	case m.BatchesPerDevice != nb:
		return nil, fmt.Sprintf("%d batches per device and epoch, this run has %d", m.BatchesPerDevice, nb)
	case m.OptimizerStep != done*nb:
		return nil, fmt.Sprintf("optimizer step %d, want %d after %d epochs of %d batches", m.OptimizerStep, done*nb, done, nb)
	case len(m.EpochTrainSeconds) != done || len(m.EpochLosses) != done || len(m.EvalSeconds) != done:
		return nil, fmt.Sprintf("per-epoch records for %d/%d/%d epochs, want %d", len(m.EpochTrainSeconds), len(m.EpochLosses), len(m.EvalSeconds), done)
	}
	for i, h := range m.History {
		if h.Epoch < 1 || h.Epoch > done || (i > 0 && h.Epoch <= m.History[i-1].Epoch) {
			return nil, fmt.Sprintf("history entry %d is epoch %d", i, h.Epoch)
		}
	}
	return &m, ""
}

// firstEpoch is the first epoch this run trains.
func (s *shared) firstEpoch() int {
	if s.resumed == nil {
		return 0
	}
	return s.resumed.meta.EpochsDone
}

// loadResumed puts the resumed parameters and optimizer state on the
// device; the first device of a job's process checks its state file
// against them.
func (d *device) loadResumed() error {
	r, w := d.s.resumed, d.s.w
	if err := nn.LoadParams(d.b, d.model.Params(), r.params); err != nil {
		return &CheckpointError{Path: r.path, Msg: err.Error()}
	}
	if err := d.opt.LoadState(r.opt); err != nil {
		return &CheckpointError{Path: r.path, Msg: err.Error()}
	}
	if w.Multi() && d.rank == w.First() {
		h, err := paramsHash(d.b, d.model.Params())
		if err != nil {
			return err
		}
		return w.CheckState(d.s.opts.CheckpointDir, r.meta.EpochsDone, h)
	}
	return nil
}

// saveCheckpoint writes the state after done epochs (device 0, when
// checkpoints are on; in a job of several processes, the first device of
// each process writes its process's state file first). The device's
// queued steps are complete: reading the parameters waits for them.
func (d *device) saveCheckpoint(done int) error {
	s := d.s
	if s.opts.CheckpointDir == "" {
		return nil
	}
	if s.w.Multi() && d.rank == s.w.First() {
		h, err := paramsHash(d.b, d.model.Params())
		if err != nil {
			return err
		}
		if err := s.w.WriteState(s.opts.CheckpointDir, done, h); err != nil {
			return err
		}
	}
	if d.rank != 0 {
		return nil
	}
	s.mu.Lock()
	m := ckptMeta{Format: CheckpointFormat, StrataVersion: train.Version, Engine: ckptEngine, Config: s.cfg, Dataset: s.dsID,
		EpochsDone: done, BatchesPerDevice: s.info.BatchesPerDevice, Layout: s.w.Layout(), History: slices.Clone(s.history),
		EpochTrainSeconds: slices.Clone(s.run.EpochTrainSeconds), EpochLosses: slices.Clone(s.run.EpochLosses),
		EvalSeconds: slices.Clone(s.run.EvalSeconds)}
	s.mu.Unlock()
	return train.WriteCheckpoint(s.ckptPath, d.b, d.model.Params(), d.opt, func(st optim.State, shapes map[string][2]int) any {
		m.Optimizer, m.OptimizerStep, m.Shapes = st.Kind, st.Step, shapes
		return &m
	})
}
