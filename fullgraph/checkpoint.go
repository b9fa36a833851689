package fullgraph

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

	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
	"github.com/strata-gnn/strata/train/checkpoint"
)

// Checkpoints. With Options.CheckpointDir, device 0 writes
// DIR/checkpoint.strata (package train/checkpoint's file: the parameters
// and optimizer buffers as train.StateTensors lays them out, and the
// metadata below) after every CheckpointEvery-th epoch, when the run is
// interrupted between epochs, and at the end. Every device holds the same
// parameters and optimizer state; dropout masks are a pure function of
// the seed and the epoch, the partition of its seed; nothing else carries
// from one epoch to the next without staleness (which Run refuses with
// checkpoints). So a run resumed on the same devices goes on exactly as
// if it had never stopped.

// if it had never stopped.
//
// A job of several processes (Options.World): device 0's file is the one
// copy of the replicated state, its metadata records the layout
// (devices per process), and the first device of every process writes
// that process's state beside it (DIR/process-P.json, world.RankState)
// at the same epochs; a resume needs DIR on every process, agrees on
// the checkpoint through the store and refuses another layout by name
// (see dsp/engine's checkpoints, which work the same way).

// checkpointFormat names the metadata layout of a full-graph checkpoint
// (2: the job's layout; 1, still read: one process).
const checkpointFormat = "strata-fullgraph/2"

// ckptFormat1 is the previous layout, read as a one-process job's.
const ckptFormat1 = "strata-fullgraph/1"

// ckptMeta is a checkpoint's metadata: the configuration, the data, the
// devices and their blocks, the epochs done, the optimizer, and the
// report so far.
type ckptMeta struct {
	Format        string              `json:"format"`
	StrataVersion string              `json:"strata_version"`
	Config        Config              `json:"config"`
	Dataset       train.DatasetID     `json:"dataset"`
	Devices       int                 `json:"devices"`
	Offsets       []int64             `json:"offsets"`
	Layout        []int               `json:"layout,omitempty"` // devices per process ([Devices] when absent)
	EpochsDone    int                 `json:"epochs_done"`
	Optimizer     string              `json:"optimizer"`
	OptimizerStep int                 `json:"optimizer_step"`
	Shapes        map[string][2]int   `json:"shapes"`
	History       []train.EpochRecord `json:"history"`
	EpochComm     []EpochComm         `json:"epoch_comm"`
	Comm          CommStats           `json:"comm"`
}

// saved is a checkpoint to resume from.
type saved struct {
	path   string
	meta   ckptMeta
	params []nn.NamedTensor
	opt    optim.State
}

// openCheckpoint prepares the checkpoint file of Options.CheckpointDir
// and, with Resume, reads the checkpoint to go on from (none: the run
// starts afresh). orig is the caller's dataset, whose fingerprint
// identifies the data.
func (s *session) openCheckpoint(ctx context.Context, orig *dataset.Dataset) error {
	var err error
	if s.ckpt, err = train.CheckpointPath(s.opts.CheckpointDir); err != nil || s.ckpt == "" {
		return err
	}
	// A run killed while writing leaves its temporary file behind (process
	// 0 writes; nobody does before every process is set up).
	if s.w.Process() == 0 {
		stale, _ := filepath.Glob(filepath.Join(s.opts.CheckpointDir, "."+train.CheckpointFile+".tmp-*"))
		for _, p := range stale {
			os.Remove(p)
		}
	}
	s.id = train.Identify(orig)
	f, err := checkpoint.ReadFile(s.ckpt)
	if errors.Is(err, fs.ErrNotExist) {
		if s.opts.Resume {
			s.logf("no checkpoint in %s: starting from the beginning", s.opts.CheckpointDir)
			return s.w.AgreeCheckpoint(ctx, 0, nil)
		}
		return nil
	}
	if err != nil {
		return &RunError{Op: "resume", Err: err}
	}
	if !s.opts.Resume {
		return &train.CheckpointError{Path: s.ckpt, Msg: "a checkpoint already exists: resume it (--resume) or use another directory"}
	}
	sv := &saved{path: s.ckpt}
	if msg := s.check(f.Meta, &sv.meta); msg != "" {
		return &train.CheckpointError{Path: s.ckpt, Msg: msg}
	}
	m := &sv.meta
	var bufs []nn.NamedTensor
	if sv.params, bufs, err = train.SplitState(f.Tensors, m.Shapes); err != nil {
		return &train.CheckpointError{Path: s.ckpt, Msg: err.Error()}
	}
	sv.opt = optim.State{Kind: m.Optimizer, Step: m.OptimizerStep, Buffers: bufs}
	if err := s.w.AgreeCheckpoint(ctx, m.EpochsDone, f.Meta); err != nil {
		return err
	}
	s.saved = sv
	s.rep.Epochs, s.rep.EpochComm = m.History, m.EpochComm
	s.opts.Keep.Resumed(m.History)
	s.rep.ResumedFrom = &train.Cursor{Epoch: m.EpochsDone}
	s.logf("resuming from %s at epoch %d", s.ckpt, m.EpochsDone+1)
	return nil
}

