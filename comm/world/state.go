package world

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/strata-gnn/strata/internal/atomicfile"
)

// Checkpoints of a job. The trainers' state is replicated: every rank
// holds the same parameters and optimizer state (BSP), so process 0's
// checkpoint file holds the one copy, with metadata that records the
// job's layout (Layout). Every process writes its own ranks' state
// beside it, DIR/process-P.json (RankState: its ranks, host, the epochs
// done and a hash of its replica's parameters), atomically. A resume
// needs the directory on every process (a shared file system, or a
// copy): each process loads the one copy; AgreeCheckpoint makes sure
// they all load the same checkpoint, and CheckState that the copy is
// this process's replica when its state file has the same epoch.

// StateFormat names the layout of a RankState file.
const StateFormat = "strata-rank-state/1"

// maxStateBytes bounds a RankState file before it is read.
const maxStateBytes = 1 << 20

// RankState is one process's entry in a job's checkpoint directory.
type RankState struct {
	Format     string `json:"format"`
	Process    int    `json:"process"`
	Processes  int    `json:"processes"`
	Host       string `json:"host"`
	PID        int    `json:"pid"`
	Ranks      []int  `json:"ranks"`
	EpochsDone int    `json:"epochs_done"`
	// ParamsFNV is the FNV-64a hash of the replica's parameters after
	// EpochsDone epochs (ParamsHash), in hex.
	ParamsFNV string `json:"params_fnv"`
}

// StateError reports a RankState file that cannot be used.
type StateError struct {
	Path string
	Msg  string
}

func (e *StateError) Error() string { return "world: " + e.Path + ": " + e.Msg }

// Layout is the number of devices of every process, in process order.
func (w *World) Layout() []int {
	l := make([]int, len(w.procs))
	for i, p := range w.procs {
		l[i] = p.Devices
	}
	return l
}

// LayoutDiff says how a checkpoint's layout (devices per process)
// differs from this job's ("" if not): a resume needs the same processes
// with the same devices each.
func (w *World) LayoutDiff(saved []int) string {
	mine := w.Layout()
	if slices.Equal(saved, mine) {
		return ""
	}
	return fmt.Sprintf("written by %s, this run is %s (resume with the same processes and devices per process)", layoutString(saved), layoutString(mine))
}

func layoutString(l []int) string {
	if len(l) == 1 {
		return fmt.Sprintf("1 process with %d devices", l[0])
	}
	return fmt.Sprintf("%d processes with %v devices", len(l), l)
}

// ParamsHash hashes parameter values (in order) for RankState.
func ParamsHash(params [][]float32) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, p := range params {
		for _, v := range p {
			bits := math.Float32bits(v)
			b[0], b[1], b[2], b[3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
			h.Write(b[:])
		}
	}
	return h.Sum64()
}

// StatePath is this process's state file in dir.
func (w *World) StatePath(dir string) string {
	return filepath.Join(dir, "process-"+strconv.Itoa(w.me)+".json")
}

// WriteState writes this process's state after epochs, atomically.
func (w *World) WriteState(dir string, epochs int, paramsHash uint64) error {
	p := w.procs[w.me]
	st := RankState{Format: StateFormat, Process: w.me, Processes: len(w.procs), Host: p.Host, PID: p.PID, Ranks: p.Ranks(),
		EpochsDone: epochs, ParamsFNV: strconv.FormatUint(paramsHash, 16)}
	if err := atomicfile.WriteJSON(w.StatePath(dir), st); err != nil {
		return fmt.Errorf("world: writing this process's state: %w", err)
	}
	return nil
}

// ParseState decodes and checks a RankState file's bytes (path names it
// in errors).
func ParseState(path string, b []byte) (*RankState, error) {
	bad := func(format string, args ...any) error {
		return &StateError{Path: path, Msg: fmt.Sprintf(format, args...)}
	}
	if len(b) > maxStateBytes {
		return nil, bad("%d bytes, more than a state file holds (%d)", len(b), maxStateBytes)
	}
	var st RankState
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, bad("malformed: %v", err)
	}
	switch {
	case st.Format != StateFormat:
		return nil, bad("format %q, this build reads %q", st.Format, StateFormat)
	case st.Processes < 1 || st.Processes > MaxRanks || st.Process < 0 || st.Process >= st.Processes:
		return nil, bad("process %d of %d", st.Process, st.Processes)
	case len(st.Ranks) < 1 || len(st.Ranks) > MaxRanks:
		return nil, bad("%d ranks", len(st.Ranks))
	case st.EpochsDone < 0:
		return nil, bad("%d epochs done", st.EpochsDone)
	}
	for i, r := range st.Ranks {
		if r < 0 || r >= MaxRanks || (i > 0 && r != st.Ranks[i-1]+1) {
			return nil, bad("ranks %v are not consecutive", st.Ranks)
		}
	}
	if _, err := strconv.ParseUint(st.ParamsFNV, 16, 64); err != nil {
		return nil, bad("parameter hash %q is not a hex number", st.ParamsFNV)
	}
	return &st, nil
}

// ReadState reads this process's state file in dir (nil, nil when there
// is none).
func (w *World) ReadState(dir string) (*RankState, error) {
	path := w.StatePath(dir)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStateBytes+1))
	if err != nil {
		return nil, &StateError{Path: path, Msg: err.Error()}
	}
	return ParseState(path, b)
}

// CheckState checks this process's state file in dir against the
// checkpoint a resume loaded (epochs done, its parameters' hash): it
// must be this process's, of this layout, and when it is of the same
// epoch, of the same parameters. A missing file passes (the process
// died before writing it; the replicated copy is what counts).
func (w *World) CheckState(dir string, epochs int, paramsHash uint64) error {
	st, err := w.ReadState(dir)
	if err != nil || st == nil {
		return err
	}
	path := w.StatePath(dir)
	switch {
	case st.Process != w.me || st.Processes != len(w.procs) || !slices.Equal(st.Ranks, w.Ranks()):
		return &StateError{Path: path, Msg: fmt.Sprintf("written by process %d of %d with ranks %v, this is process %d of %d with ranks %v",
			st.Process, st.Processes, st.Ranks, w.me, len(w.procs), w.Ranks())}
	case st.EpochsDone == epochs && st.ParamsFNV != strconv.FormatUint(paramsHash, 16):
		return &StateError{Path: path, Msg: fmt.Sprintf("this process's replica after epoch %d had other parameters than the checkpoint's (hash %s, the checkpoint's %x): the directory holds another job's checkpoint",
			epochs, st.ParamsFNV, paramsHash)}
	}
	return nil
}

// AgreeCheckpoint makes sure every process resumes from the same
// checkpoint: each publishes the epochs done and a hash of the
// checkpoint's metadata it loaded (0 and nil for none); a process that
// differs from process 0 is refused by name.
func (w *World) AgreeCheckpoint(ctx context.Context, epochs int, meta []byte) error {
	h := fnv.New64a()
	h.Write(meta)
	v, _ := json.Marshal(struct {
		Epochs int    `json:"epochs_done"`
		Meta   string `json:"metadata_fnv"`
	}{epochs, strconv.FormatUint(h.Sum64(), 16)})
	err := w.Agree(ctx, "checkpoint", v)
	var me *MismatchError
	if errors.As(err, &me) {
		me.Hint = "every process must resume from the same checkpoint: give them one shared checkpoint directory (or the same copy)"
	}
	return err
}
