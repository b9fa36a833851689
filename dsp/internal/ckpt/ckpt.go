package ckpt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
	"github.com/strata-gnn/strata/train/checkpoint"
)

// Format names the metadata layout of a multi-device run's checkpoint.
const Format = "strata-dsp/1"

// Engines. Every checkpoint this build writes is the device engine's
// (package dsp/engine, the one engine; its checkpoints before it had a
// name for its engine have none). The host engine (dsp/runner, removed)
// summed in other orders: its checkpoints are refused.
const (
	Device = "device"
	Host   = "host"
)

// Meta is a checkpoint's metadata; C is the engine's configuration.
type Meta[C any] struct {
	Format        string `json:"format"`
	StrataVersion string `json:"strata_version"`
	// Engine wrote the checkpoint (Device; empty in the device engine's
	// checkpoints written before the host engine had any).
	Engine           string              `json:"engine,omitempty"`
	Config           C                   `json:"config"`
	Dataset          train.DatasetID     `json:"dataset"`
	EpochsDone       int                 `json:"epochs_done"`
	BatchesPerDevice int                 `json:"batches_per_device"`
	Optimizer        string              `json:"optimizer"`
	OptimizerStep    int                 `json:"optimizer_step"`
	Shapes           map[string][2]int   `json:"shapes"`
	History          []train.EpochRecord `json:"history"`
	// The per-epoch training times, mean losses and evaluation times
	// (the report's device_run).
	EpochTrainSeconds []float64 `json:"epoch_train_seconds,omitempty"`
	EpochLosses       []float64 `json:"epoch_losses,omitempty"`
	EvalSeconds       []float64 `json:"eval_seconds,omitempty"`
}

// Error reports a checkpoint that this run cannot resume, or would
// overwrite.
type Error struct {
	Path string
	Msg  string
}

func (e *Error) Error() string { return "dsp: checkpoint " + e.Path + ": " + e.Msg }

// Run is what a run expects of its checkpoint.
type Run[C any] struct {
	Dir    string    // the checkpoint directory (must exist)
	Resume bool      // continue from the checkpoint; otherwise refuse to overwrite one
	Log    io.Writer // "resuming from ..." and "no checkpoint ..." lines; nil: none
	Config C         // the run's (normalized) configuration
	// Diff names the first setting of run that differs from the
	// checkpoint's and would change the numbers ("" if none).
	Diff             func(run, ckpt *C) string
	Epochs           int // the run's schedule
	BatchesPerDevice int // per device and epoch
	Dataset          train.DatasetID
	// Check, when set, checks the engine's own records in a metadata that
	// passed the common checks (returns what is wrong, "" if nothing).
	Check func(*Meta[C]) string
	// Wrap turns a file that cannot be read into the engine's error
	// (nil: returned as is; a malformed file is a
	// *checkpoint.FormatError naming the file, the byte offset and the
	// defect).
	Wrap func(op string, err error) error
}

// Path is the checkpoint file.
func (r *Run[C]) Path() string { return filepath.Join(r.Dir, train.CheckpointFile) }

// State is a checkpoint to resume from.
type State[C any] struct {
	Path   string
	Meta   Meta[C]
	Params []nn.NamedTensor
	Opt    optim.State
}

// Open returns the checkpoint to resume from, or nil (none, or a run
// that does not resume and so starts from the beginning). A checkpoint
// that has done every epoch of the run is returned too: the run trains
// nothing and reports the checkpoint's history. It removes the
// temporary file a run killed while writing leaves behind. A checkpoint
// this run must not resume or overwrite is an *Error saying why.
func Open[C any](r *Run[C]) (*State[C], error) {
	path := r.Path()
	stale, _ := filepath.Glob(filepath.Join(r.Dir, "."+train.CheckpointFile+".tmp-*"))
	for _, p := range stale {
		os.Remove(p)
	}
	f, err := checkpoint.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if r.Resume && r.Log != nil {
			fmt.Fprintf(r.Log, "no checkpoint in %s: starting from the beginning\n", r.Dir)
		}
		return nil, nil
	}
	if err != nil {
		if r.Wrap != nil {
			err = r.Wrap("resume", err)
		}
		return nil, err
	}
	if engine(f.Meta) == Host {
		return nil, &Error{Path: path, Msg: "written by the host engine, which this build no longer has (one engine runs every device): " +
			"it cannot be resumed; remove it or use another directory and start again without --resume"}
	}
	if !r.Resume {
		return nil, &Error{Path: path, Msg: "a checkpoint already exists: resume it (--resume) or use another directory"}
	}
	m, msg := r.check(f.Meta)
	if msg != "" {
		return nil, &Error{Path: path, Msg: msg}
	}
	params, bufs, err := train.SplitState(f.Tensors, m.Shapes)
	if err != nil {
		return nil, &Error{Path: path, Msg: err.Error()}
	}
	st := &State[C]{Path: path, Meta: *m, Params: params, Opt: optim.State{Kind: m.Optimizer, Step: m.OptimizerStep, Buffers: bufs}}
	if r.Log != nil {
		if m.EpochsDone == r.Epochs {
			fmt.Fprintf(r.Log, "%s has done all %d epochs: nothing to train, its results follow (raise --epochs to train longer)\n", path, m.EpochsDone)
		} else {
			fmt.Fprintf(r.Log, "resuming from %s after epoch %d\n", path, m.EpochsDone)
		}
	}
	return st, nil
}

