package engine

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

	"github.com/strata-gnn/strata/train"
	"github.com/strata-gnn/strata/train/checkpoint"
)

// ckptConfig is a quick configuration of 2 devices with dropout (a random
// stream per epoch and batch), Adam (an optimizer state) and a partial
// cache (rows from peers and from the host).
func ckptConfig(epochs int) Config {
	cfg := small(2, epochs)
	cfg.Train.Optimizer = "adam"
	cfg.CacheBytes = 200 * 16 * 4
	return cfg
}

// interrupted runs cfg with checkpoints in dir and cancels it during
// epoch stop (0-based), after the checkpoint of epoch stop was written.
func interrupted(t *testing.T, cfg Config, dir string, resume bool, stop int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Run(ctx, tiny(t), cfg, Options{Backends: cpus(t, cfg.Devices), CheckpointDir: dir, Resume: resume,
		OnBatch: func(rank, epoch, batch int, _ float64) {
			if epoch == stop {
				cancel()
			}
		}})
	if !errors.Is(err, train.ErrInterrupted) {
		t.Fatalf("interrupted run: %v, want ErrInterrupted", err)
	}
}

// meta reads the checkpoint's metadata in dir.
func meta(t *testing.T, dir string) map[string]any {
	t.Helper()
	f, err := checkpoint.ReadFile(filepath.Join(dir, train.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(f.Meta, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// rewrite edits the checkpoint's metadata in dir.
func rewrite(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, train.CheckpointFile)
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

// TestCheckpointResume: a run interrupted in its third epoch resumes from
// the checkpoint written after the second and ends with the history of an
// uninterrupted run, bit for bit (with settings that move work around
// changed); an existing checkpoint is not overwritten without Resume, one
// from another configuration or past the run's epochs is refused, naming
// why, and one that has done every epoch gives its results and stays as
// it was.
func TestCheckpointResume(t *testing.T) {
	cfg := ckptConfig(3)
	want := run(t, cfg, Options{})
	dir := t.TempDir()
	interrupted(t, cfg, dir, false, 2)
	if m := meta(t, dir); m["epochs_done"] != 2.0 || m["engine"] != "device" {
		t.Fatalf("checkpoint after %v epochs of engine %v, want 2 of device", m["epochs_done"], m["engine"])
	}
	var ce *CheckpointError
	path := filepath.Join(dir, train.CheckpointFile)
	for _, tc := range []struct {
		name   string
		edit   func(*Config)
		resume bool
		want   string
	}{
		{"without resume", nil, false, "a checkpoint already exists: resume it (--resume)"},
		{"hidden", func(c *Config) { c.Train.Hidden = 32 }, true, "hidden is 32, the checkpoint has 16"},
		{"devices", func(c *Config) { c.Devices = 3 }, true, "devices is 3, the checkpoint has 2"},
		{"rebalance", func(c *Config) { c.Rebalance = Trim }, true, "rebalance is trim"},
		{"scheme", func(c *Config) { c.Scheme = LayerWise }, true, "scheme is layer"},
		{"past the run", func(c *Config) { c.Train.Epochs = 1 }, true, "has done 2 epochs, past this run's 1"},
	} {
		c := cfg
		if tc.edit != nil {
			tc.edit(&c)
		}
		_, err := Run(context.Background(), tiny(t), c, Options{Backends: cpus(t, c.Devices), CheckpointDir: dir, Resume: tc.resume})
		if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want a CheckpointError for %s saying %q", tc.name, err, path, tc.want)
		}
	}

	// Every epoch of the run done: nothing is trained, the report is the
	// checkpoint's (the uninterrupted run's first two epochs) and the
	// checkpoint stays as it was.
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	short := cfg
	short.Train.Epochs = 2
	steps := 0
	fin := run(t, short, Options{CheckpointDir: dir, Resume: true, OnBatch: func(int, int, int, float64) { steps++ }})
	first2 := want.Report
	first2.Epochs = want.Epochs[:2]
	first2.Summarize()
	sameEpochs(t, &fin.Report, &first2)
	if steps != 0 || fin.ResumedFrom == nil || fin.ResumedFrom.Epoch != 2 || !slices.Equal(fin.Run.EpochLosses, want.Run.EpochLosses[:2]) ||
		fin.DSP.BatchesPerDevice != want.DSP.BatchesPerDevice {
		t.Fatalf("resume with every epoch done: %d steps, resumed from %+v, epoch losses %v (uninterrupted %v)", steps, fin.ResumedFrom,
			fin.Run.EpochLosses, want.Run.EpochLosses)
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("the checkpoint changed (%v)", err)
	}

	// Settings that move work around may change on resume.
	res := cfg
	res.CacheBytes, res.QueueCapacity, res.NoPipeline = 0, 1, true
	got := run(t, res, Options{CheckpointDir: dir, Resume: true})
	if got.ResumedFrom == nil || got.ResumedFrom.Epoch != 2 {
		t.Fatalf("resumed from %+v, want epoch 2", got.ResumedFrom)
	}
	sameEpochs(t, &got.Report, &want.Report)
	if !slices.Equal(got.Run.EpochLosses, want.Run.EpochLosses) || len(got.Run.EpochTrainSeconds) != 3 || !got.Run.ReplicasEqual {
		t.Fatalf("epoch losses %v (uninterrupted %v), %d epoch times", got.Run.EpochLosses, want.Run.EpochLosses, len(got.Run.EpochTrainSeconds))
	}
	// The last epoch's checkpoint: a longer schedule goes on from it.
	if m := meta(t, dir); m["epochs_done"] != 3.0 {
		t.Fatalf("checkpoint after %v epochs, want 3", m["epochs_done"])
	}
}

// TestCheckpointResumeEveryEpoch: interrupted in each epoch in turn and
// resumed every time (with trimmed batches and evaluation every second
// epoch), a run ends as an uninterrupted one.
func TestCheckpointResumeEveryEpoch(t *testing.T) {
	cfg := ckptConfig(4)
	cfg.Rebalance = Trim
	cfg.Train.EvalEvery = 2
	want := run(t, cfg, Options{})
	dir := t.TempDir()
	for stop := 1; stop < 4; stop++ {
		interrupted(t, cfg, dir, stop > 1, stop)
		if m := meta(t, dir); m["epochs_done"] != float64(stop) {
			t.Fatalf("checkpoint after %v epochs, want %d", m["epochs_done"], stop)
		}
	}
	got := run(t, cfg, Options{CheckpointDir: dir, Resume: true})
	if got.ResumedFrom == nil || got.ResumedFrom.Epoch != 3 {
		t.Fatalf("resumed from %+v", got.ResumedFrom)
	}
	sameEpochs(t, &got.Report, &want.Report)
	if !slices.Equal(got.Run.EpochLosses, want.Run.EpochLosses) {
		t.Fatalf("epoch losses %v, uninterrupted %v", got.Run.EpochLosses, want.Run.EpochLosses)
	}
}

// TestCheckpointCorrupt: a truncated or altered checkpoint is a
// *checkpoint.FormatError naming the file and the defect; a well-formed
// one whose records do not fit the run is a CheckpointError saying what
// does not; the removed host engine's checkpoint is refused, with or
// without Resume, in one line naming that engine and saying to start
// again without --resume.
func TestCheckpointCorrupt(t *testing.T) {
	cfg := ckptConfig(1)
	dir := t.TempDir()
	run(t, cfg, Options{CheckpointDir: dir})
	path := filepath.Join(dir, train.CheckpointFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	longer := cfg
	longer.Train.Epochs = 2
	resume := func(resume bool) error {
		_, err := Run(context.Background(), tiny(t), longer, Options{Backends: cpus(t, 2), CheckpointDir: dir, Resume: resume})
		return err
	}
	for name, data := range map[string][]byte{
		"truncated": good[:len(good)-100],
		"flipped":   append(append(append([]byte{}, good[:200]...), good[200]^1), good[201:]...),
	} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		err := resume(true)
		var fe *checkpoint.FormatError
		var re *RunError
		if !errors.As(err, &fe) || fe.Path != path || !errors.As(err, &re) || re.Op != "resume" || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want a FormatError naming %s", name, err, path)
		}
	}
	for name, tc := range map[string]struct {
		edit   func(map[string]any)
		resume bool
		want   string
	}{
		"records":     {func(m map[string]any) { m["epoch_losses"] = []float64{1, 2} }, true, "per-epoch records for 1/2/1 epochs, want 1"},
		"engine":      {func(m map[string]any) { m["engine"] = "tpu" }, true, `written by engine "tpu"`},
		"host engine": {func(m map[string]any) { m["engine"] = "host" }, true, "written by the host engine, which this build no longer has"},
		"host, new":   {func(m map[string]any) { m["engine"] = "host" }, false, "start again without --resume"},
		"no engine":   {func(m map[string]any) { delete(m, "engine"); m["eval_seconds"] = []any{} }, true, "per-epoch records for 1/1/0"},
		"dataset":     {func(m map[string]any) { m["dataset"].(map[string]any)["fingerprint"] = "00000000" }, true, "written for dataset tiny"},
		"format":      {func(m map[string]any) { m["format"] = "strata-train/1" }, true, `metadata format "strata-train/1"`},
		"unknown":     {func(m map[string]any) { m["cursor"] = 3 }, true, `unknown field "cursor"`},
		"bad json":    {func(m map[string]any) { m["epochs_done"] = "one" }, true, "metadata:"},
		"no epochs":   {func(m map[string]any) { m["epochs_done"] = 0 }, true, "0 epochs done"},
		"batches":     {func(m map[string]any) { m["batches_per_device"] = 1 }, true, "1 batches per device and epoch, this run has"},
		"step":        {func(m map[string]any) { m["optimizer_step"] = 1 }, true, "optimizer step 1, want"},
		"history":     {func(m map[string]any) { m["history"].([]any)[0].(map[string]any)["epoch"] = 2 }, true, "history entry 0 is epoch 2"},
		"shape":       {func(m map[string]any) { m["shapes"].(map[string]any)["param/"+firstParam(m)] = []int{1, 1} }, true, "values for shape 1x1"},
		"no shape":    {func(m map[string]any) { delete(m["shapes"].(map[string]any), "param/"+firstParam(m)) }, true, "has no shape"},
	} {
		if err := os.WriteFile(path, good, 0o644); err != nil {
			t.Fatal(err)
		}
		rewrite(t, dir, tc.edit)
		var ce *CheckpointError
		err := resume(tc.resume)
		if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line CheckpointError saying %q", name, err, tc.want)
		}
	}
}

// firstParam is the name of a parameter tensor in checkpoint metadata m.
func firstParam(m map[string]any) string {
	for name := range m["shapes"].(map[string]any) {
		if rest, ok := strings.CutPrefix(name, "param/"); ok {
			return rest
		}
	}
	return ""
}

// TestCheckpointNone: without a checkpoint a run that resumes starts from
// the beginning, saying so, and the temporary file a run killed while
// writing leaves behind is removed.
func TestCheckpointNone(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, "."+train.CheckpointFile+".tmp-123")
	if err := os.WriteFile(tmp, []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	rep := run(t, ckptConfig(1), Options{CheckpointDir: dir, Resume: true, Log: &log})
	if rep.ResumedFrom != nil || !strings.Contains(log.String(), "no checkpoint in "+dir) {
		t.Fatalf("resumed from %+v; log %q", rep.ResumedFrom, log.String())
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
	if m := meta(t, dir); m["format"] != CheckpointFormat || m["epochs_done"] != 1.0 {
		t.Fatalf("checkpoint %v", m)
	}
}
