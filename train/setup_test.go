package train

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckpointDirectoryUnusable: a checkpoint directory that is a file,
// lies under a file, or holds a directory where the checkpoint goes is a
// *RunError naming the path, before any training (it used to panic in
// the setup's cleanup).
func TestCheckpointDirectoryUnusable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, CheckpointFile), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := sampled(GCN)
	cfg.Epochs = 1
	for _, tc := range []struct{ dir, want string }{
		{file, file},
		{filepath.Join(file, "ck"), file},
		{blocked, filepath.Join(blocked, CheckpointFile) + " is a directory"},
	} {
		batches := 0
		_, err := Run(context.Background(), toyDataset(60, 3), cfg, Options{Backend: cpuBackend(t), CheckpointDir: tc.dir,
			OnBatch: func(int, int, float64) { batches++ }})
		var re *RunError
		if !errors.As(err, &re) || re.Op != "checkpoint directory" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("checkpoint directory %s: %v, want a RunError naming %s", tc.dir, err, tc.want)
		}
		if batches != 0 {
			t.Errorf("checkpoint directory %s: trained %d batches before failing", tc.dir, batches)
		}
	}
}

// TestGATDropoutSettings: GAT with no input dropout but attention
// dropout, or the reverse, trains (it used to be refused, and the
// refusal panicked) with finite losses, and each zero rate is no
// dropout, not the model's default 0.6.
func TestGATDropoutSettings(t *testing.T) {
	run := func(dropout, attn float64) []float64 {
		t.Helper()
		cfg := sampled(GAT)
		cfg.Epochs, cfg.Hidden, cfg.Heads = 3, 4, 2
		cfg.Dropout, cfg.AttnDrop = dropout, attn
		rep := quietRun(t, cfg, Options{})
		l := losses(rep)
		if len(l) != 3 {
			t.Fatalf("dropout %v attention %v: %d losses", dropout, attn, len(l))
		}
		for _, x := range l {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("dropout %v attention %v: losses %v", dropout, attn, l)
			}
		}
		return l
	}
	noInput, noAttn := run(0, 0.5), run(0.5, 0)
	for _, c := range []struct {
		name string
		a, b []float64
	}{
		{"input dropout 0 (vs 0.6)", noInput, run(0.6, 0.5)},
		{"attention dropout 0.5 (vs 0)", noInput, run(0, 0)},
		{"attention dropout 0 (vs 0.6)", noAttn, run(0.5, 0.6)},
	} {
		if slices.Equal(c.a, c.b) {
			t.Errorf("%s: same losses %v: the rate was not applied as asked", c.name, c.a)
		}
	}
}
