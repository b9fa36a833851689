package train

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train/checkpoint"
)

func cpuBackend(t testing.TB) backend.Backend {
	t.Helper()
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func quietRun(t testing.TB, cfg Config, opts Options) *Report {
	t.Helper()
	if opts.Backend == nil {
		opts.Backend = cpuBackend(t)
	}
	rep, err := Run(context.Background(), toyDataset(300, 3), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func losses(r *Report) []float64 {
	var out []float64
	for _, e := range r.Epochs {
		out = append(out, e.BatchLosses...)
	}
	return out
}

func sameLosses(t *testing.T, a, b *Report) {
	t.Helper()
	la, lb := losses(a), losses(b)
	if len(la) != len(lb) {
		t.Fatalf("%d vs %d batch losses", len(la), len(lb))
	}
	for i := range la {
		if math.Float64bits(la[i]) != math.Float64bits(lb[i]) {
			t.Fatalf("batch %d: loss %v vs %v", i, la[i], lb[i])
		}
	}
	for i := range a.Epochs {
		ea, eb := a.Epochs[i], b.Epochs[i]
		if ea.Loss != eb.Loss || ea.ValAccuracy != eb.ValAccuracy || ea.TestAccuracy != eb.TestAccuracy || ea.ValLoss != eb.ValLoss {
			t.Fatalf("epoch %d differs: %+v vs %+v", i+1, ea, eb)
		}
	}
}

// sampled is model's defaults in sampled mode: on the toy graph's 30
// training nodes one batch of 32 an epoch.
func sampled(model string) Config {
	cfg := Defaults(model)
	cfg.Mode = Sampled
	return cfg
}

func TestSampledGCNLearns(t *testing.T) {
	cfg := sampled(GCN)
	cfg.Epochs = 60
	rep := quietRun(t, cfg, Options{})
	if len(rep.Epochs) != 60 || rep.Epochs[0].Epoch != 1 || len(rep.Epochs[0].BatchLosses) != 1 {
		t.Fatalf("epochs: %d, first %+v", len(rep.Epochs), rep.Epochs[0])
	}
	first, last := rep.Epochs[0].Loss, rep.Epochs[59].Loss
	if !(last < first*0.7) {
		t.Fatalf("loss did not fall: %v -> %v", first, last)
	}
	if rep.TestAccuracy < 0.8 {
		t.Fatalf("test accuracy %v < 0.8 on an easy graph", rep.TestAccuracy)
	}
	if rep.Device != "cpu" || rep.Dataset != "toy" || rep.Model != GCN || rep.Graph.Nodes != 300 {
		t.Fatalf("report header %+v", rep)
	}
}

func TestSameSeedSameLossesDifferentSeedDifferent(t *testing.T) {
	for _, model := range []string{GCN, GAT} {
		cfg := sampled(model)
		cfg.Epochs = 5
		a, b := quietRun(t, cfg, Options{}), quietRun(t, cfg, Options{})
		sameLosses(t, a, b)
		cfg.Seed = 2
		c := quietRun(t, cfg, Options{})
		if losses(c)[0] == losses(a)[0] {
			t.Fatalf("%s: seeds 1 and 2 give the same first loss %v", model, losses(a)[0])
		}
	}
}

func TestResumeAfterInterruptMatchesUninterrupted(t *testing.T) {
	cfg := sampled(GCN)
	cfg.Epochs = 12
	ref := quietRun(t, cfg, Options{})

	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	opts := Options{Backend: cpuBackend(t), CheckpointDir: dir, CheckpointEvery: 5,
		OnBatch: func(epoch, batch int, loss float64) {
			if epoch == 6 {
				cancel()
			}
		}}
	_, err := Run(ctx, toyDataset(300, 3), cfg, opts)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	opts.OnBatch, opts.Resume = nil, true
	got, err := Run(context.Background(), toyDataset(300, 3), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got.ResumedFrom == nil || *got.ResumedFrom != (Cursor{Epoch: 7, Batch: 0}) {
		t.Fatalf("resumed from %+v, want epoch 7 batch 0", got.ResumedFrom)
	}
	sameLosses(t, ref, got)
	if got.TestAccuracy != ref.TestAccuracy || got.SelectedEpoch != ref.SelectedEpoch {
		t.Fatalf("headline differs: %v@%d vs %v@%d", got.TestAccuracy, got.SelectedEpoch, ref.TestAccuracy, ref.SelectedEpoch)
	}

	// A finished run resumes to the same report without training.
	again, err := Run(context.Background(), toyDataset(300, 3), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if *again.ResumedFrom != (Cursor{Epoch: 12}) {
		t.Fatalf("resumed finished run from %+v", again.ResumedFrom)
	}
	sameLosses(t, ref, again)

	// Extending a finished run continues it.
	cfg.Epochs = 14
	longer, err := Run(context.Background(), toyDataset(300, 3), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	full := quietRun(t, cfg, Options{})
	sameLosses(t, full, longer)
}

func TestCheckpointMisuse(t *testing.T) {
	cfg := sampled(GCN)
	cfg.Epochs = 2
	dir := t.TempDir()
	opts := Options{Backend: cpuBackend(t), CheckpointDir: dir}
	quietRun(t, cfg, opts)

	// Without --resume an existing checkpoint is not overwritten.
	_, err := Run(context.Background(), toyDataset(300, 3), cfg, opts)
	var ce *CheckpointError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("err = %v", err)
	}
	// A different configuration is refused, naming the field.
	opts.Resume = true
	other := cfg
	other.Hidden = 32
	_, err = Run(context.Background(), toyDataset(300, 3), other, opts)
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "hidden is 32") {
		t.Fatalf("err = %v", err)
	}
	// Other data is refused.
	_, err = Run(context.Background(), toyDataset(303, 3), cfg, opts)
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("err = %v", err)
	}
	// A corrupt file is a format error naming the file.
	path := filepath.Join(dir, CheckpointFile)
	data, _ := os.ReadFile(path)
	data[len(data)/2] ^= 0x40
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), toyDataset(300, 3), cfg, opts)
	if !errors.Is(err, checkpoint.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v", err)
	}
}

func TestRejectsBadInput(t *testing.T) {
	b := cpuBackend(t)
	cfg := sampled(GCN)
	cases := []struct {
		name string
		edit func(c *Config, o *Options)
		want string
	}{
		{"model", func(c *Config, o *Options) { c.Model = "mlp" }, "unknown model"},
		{"fanouts", func(c *Config, o *Options) { c.Fanouts = []int{5} }, "1 fanouts for 2 layers"},
		{"full mode", func(c *Config, o *Options) { c.Mode = Full }, "package fullgraph's"},
		{"eval every", func(c *Config, o *Options) { c.EvalEvery = 0 }, "eval_every"},
		{"lr", func(c *Config, o *Options) { c.LR = math.NaN() }, "lr"},
		{"resume", func(c *Config, o *Options) { o.Resume = true }, "checkpoint directory"},
		{"backend", func(c *Config, o *Options) { o.Backend = nil }, "no back end"},
	}
	for _, tc := range cases {
		c, o := cfg, Options{Backend: b}
		tc.edit(&c, &o)
		_, err := Run(context.Background(), toyDataset(60, 3), c, o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	ds := toyDataset(60, 3)
	ds.Features = nil
	if _, err := Run(context.Background(), ds, cfg, Options{Backend: b}); err == nil || !strings.Contains(err.Error(), "no node features") {
		t.Errorf("featureless dataset: err = %v", err)
	}
	ds = toyDataset(60, 3)
	ds.Labels[ds.Train[0]] = -1
	if _, err := Run(context.Background(), ds, cfg, Options{Backend: b}); err == nil || !strings.Contains(err.Error(), "label -1") {
		t.Errorf("unlabeled train node: err = %v", err)
	}
}

func TestMain(m *testing.M) {
	progress.Quiet = true
	os.Exit(m.Run())
}

func TestSampledSAGELearnsAndResumesMidEpoch(t *testing.T) {
	cfg := Defaults(SAGE)
	cfg.Epochs, cfg.BatchSize, cfg.Hidden = 15, 8, 16
	ref := quietRun(t, cfg, Options{})
	nb := (30 + 7) / 8
	if len(ref.Epochs[0].BatchLosses) != nb {
		t.Fatalf("%d batches per epoch, want %d", len(ref.Epochs[0].BatchLosses), nb)
	}
	if ref.TestAccuracy < 0.75 {
		t.Fatalf("sampled sage test accuracy %v < 0.75", ref.TestAccuracy)
	}
	for _, ev := range []string{Sampled} {
		c := cfg
		c.Eval, c.EvalFanouts = ev, []int{-1, -1}
		r := quietRun(t, c, Options{})
		// Sampling every neighbor is full-neighbor inference.
		sameLosses(t, ref, r)
		if r.TestAccuracy != ref.TestAccuracy {
			t.Fatalf("eval sampled with fanout -1: test %v, full eval %v", r.TestAccuracy, ref.TestAccuracy)
		}
	}

	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	opts := Options{Backend: cpuBackend(t), CheckpointDir: dir, CheckpointEvery: 3,
		OnBatch: func(epoch, batch int, loss float64) {
			if epoch == 7 && batch == 1 {
				cancel()
			}
		}}
	if _, err := Run(ctx, toyDataset(300, 3), cfg, opts); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v", err)
	}
	opts.OnBatch, opts.Resume = nil, true
	got, err := Run(context.Background(), toyDataset(300, 3), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if *got.ResumedFrom != (Cursor{Epoch: 7, Batch: 2}) {
		t.Fatalf("resumed from %+v, want epoch 7 batch 2", got.ResumedFrom)
	}
	sameLosses(t, ref, got)
}

func TestSGDMomentumResumeAndDirectedGraph(t *testing.T) {
	cfg := sampled(GCN)
	cfg.Optimizer, cfg.LR, cfg.Momentum, cfg.Epochs = "sgd", 0.2, 0.9, 10
	ds := func() *dataset.Dataset {
		d := toyDataset(300, 3)
		d.Directed = true // message passing then reads the transpose
		return d
	}
	ref, err := Run(context.Background(), ds(), cfg, Options{Backend: cpuBackend(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !(ref.Epochs[9].Loss < ref.Epochs[0].Loss) {
		t.Fatalf("sgd loss did not fall: %v -> %v", ref.Epochs[0].Loss, ref.Epochs[9].Loss)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	opts := Options{Backend: cpuBackend(t), CheckpointDir: dir,
		OnBatch: func(epoch, batch int, loss float64) {
			if epoch == 3 {
				cancel()
			}
		}}
	if _, err := Run(ctx, ds(), cfg, opts); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v", err)
	}
	f, err := checkpoint.ReadFile(filepath.Join(dir, CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if f.Tensor("optim/momentum/layer0.weight") == nil {
		var names []string
		for _, t := range f.Tensors {
			names = append(names, t.Name)
		}
		t.Fatalf("no momentum buffer in the checkpoint: %v", names)
	}
	opts.OnBatch, opts.Resume = nil, true
	got, err := Run(context.Background(), ds(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	sameLosses(t, ref, got)
}

// TestEvalEvery: with EvalEvery 2 the sampled trainer evaluates epochs 2,
// 4 and the last only, trains exactly as with every epoch evaluated, and
// selects among the evaluated epochs.
func TestEvalEvery(t *testing.T) {
	cfg := sampled(SAGE)
	cfg.Epochs, cfg.BatchSize, cfg.Hidden = 5, 8, 16
	ref := quietRun(t, cfg, Options{})
	cfg.EvalEvery = 2
	got := quietRun(t, cfg, Options{})
	if len(got.Epochs) != 5 {
		t.Fatalf("%d epochs", len(got.Epochs))
	}
	for i, e := range got.Epochs {
		want := e.Epoch == 2 || e.Epoch == 4 || e.Epoch == 5
		if e.EvalSkipped == want {
			t.Errorf("epoch %d: eval skipped %v", e.Epoch, e.EvalSkipped)
		}
		r := ref.Epochs[i]
		if e.Loss != r.Loss || (want && (e.TestAccuracy != r.TestAccuracy || e.ValLoss != r.ValLoss)) {
			t.Errorf("epoch %d: %+v, evaluating every epoch %+v", e.Epoch, e, r)
		}
	}
	if s := got.SelectedEpoch; s != 2 && s != 4 && s != 5 {
		t.Errorf("selected epoch %d was not evaluated", s)
	}
}
