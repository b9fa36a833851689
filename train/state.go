package train

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train/checkpoint"
)

// checkpointFormat names the metadata layout inside a checkpoint file.
const checkpointFormat = "strata-train/1"

// ckptMeta is the JSON metadata of a training checkpoint. Together with
// the tensors "param/<name>" (model parameters) and "optim/<kind>/<name>"
// (optimizer buffers, e.g. Adam's m and v) it is the complete state of a
// run: every random stream is a pure function of Config.Seed and the
// cursor, so {seed, cursor} is the whole random-number state.
type ckptMeta struct {
	Format        string            `json:"format"`
	StrataVersion string            `json:"strata_version"`
	Config        Config            `json:"config"`
	Dataset       DatasetID         `json:"dataset"`
	RNG           rngState          `json:"rng"`
	Cursor        Cursor            `json:"cursor"`
	NumBatches    int               `json:"num_batches"`
	Optimizer     string            `json:"optimizer"`
	OptimizerStep int               `json:"optimizer_step"`
	Shapes        map[string][2]int `json:"shapes"`
	Partial       PartialEpoch      `json:"partial"`
	History       []EpochRecord     `json:"history"`
}

// rngState records the random-number state: the seed, and the counters
// every stream is derived from (the cursor's epoch and batch).
type rngState struct {
	Seed  uint64 `json:"seed"`
	Epoch int    `json:"epoch"`
	Batch int    `json:"batch"`
}

// DatasetID identifies the data a run trains on, so a checkpoint is not
// resumed on other data.
type DatasetID struct {
	Name        string `json:"name"`
	Nodes       int64  `json:"nodes"`
	Edges       int64  `json:"edges"`
	Features    int    `json:"features"`
	Classes     int    `json:"classes"`
	Fingerprint string `json:"fingerprint"` // CRC-32C of structure, features, labels and splits
}

// Identify fingerprints ds (structure, features, labels and splits) for
// checkpoints.
func Identify(ds *dataset.Dataset) DatasetID {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	buf := make([]byte, 0, 1<<16)
	flush := func() { h.Write(buf); buf = buf[:0] }
	put32 := func(v uint32) {
		if len(buf)+4 > cap(buf) {
			flush()
		}
		buf = binary.LittleEndian.AppendUint32(buf, v)
	}
	for _, v := range ds.Graph.Indptr {
		put32(uint32(v))
		put32(uint32(v >> 32))
	}
	for _, v := range ds.Graph.Indices {
		put32(uint32(v))
	}
	for _, v := range ds.Features {
		put32(math.Float32bits(v))
	}
	for _, s := range [][]int32{ds.Labels, ds.Train, ds.Val, ds.Test} {
		put32(uint32(len(s)))
		for _, v := range s {
			put32(uint32(v))
		}
	}
	flush()
	return DatasetID{
		Name: ds.Name, Nodes: ds.NumNodes(), Edges: ds.Graph.NumEdges(), Features: ds.FeatDim,
		Classes: ds.NumClasses, Fingerprint: fmt.Sprintf("%08x", h.Sum32()),
	}
}

// datasetID identifies the run's dataset, computed once (hashing the
// features of a large graph takes a moment).
func (r *runner) datasetID() DatasetID {
	if r.id == nil {
		id := Identify(r.ds)
		r.id = &id
	}
	return *r.id
}

// save writes the run's state at the cursor to the checkpoint file.
func (r *runner) save() error {
	meta := ckptMeta{
		Format: checkpointFormat, StrataVersion: Version, Config: r.cfg, Dataset: r.datasetID(),
		RNG:    rngState{Seed: r.cfg.Seed, Epoch: r.loop.Cursor.Epoch, Batch: r.loop.Cursor.Batch},
		Cursor: r.loop.Cursor, NumBatches: r.numBatches,
		Partial: r.loop.Partial, History: r.history,
	}
	err := WriteCheckpoint(r.ckpt, r.b, r.model.Params(), r.opt, func(st optim.State, shapes map[string][2]int) any {
		meta.Optimizer, meta.OptimizerStep, meta.Shapes = st.Kind, st.Step, shapes
		return &meta
	})
	if err != nil {
		return &RunError{Op: "checkpoint", Err: err}
	}
	return nil
}