// engine is the engine named in raw metadata (Device when it names
// none; "" when it cannot be read).
func engine(raw []byte) string {
	var head struct {
		Engine *string `json:"engine"`
	}
	if json.Unmarshal(raw, &head) != nil {
		return ""
	}
	if head.Engine == nil || *head.Engine == "" {
		return Device
	}
	return *head.Engine
}

// check decodes the metadata and checks it against the run; the message
// says what does not match ("" if all does).
func (r *Run[C]) check(raw []byte) (*Meta[C], string) {
	// The format and the engine first: another format has other fields,
	// which the strict decoding below would report instead.
	var head struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Sprintf("metadata: %v", err)
	}
	if head.Format != Format {
		return nil, fmt.Sprintf("metadata format %q, this build reads %q", head.Format, Format)
	}
	if e := engine(raw); e != Device {
		return nil, fmt.Sprintf("written by engine %q, this build reads the device engine's", e)
	}
	var m Meta[C]
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Sprintf("metadata: %v", err)
	}
	if d := r.Diff(&r.Config, &m.Config); d != "" {
		return nil, "written by a different configuration: " + d
	}
	if id := r.Dataset; id != m.Dataset {
		return nil, fmt.Sprintf("written for dataset %s (%d nodes, %d edges, fingerprint %s), not %s (%d nodes, %d edges, fingerprint %s)",
			m.Dataset.Name, m.Dataset.Nodes, m.Dataset.Edges, m.Dataset.Fingerprint, id.Name, id.Nodes, id.Edges, id.Fingerprint)
	}
	nb := r.BatchesPerDevice
	switch {
	case m.EpochsDone < 1:
		return nil, fmt.Sprintf("%d epochs done", m.EpochsDone)
	case m.EpochsDone > r.Epochs:
		return nil, fmt.Sprintf("the checkpoint has done %d epochs, past this run's %d", m.EpochsDone, r.Epochs)
	case m.BatchesPerDevice != nb:
		return nil, fmt.Sprintf("%d batches per device and epoch, this run has %d", m.BatchesPerDevice, nb)
	case m.OptimizerStep != m.EpochsDone*nb:
		return nil, fmt.Sprintf("optimizer step %d, want %d after %d epochs of %d batches", m.OptimizerStep, m.EpochsDone*nb, m.EpochsDone, nb)
	}
	for i, h := range m.History {
		if h.Epoch < 1 || h.Epoch > m.EpochsDone || (i > 0 && h.Epoch <= m.History[i-1].Epoch) {
			return nil, fmt.Sprintf("history entry %d is epoch %d", i, h.Epoch)
		}
	}
	if r.Check != nil {
		if msg := r.Check(&m); msg != "" {
			return nil, msg
		}
	}
	return &m, ""
}

// Load puts the checkpoint's parameters and optimizer state on a device.
func (s *State[C]) Load(b backend.Backend, params []*nn.Param, opt optim.Optimizer) error {
	if err := nn.LoadParams(b, params, s.Params); err != nil {
		return &Error{Path: s.Path, Msg: err.Error()}
	}
	if err := opt.LoadState(s.Opt); err != nil {
		return &Error{Path: s.Path, Msg: err.Error()}
	}
	return nil
}

// Save writes the checkpoint to path atomically: m (whose Format,
// StrataVersion, Optimizer, OptimizerStep and Shapes it fills in) with
// the parameters and the optimizer state read from device b.
func Save[C any](path string, m *Meta[C], b backend.Backend, params []*nn.Param, opt optim.Optimizer) error {
	ps, err := nn.SaveParams(b, params)
	if err != nil {
		return err
	}
	st, err := opt.State()
	if err != nil {
		return err
	}
	m.Format, m.StrataVersion, m.Optimizer, m.OptimizerStep = Format, train.Version, st.Kind, st.Step
	f := &checkpoint.File{}
	f.Tensors, m.Shapes = train.StateTensors(ps, st.Buffers)
	if f.Meta, err = json.Marshal(m); err != nil {
		return err
	}
	return checkpoint.WriteFile(path, f)
}