// check decodes a checkpoint's metadata into m and checks it against the
// run; the message says what does not match ("" if all does).
func (s *session) check(raw []byte, m *ckptMeta) string {
	// The format first: another trainer's metadata (package train's, or
	// dsp's) has other fields, which the strict decoding would report
	// instead.
	var head struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return fmt.Sprintf("metadata: %v", err)
	}
	if head.Format != checkpointFormat && head.Format != ckptFormat1 {
		return fmt.Sprintf("metadata format %q, this build's whole-graph trainer reads %q", head.Format, checkpointFormat)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		return fmt.Sprintf("metadata: %v", err)
	}
	if d := s.cfg.Diff(&m.Config); d != "" {
		return "written by a different configuration: " + d
	}
	if id := s.id; id != m.Dataset {
		return fmt.Sprintf("written for dataset %s (%d nodes, %d edges, fingerprint %s), not %s (%d nodes, %d edges, fingerprint %s)",
			m.Dataset.Name, m.Dataset.Nodes, m.Dataset.Edges, m.Dataset.Fingerprint, id.Name, id.Nodes, id.Edges, id.Fingerprint)
	}
	layout := m.Layout
	if layout == nil {
		layout = []int{m.Devices}
	}
	done := m.EpochsDone
	switch {
	case m.Devices == s.p && s.w.LayoutDiff(layout) != "":
		return "another layout: " + s.w.LayoutDiff(layout)
	case m.Devices != s.p:
		return fmt.Sprintf("written on %d devices, this run has %d (sums over devices differ in rounding)", m.Devices, s.p)
	case !slices.Equal(m.Offsets, s.pr.offsets):
		return fmt.Sprintf("the devices' blocks start at %v, this run's at %v", m.Offsets, s.pr.offsets)
	case done < 0 || done > s.cfg.Epochs:
		return fmt.Sprintf("%d epochs done, outside this run's %d", done, s.cfg.Epochs)
	case m.OptimizerStep != done:
		return fmt.Sprintf("optimizer step %d after %d epochs (one step an epoch)", m.OptimizerStep, done)
	case len(m.History) != done || len(m.EpochComm) != done:
		return fmt.Sprintf("%d epochs of history and %d of communication for %d epochs done", len(m.History), len(m.EpochComm), done)
	}
	for i, h := range m.History {
		if h.Epoch != i+1 || m.EpochComm[i].Epoch != i+1 {
			return fmt.Sprintf("history entry %d is epoch %d (communication: %d)", i, h.Epoch, m.EpochComm[i].Epoch)
		}
	}
	return ""
}

// load puts the resumed checkpoint's parameters and optimizer state on
// device rank's replica, and device 0's communication statistics.
func (s *session) load(rank int, r replica) error {
	sv := s.saved
	if sv == nil {
		return nil
	}
	b, params, opt := r.model()
	if err := nn.LoadParams(b, params, sv.params); err != nil {
		return &train.CheckpointError{Path: sv.path, Msg: err.Error()}
	}
	if err := opt.LoadState(sv.opt); err != nil {
		return &train.CheckpointError{Path: sv.path, Msg: err.Error()}
	}
	if rank == 0 {
		if st := r.comm(); len(st.Blocks) == len(sv.meta.Comm.Blocks) {
			*st = sv.meta.Comm
		}
	}
	if s.w.Multi() && rank == s.w.First() {
		h, err := paramsHash(b, params)
		if err != nil {
			return err
		}
		return s.w.CheckState(s.opts.CheckpointDir, sv.meta.EpochsDone, h)
	}
	return nil
}

// saveState writes the state file of device rank's process after done
// epochs (a job of several processes, checkpoints on: the process's
// first device writes it).
func (s *session) saveState(rank int, r replica, done int) error {
	if s.ckpt == "" || !s.w.Multi() || rank != s.w.First() {
		return nil
	}
	b, params, _ := r.model()
	h, err := paramsHash(b, params)
	if err == nil {
		err = s.w.WriteState(s.opts.CheckpointDir, done, h)
	}
	if err != nil {
		return &RunError{Rank: rank, Op: "checkpoint", Err: err}
	}
	return nil
}

// paramsHash hashes the parameters' values on b (world.ParamsHash).
func paramsHash(b backend.Backend, params []*nn.Param) (uint64, error) {
	vals := make([][]float32, len(params))
	for i, p := range params {
		vals[i] = make([]float32, p.Len())
		if err := b.Download(vals[i], p.Value); err != nil {
			return 0, err
		}
	}
	return world.ParamsHash(vals), nil
}

// save writes the state of device 0's replica r after done epochs, with
// the report so far; nothing without a checkpoint file.
func (s *session) save(r replica, done int) error {
	if s.ckpt == "" {
		return nil
	}
	if err := s.saveState(0, r, done); err != nil {
		return err
	}
	b, params, opt := r.model()
	m := ckptMeta{Format: checkpointFormat, StrataVersion: train.Version, Config: *s.cfg, Dataset: s.id, Devices: s.p,
		Offsets: s.pr.offsets, Layout: s.w.Layout(), EpochsDone: done, History: s.rep.Epochs, EpochComm: s.rep.EpochComm, Comm: *r.comm()}
	err := train.WriteCheckpoint(s.ckpt, b, params, opt, func(st optim.State, shapes map[string][2]int) any {
		m.Optimizer, m.OptimizerStep, m.Shapes = st.Kind, st.Step, shapes
		return &m
	})
	if err != nil {
		return &RunError{Op: "checkpoint", Err: err}
	}
	return nil
}

func (s *session) logf(format string, args ...any) {
	if s.opts.Log != nil {
		fmt.Fprintf(s.opts.Log, format+"\n", args...)
	}
}