// WriteCheckpoint writes a model's parameters and its optimizer's state
// to path (atomically, package checkpoint's file) with the metadata
// that meta returns as JSON; meta gets the optimizer's state and the
// tensors' shapes to record. Every trainer's checkpoint is written here.
func WriteCheckpoint(path string, b backend.Backend, params []*nn.Param, opt optim.Optimizer,
	meta func(st optim.State, shapes map[string][2]int) any) error {
	ps, err := nn.SaveParams(b, params)
	if err != nil {
		return err
	}
	st, err := opt.State()
	if err != nil {
		return err
	}
	f := &checkpoint.File{}
	var shapes map[string][2]int
	f.Tensors, shapes = StateTensors(ps, st.Buffers)
	if f.Meta, err = json.Marshal(meta(st, shapes)); err != nil {
		return err
	}
	return checkpoint.WriteFile(path, f)
}

// StateTensors lays out model parameters and optimizer buffers as
// checkpoint tensors, "param/<name>" and "optim/<name>", with their
// shapes for the metadata.
func StateTensors(params, optimizer []nn.NamedTensor) ([]checkpoint.Tensor, map[string][2]int) {
	ts := make([]checkpoint.Tensor, 0, len(params)+len(optimizer))
	shapes := make(map[string][2]int, len(params)+len(optimizer))
	for _, set := range []struct {
		prefix string
		ts     []nn.NamedTensor
	}{{"param/", params}, {"optim/", optimizer}} {
		for _, t := range set.ts {
			name := set.prefix + t.Name
			shapes[name] = [2]int{t.Rows, t.Cols}
			ts = append(ts, checkpoint.Tensor{Name: name, Data: t.Data})
		}
	}
	return ts, shapes
}

// SplitState is StateTensors' inverse: every tensor must have a shape
// that matches its length, and every shape a tensor. The error names the
// first one that does not.
func SplitState(ts []checkpoint.Tensor, shapes map[string][2]int) (params, optimizer []nn.NamedTensor, err error) {
	for _, t := range ts {
		shape, ok := shapes[t.Name]
		if !ok {
			return nil, nil, fmt.Errorf("tensor %q has no shape in the metadata", t.Name)
		}
		if shape[0] < 0 || shape[1] < 0 || int64(shape[0])*int64(shape[1]) != int64(len(t.Data)) {
			return nil, nil, fmt.Errorf("tensor %q has %d values for shape %dx%d", t.Name, len(t.Data), shape[0], shape[1])
		}
		nt := nn.NamedTensor{Name: t.Name, Rows: shape[0], Cols: shape[1], Data: t.Data}
		switch {
		case strings.HasPrefix(t.Name, "param/"):
			nt.Name = strings.TrimPrefix(t.Name, "param/")
			params = append(params, nt)
		case strings.HasPrefix(t.Name, "optim/"):
			nt.Name = strings.TrimPrefix(t.Name, "optim/")
			optimizer = append(optimizer, nt)
		default:
			return nil, nil, fmt.Errorf("unexpected tensor %q", t.Name)
		}
	}
	if len(shapes) != len(ts) {
		return nil, nil, fmt.Errorf("metadata lists %d tensor shapes for %d tensors", len(shapes), len(ts))
	}
	return params, optimizer, nil
}

// CheckpointError reports a checkpoint that cannot be resumed here.
type CheckpointError struct {
	Path string
	Msg  string
}

func (e *CheckpointError) Error() string { return "train: checkpoint " + e.Path + ": " + e.Msg }

