package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/train"
	"github.com/strata-gnn/strata/train/checkpoint"
)

// ckptConfig is a quick configuration of 2 devices on the generated tiny
// graph, with dropout (a random stream per epoch and batch) and Adam (an
// optimizer state).
func ckptConfig(epochs int) Config {
	cfg := small(2, epochs)
	cfg.Train.BatchSize = 64
	cfg.CacheBytes = 200 * 16 * 4 // some rows from peers, some from the host
	return cfg
}

func runTiny(ds *dataset.Dataset, cfg Config, opts Options) (*Report, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return Run(ctx, ds, cfg, opts)
}

// interrupted runs cfg with checkpoints in dir and cancels it during
// epoch stop (0-based), after the checkpoint of epoch stop was written.
func interrupted(t *testing.T, ds *dataset.Dataset, cfg Config, dir string, stop int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Run(ctx, ds, cfg, Options{CheckpointDir: dir, OnBatch: func(rank, epoch, batch int, _ float64) {
		if epoch == stop {
			cancel()
		}
	}})
	if !errors.Is(err, train.ErrInterrupted) {
		t.Fatalf("interrupted run: %v, want ErrInterrupted", err)
	}
}

// epochsDone reads the checkpoint's epoch count.
func epochsDone(t *testing.T, dir string) int {
	t.Helper()
	f, err := checkpoint.ReadFile(filepath.Join(dir, train.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Engine     string `json:"engine"`
		EpochsDone int    `json:"epochs_done"`
	}
	if err := json.Unmarshal(f.Meta, &m); err != nil {
		t.Fatal(err)
	}
	if m.Engine != "host" {
		t.Fatalf("checkpoint of engine %q", m.Engine)
	}
	return m.EpochsDone
}

// sameEpochs fails unless got's per-epoch records are want's bit for bit
// (all but the timings).
func sameEpochs(t *testing.T, got, want *Report) {
	t.Helper()
	if len(got.Epochs) != len(want.Epochs) {
		t.Fatalf("%d epochs recorded, uninterrupted %d", len(got.Epochs), len(want.Epochs))
	}
	for i, w := range want.Epochs {
		g := got.Epochs[i]
		g.Seconds, w.Seconds = 0, 0
		if g.Epoch != w.Epoch || g.Loss != w.Loss || !slices.Equal(g.BatchLosses, w.BatchLosses) || g.TrainAccuracy != w.TrainAccuracy ||
			g.ValAccuracy != w.ValAccuracy || g.ValLoss != w.ValLoss || g.TestAccuracy != w.TestAccuracy {
			t.Fatalf("epoch %d: %+v\nuninterrupted %+v", w.Epoch, g, w)
		}
	}
	if got.TestAccuracy != want.TestAccuracy || got.ValAccuracy != want.ValAccuracy || got.SelectedEpoch != want.SelectedEpoch ||
		got.LastTestAcc != want.LastTestAcc || got.DSP.BatchesPerDevice != want.DSP.BatchesPerDevice {
		t.Fatalf("summary: test %v val %v epoch %d last %v, %d batches; uninterrupted %v %v %d %v, %d", got.TestAccuracy, got.ValAccuracy,
			got.SelectedEpoch, got.LastTestAcc, got.DSP.BatchesPerDevice, want.TestAccuracy, want.ValAccuracy, want.SelectedEpoch,
			want.LastTestAcc, want.DSP.BatchesPerDevice)
	}
}

// TestCheckpointResume: a run on 2 devices interrupted in its third epoch
// resumes from the checkpoint written after the second and ends with the
// losses, accuracies and headline numbers of an uninterrupted run, bit for
// bit; an existing checkpoint is not overwritten without Resume, one
// from another configuration or past the run's epochs is refused, naming
// why, and one that has done every epoch gives its results.
func TestCheckpointResume(t *testing.T) {
	ds := tiny(t)
	cfg := ckptConfig(3)
	want, err := runTiny(ds, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	interrupted(t, ds, cfg, dir, 2)
	if n := epochsDone(t, dir); n != 2 {
		t.Fatalf("checkpoint after %d epochs, want 2", n)
	}

	var ce *CheckpointError
	path := filepath.Join(dir, train.CheckpointFile)
	for _, tc := range []struct {
		name string
		edit func(*Config)
		opts Options
		want string
	}{
		{"without resume", nil, Options{CheckpointDir: dir}, "a checkpoint already exists: resume it (--resume)"},
		{"hidden", func(c *Config) { c.Train.Hidden = 32 }, Options{CheckpointDir: dir, Resume: true}, "hidden is 32, the checkpoint has 16"},
		{"devices", func(c *Config) { c.Devices = 3 }, Options{CheckpointDir: dir, Resume: true}, "devices is 3, the checkpoint has 2"},
		{"rebalance", func(c *Config) { c.Rebalance = Trim }, Options{CheckpointDir: dir, Resume: true}, "rebalance is trim"},
		{"past the run", func(c *Config) { c.Train.Epochs = 1 }, Options{CheckpointDir: dir, Resume: true}, "has done 2 epochs, past this run's 1"},
	} {
		c := cfg
		if tc.edit != nil {
			tc.edit(&c)
		}
		_, err := runTiny(ds, c, tc.opts)
		if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want a CheckpointError for %s saying %q", tc.name, err, path, tc.want)
		}
	}

	// A checkpoint that has done every epoch of the run: nothing is
	// trained, the checkpoint's results are the report's (as the
	// single-device trainer does) and the checkpoint stays as it was.
	done := cfg
	done.Train.Epochs = 2
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	fin, err := Run(context.Background(), ds, done, Options{CheckpointDir: dir, Resume: true,
		OnBatch: func(int, int, int, float64) { steps++ }})
	if err != nil {
		t.Fatalf("resume with every epoch done: %v", err)
	}
	if steps != 0 || fin.ResumedFrom == nil || fin.ResumedFrom.Epoch != 2 || fin.DSP.BatchesPerDevice != want.DSP.BatchesPerDevice {
		t.Fatalf("resume with every epoch done: %d steps, resumed from %+v, %d batches per device", steps, fin.ResumedFrom, fin.DSP.BatchesPerDevice)
	}
	first2 := *want // the uninterrupted run's first two epochs and their headline
	first2.Epochs = want.Epochs[:2]
	summarize(&first2.Report)
	sameEpochs(t, fin, &first2)
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("the checkpoint changed (%v)", err)
	}

	// Settings that move work around may change on resume.
	res := cfg
	res.CacheBytes, res.QueueCapacity = 0, 1
	got, err := runTiny(ds, res, Options{CheckpointDir: dir, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResumedFrom == nil || got.ResumedFrom.Epoch != 2 {
		t.Fatalf("resumed from %+v, want epoch 2", got.ResumedFrom)
	}
	sameEpochs(t, got, want)
	// The last epoch's checkpoint: a longer schedule goes on from it.
	if n := epochsDone(t, dir); n != 3 {
		t.Fatalf("checkpoint after %d epochs, want 3", n)
	}
}

// TestCheckpointResumeEveryEpoch: interrupted after each epoch in turn
// and resumed every time (with sampled evaluation and trimmed batches),
// a run ends as an uninterrupted one, and a finished run extended with
// --epochs goes on as a longer uninterrupted run.
func TestCheckpointResumeEveryEpoch(t *testing.T) {
	ds := tiny(t)
	cfg := ckptConfig(4)
	cfg.Rebalance = Trim
	cfg.Train.Eval, cfg.Train.EvalFanouts = train.Sampled, []int{10, 10}
	want, err := runTiny(ds, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	short := cfg
	short.Train.Epochs = 1
	if _, err := runTiny(ds, short, Options{CheckpointDir: dir}); err != nil {
		t.Fatal(err)
	}
	for stop := 2; stop < 4; stop++ {
		ctx, cancel := context.WithCancel(context.Background())
		_, err := Run(ctx, ds, cfg, Options{CheckpointDir: dir, Resume: true, OnBatch: func(rank, epoch, batch int, _ float64) {
			if epoch == stop {
				cancel()
			}
		}})
		cancel()
		if !errors.Is(err, train.ErrInterrupted) {
			t.Fatalf("run stopped in epoch %d: %v", stop+1, err)
		}
		if n := epochsDone(t, dir); n != stop {
			t.Fatalf("checkpoint after %d epochs, want %d", n, stop)
		}
	}
	got, err := runTiny(ds, cfg, Options{CheckpointDir: dir, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResumedFrom == nil || got.ResumedFrom.Epoch != 3 {
		t.Fatalf("resumed from %+v", got.ResumedFrom)
	}
	sameEpochs(t, got, want)
}

// TestCheckpointCorrupt: a truncated or altered checkpoint is a
// *checkpoint.FormatError naming the file and the defect, and a
// well-formed one whose records do not fit the run is a CheckpointError
// saying what does not.
func TestCheckpointCorrupt(t *testing.T) {
	ds := tiny(t)
	cfg := ckptConfig(1)
	dir := t.TempDir()
	if _, err := runTiny(ds, cfg, Options{CheckpointDir: dir}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, train.CheckpointFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	longer := cfg
	longer.Train.Epochs = 2
	resume := func() error {
		_, err := runTiny(ds, longer, Options{CheckpointDir: dir, Resume: true})
		return err
	}
	for name, data := range map[string][]byte{
		"truncated": good[:len(good)-100],
		"flipped":   append(append(append([]byte{}, good[:200]...), good[200]^1), good[201:]...),
	} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		err := resume()
		var fe *checkpoint.FormatError
		var re *RunError
		if !errors.As(err, &fe) || fe.Path != path || !errors.As(err, &re) || re.Op != "resume" || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want a FormatError naming %s", name, err, path)
		}
	}
	for name, tc := range map[string]struct {
		edit func(map[string]any)
		want string
	}{
		"history":    {func(m map[string]any) { m["history"] = []any{} }, "history of 0 epochs for 1 epochs done"},
		"losses":     {func(m map[string]any) { m["history"].([]any)[0].(map[string]any)["batch_losses"] = []float64{1} }, "epoch 1 has 1 batch losses"},
		"device run": {func(m map[string]any) { m["epoch_losses"] = []float64{1} }, "device engine's per-epoch records"},
		"engine":     {func(m map[string]any) { m["engine"] = "device" }, "written by the device engine, this run uses the host engine"},
		"dataset":    {func(m map[string]any) { m["dataset"].(map[string]any)["fingerprint"] = "00000000" }, "written for dataset tiny"},
	} {
		f, err := checkpoint.Decode(path, good)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(f.Meta, &m); err != nil {
			t.Fatal(err)
		}
		tc.edit(m)
		if f.Meta, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
		if err := checkpoint.WriteFile(path, f); err != nil {
			t.Fatal(err)
		}
		var ce *CheckpointError
		if err := resume(); !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a CheckpointError saying %q", name, err, tc.want)
		}
	}
}
