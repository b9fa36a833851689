package ckpt

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
	"github.com/strata-gnn/strata/train/checkpoint"
)

// cfg stands for an engine's configuration: Hidden changes the numbers,
// Cache does not.
type cfg struct {
	Hidden int `json:"hidden"`
	Cache  int `json:"cache"`
}

func diff(run, c *cfg) string {
	if run.Hidden != c.Hidden {
		return "hidden differs"
	}
	return ""
}

// model is two parameters and an Adam optimizer on a CPU back end.
type model struct {
	b   backend.Backend
	ps  []*nn.Param
	opt optim.Optimizer
}

func newModel(t *testing.T) *model {
	t.Helper()
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := &model{b: b}
	for _, s := range []struct {
		name       string
		rows, cols int
	}{{"w", 3, 2}, {"bias", 1, 2}} {
		p, err := nn.NewParam(b, s.name, s.rows, s.cols)
		if err != nil {
			t.Fatal(err)
		}
		m.ps = append(m.ps, p)
	}
	m.opt = optim.NewAdam(b, m.ps, 0.1, 0.9, 0.999, 1e-8, 0)
	t.Cleanup(func() { m.opt.Free(); nn.FreeParams(b, m.ps) })
	return m
}

// train takes steps optimizer steps with gradients that depend on the step.
func (m *model) train(t *testing.T, steps int) {
	t.Helper()
	for s := range steps {
		for i, p := range m.ps {
			g := make([]float32, p.Len())
			for j := range g {
				g[j] = float32((s+1)*(j+1)) * 0.1 * float32(i+1)
			}
			if err := m.b.Upload(p.Grad, g); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.opt.Step(); err != nil {
			t.Fatal(err)
		}
	}
}

func (m *model) values(t *testing.T) []nn.NamedTensor {
	t.Helper()
	vs, err := nn.SaveParams(m.b, m.ps)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

var dsID = train.DatasetID{Name: "toy", Nodes: 10, Edges: 20, Features: 3, Classes: 2, Fingerprint: "0123abcd"}

// save writes a checkpoint after 2 epochs of 3 batches to a new
// directory and returns the run that resumes it.
func save(t *testing.T) *Run[cfg] {
	t.Helper()
	m := newModel(t)
	m.train(t, 6)
	r := &Run[cfg]{Dir: t.TempDir(), Resume: true, Config: cfg{Hidden: 16, Cache: 1}, Diff: diff,
		Epochs: 3, BatchesPerDevice: 3, Dataset: dsID}
	meta := Meta[cfg]{Engine: Device, Config: cfg{Hidden: 16, Cache: 7}, Dataset: dsID, EpochsDone: 2, BatchesPerDevice: 3,
		History: []train.EpochRecord{{Epoch: 1, Loss: 1.5}, {Epoch: 2, Loss: 0.25}}}
	if err := Save(r.Path(), &meta, m.b, m.ps, m.opt); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSaveOpenLoad: a saved state loads into a fresh model and optimizer
// bit for bit, and both go on to take the same steps; settings that do
// not change the numbers may differ.
func TestSaveOpenLoad(t *testing.T) {
	m := newModel(t)
	m.train(t, 6)
	r := &Run[cfg]{Dir: t.TempDir(), Resume: true, Config: cfg{Hidden: 16, Cache: 1}, Diff: diff,
		Epochs: 3, BatchesPerDevice: 3, Dataset: dsID}
	hist := []train.EpochRecord{{Epoch: 1, Loss: 1.5, BatchLosses: []float64{0.1, 1.0 / 3, 2}}, {Epoch: 2, Loss: 0.25, ValAccuracy: 0.7}}
	meta := Meta[cfg]{Engine: Device, Config: cfg{Hidden: 16, Cache: 7}, Dataset: dsID, EpochsDone: 2, BatchesPerDevice: 3, History: hist}
	if err := Save(r.Path(), &meta, m.b, m.ps, m.opt); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	r.Log = &log
	st, err := Open(r)
	if err != nil {
		t.Fatal(err)
	}
	if st.Meta.EpochsDone != 2 || st.Meta.OptimizerStep != 6 || st.Meta.Optimizer != "adam" || st.Meta.Format != Format ||
		st.Meta.StrataVersion != train.Version || st.Meta.Config.Cache != 7 || !strings.Contains(log.String(), "after epoch 2") {
		t.Fatalf("meta %+v, log %q", st.Meta, log.String())
	}
	if len(st.Meta.History) != 2 || !slices.Equal(st.Meta.History[0].BatchLosses, hist[0].BatchLosses) || st.Meta.History[1].ValAccuracy != 0.7 {
		t.Fatalf("history %+v", st.Meta.History)
	}
	fresh := newModel(t)
	if err := st.Load(fresh.b, fresh.ps, fresh.opt); err != nil {
		t.Fatal(err)
	}
	m.train(t, 2)
	fresh.train(t, 2)
	a, b := m.values(t), fresh.values(t)
	for i := range a {
		if !slices.Equal(a[i].Data, b[i].Data) {
			t.Fatalf("%s: %v after resuming, %v uninterrupted", a[i].Name, b[i].Data, a[i].Data)
		}
	}
	// Another model's shapes are refused with the file named.
	other := newModel(t)
	p, err := nn.NewParam(other.b, "extra", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.FreeParams(other.b, []*nn.Param{p})
	var ce *Error
	if err := st.Load(other.b, append(other.ps, p), other.opt); !errors.As(err, &ce) || ce.Path != r.Path() {
		t.Fatalf("load into another model: %v", err)
	}
}

// rewrite replaces the checkpoint's metadata by edit's result (the tensors
// stay), keeping the file well-formed.
func rewrite(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	f, err := checkpoint.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(f.Meta, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if f.Meta, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.WriteFile(path, f); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefuses: every mismatch between the checkpoint and the run is
// an *Error naming the file and the mismatch.
func TestOpenRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(*Run[cfg])
		meta func(map[string]any)
		want string
	}{
		{name: "no resume", run: func(r *Run[cfg]) { r.Resume = false }, want: "a checkpoint already exists: resume it (--resume)"},
		{name: "config", run: func(r *Run[cfg]) { r.Config.Hidden = 32 }, want: "written by a different configuration: hidden differs"},
		{name: "host engine", meta: func(m map[string]any) { m["engine"] = Host }, want: "written by the host engine, which this build no longer has"},
		{name: "host engine, no resume", run: func(r *Run[cfg]) { r.Resume = false }, meta: func(m map[string]any) { m["engine"] = Host },
			want: "remove it or use another directory and start again without --resume"},
		{name: "other engine", meta: func(m map[string]any) { m["engine"] = "tpu" }, want: `written by engine "tpu"`},
		{name: "dataset", run: func(r *Run[cfg]) { r.Dataset.Fingerprint = "ffffffff" }, want: "fingerprint 0123abcd), not toy"},
		{name: "past the run", run: func(r *Run[cfg]) { r.Epochs = 1 }, want: "has done 2 epochs, past this run's 1"},
		{name: "batches", run: func(r *Run[cfg]) { r.BatchesPerDevice = 4 }, want: "3 batches per device and epoch, this run has 4"},
		{name: "check", run: func(r *Run[cfg]) { r.Check = func(*Meta[cfg]) string { return "no records" } }, want: "no records"},
		{name: "format", meta: func(m map[string]any) { m["format"] = "strata-train/1" }, want: `metadata format "strata-train/1"`},
		{name: "unknown field", meta: func(m map[string]any) { m["cursor"] = 3 }, want: `unknown field "cursor"`},
		{name: "bad json", meta: func(m map[string]any) { m["epochs_done"] = "two" }, want: "metadata:"},
		{name: "no epochs", meta: func(m map[string]any) { m["epochs_done"] = 0 }, want: "0 epochs done"},
		{name: "step", meta: func(m map[string]any) { m["optimizer_step"] = 5 }, want: "optimizer step 5, want 6"},
		{name: "history", meta: func(m map[string]any) { m["history"].([]any)[1].(map[string]any)["epoch"] = 1 }, want: "history entry 1 is epoch 1"},
		{name: "shape", meta: func(m map[string]any) { m["shapes"].(map[string]any)["param/w"] = []int{2, 2} }, want: `tensor "param/w" has 6 values for shape 2x2`},
		{name: "no shape", meta: func(m map[string]any) { delete(m["shapes"].(map[string]any), "param/w") }, want: `tensor "param/w" has no shape`},
	} {
		r := save(t)
		if tc.run != nil {
			tc.run(r)
		}
		if tc.meta != nil {
			rewrite(t, r.Path(), tc.meta)
		}
		st, err := Open(r)
		var ce *Error
		if st != nil || !errors.As(err, &ce) || ce.Path != r.Path() || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), r.Path()) {
			t.Errorf("%s: got %v, want an *Error naming %s and saying %q", tc.name, err, r.Path(), tc.want)
		}
	}
}

// TestOpenFinished: a checkpoint that has done every epoch of the run
// opens (the run trains nothing and reports its history), saying so.
func TestOpenFinished(t *testing.T) {
	r := save(t)
	r.Epochs = 2
	var log bytes.Buffer
	r.Log = &log
	st, err := Open(r)
	if err != nil || st == nil || st.Meta.EpochsDone != 2 || len(st.Meta.History) != 2 {
		t.Fatalf("got %+v, %v; want the state after 2 epochs", st, err)
	}
	if want := r.Path() + " has done all 2 epochs: nothing to train"; !strings.Contains(log.String(), want) {
		t.Fatalf("log %q lacks %q", log.String(), want)
	}
}

// TestOpenEngineless: a device engine's checkpoint written before
// checkpoints named their engine resumes.
func TestOpenEngineless(t *testing.T) {
	r := save(t)
	rewrite(t, r.Path(), func(m map[string]any) { delete(m, "engine") })
	if st, err := Open(r); err != nil || st == nil {
		t.Fatalf("got %v, %v", st, err)
	}
}

// TestOpenCorrupt: a truncated or altered file is the reader's
// *checkpoint.FormatError naming the file and the defect, passed through
// Wrap.
func TestOpenCorrupt(t *testing.T) {
	for name, damage := range map[string]func([]byte) []byte{
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
		"flipped":   func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b },
		"empty":     func([]byte) []byte { return nil },
	} {
		r := save(t)
		data, err := os.ReadFile(r.Path())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(r.Path(), damage(data), 0o644); err != nil {
			t.Fatal(err)
		}
		var op string
		r.Wrap = func(o string, err error) error { op = o; return err }
		_, err = Open(r)
		var fe *checkpoint.FormatError
		if !errors.Is(err, checkpoint.ErrCorrupt) || !errors.As(err, &fe) || fe.Path != r.Path() || op != "resume" {
			t.Errorf("%s: got %v (op %q), want a FormatError for %s", name, err, op, r.Path())
		}
	}
}

// TestOpenNone: without a checkpoint a run starts from the beginning
// (saying so when it meant to resume), and a temporary file left by a
// run killed while writing is removed.
func TestOpenNone(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, "."+train.CheckpointFile+".tmp-123")
	if err := os.WriteFile(tmp, []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	r := &Run[cfg]{Dir: dir, Resume: true, Log: &log, Diff: diff, Epochs: 3, BatchesPerDevice: 3}
	st, err := Open(r)
	if st != nil || err != nil || !strings.Contains(log.String(), "no checkpoint in "+dir) {
		t.Fatalf("got %v, %v, log %q", st, err, log.String())
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
}