// restore loads the checkpoint when resuming, or makes sure none would be
// overwritten otherwise.
func (r *runner) restore() error {
	if r.ckpt == "" {
		return nil
	}
	// A run killed while writing leaves its temporary file behind.
	stale, _ := filepath.Glob(filepath.Join(r.opts.CheckpointDir, "."+CheckpointFile+".tmp-*"))
	for _, p := range stale {
		os.Remove(p)
	}
	f, err := checkpoint.ReadFile(r.ckpt)
	if errors.Is(err, fs.ErrNotExist) {
		if r.opts.Resume {
			r.logf("no checkpoint in %s: starting from the beginning", r.opts.CheckpointDir)
		}
		return nil
	}
	if err != nil {
		return &RunError{Op: "resume", Err: err}
	}
	if !r.opts.Resume {
		return &CheckpointError{Path: r.ckpt, Msg: "a checkpoint already exists: resume it (--resume) or use another directory"}
	}
	bad := func(format string, args ...any) error {
		return &CheckpointError{Path: r.ckpt, Msg: fmt.Sprintf(format, args...)}
	}
	var m ckptMeta
	dec := json.NewDecoder(bytes.NewReader(f.Meta))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return bad("metadata: %v", err)
	}
	if m.Format != checkpointFormat {
		return bad("metadata format %q, this build reads %q", m.Format, checkpointFormat)
	}
	if d := r.cfg.Diff(&m.Config); d != "" {
		return bad("written by a different configuration: %s", d)
	}
	if id := r.datasetID(); id != m.Dataset {
		return bad("written for dataset %s (%d nodes, %d edges, fingerprint %s), not %s (%d nodes, %d edges, fingerprint %s)",
			m.Dataset.Name, m.Dataset.Nodes, m.Dataset.Edges, m.Dataset.Fingerprint, id.Name, id.Nodes, id.Edges, id.Fingerprint)
	}
	if m.NumBatches != r.numBatches {
		return bad("%d batches per epoch, this run has %d", m.NumBatches, r.numBatches)
	}
	c := m.Cursor
	if c.Epoch < 0 || c.Batch < 0 || c.Batch > r.numBatches || (c.Batch > 0 && c.Epoch >= r.cfg.Epochs) {
		return bad("cursor epoch %d batch %d is outside this run (%d epochs of %d batches)", c.Epoch, c.Batch, r.cfg.Epochs, r.numBatches)
	}
	if m.RNG != (rngState{Seed: r.cfg.Seed, Epoch: c.Epoch, Batch: c.Batch}) {
		return bad("random state %+v does not match seed %d at the cursor", m.RNG, r.cfg.Seed)
	}
	if c.Epoch > r.cfg.Epochs {
		return bad("the checkpoint is at epoch %d, past this run's %d epochs", c.Epoch, r.cfg.Epochs)
	}
	if len(m.History) != c.Epoch {
		return bad("%d epochs of history for cursor epoch %d", len(m.History), c.Epoch)
	}
	for i, h := range m.History {
		if h.Epoch != i+1 {
			return bad("history entry %d is epoch %d", i, h.Epoch)
		}
	}
	if len(m.Partial.BatchLosses) != c.Batch {
		return bad("%d losses for the %d batches run in epoch %d", len(m.Partial.BatchLosses), c.Batch, c.Epoch+1)
	}
	wantSteps := c.Epoch*r.numBatches + c.Batch
	if m.OptimizerStep != wantSteps {
		return bad("optimizer step %d, want %d at the cursor", m.OptimizerStep, wantSteps)
	}

	// Tensors: every one has a shape in the metadata, and the model and
	// optimizer take exactly the set they own.
	params, bufs, err := SplitState(f.Tensors, m.Shapes)
	if err != nil {
		return bad("%v", err)
	}
	st := optim.State{Kind: m.Optimizer, Step: m.OptimizerStep, Buffers: bufs}
	if err := nn.LoadParams(r.b, r.model.Params(), params); err != nil {
		return bad("%v", err)
	}
	if err := r.opt.LoadState(st); err != nil {
		return bad("%v", err)
	}
	r.loop.Cursor, r.loop.Partial, r.history = c, m.Partial, m.History
	r.opts.Keep.Resumed(m.History)
	rc := c
	r.resumed = &rc
	r.logf("resuming from %s at epoch %d, batch %d", r.ckpt, c.Epoch+1, c.Batch)
	return nil
}
