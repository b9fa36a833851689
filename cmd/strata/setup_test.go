package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/fullgraph"
	"github.com/strata-gnn/strata/train"
)

// oneLineError checks a failed run's stderr: one line, naming want, no
// stack trace.
func oneLineError(t *testing.T, what string, code int, stderr, want string) {
	t.Helper()
	if code == 0 || strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 || !strings.Contains(stderr, want) ||
		strings.Contains(stderr, "goroutine") || strings.Contains(stderr, "panic") {
		t.Errorf("%s: exit %d, stderr %q; want a one-line error naming %q", what, code, stderr, want)
	}
}

// TestCheckpointUnusable: a --checkpoint that is a file, or lies under
// one, from a flag or a config file, is a one-line error naming it (it
// used to panic in the trainer's setup).
func TestCheckpointUnusable(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, filepath.Join(dir, "passwd"), "root:x:0:0\n")
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, train.CheckpointFile), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, mode := range [][]string{nil, {"--devices", "cpu:2"}} {
		for _, tc := range []struct{ ck, want string }{
			{file, file},
			{filepath.Join(file, "ck"), file},
			{blocked, filepath.Join(blocked, train.CheckpointFile) + " is a directory"},
		} {
			args := append([]string{"--quiet", "train", "--epochs", "1", "--checkpoint", tc.ck}, mode...)
			code, _, errOut := strata(t, args...)
			oneLineError(t, strings.Join(args, " "), code, errOut, tc.want)
		}
	}
	cfg := writeFile(t, filepath.Join(dir, "f.yaml"), "checkpoint: "+file+"\nepochs: 1\n")
	code, _, errOut := strata(t, "--quiet", "--config", cfg, "train")
	oneLineError(t, "checkpoint: in "+cfg, code, errOut, file)
}

// TestGATDropoutCombinations: GAT without input dropout but with
// attention dropout, and the reverse, trains with finite losses.
func TestGATDropoutCombinations(t *testing.T) {
	dir := t.TempDir()
	for _, rates := range [][2]string{{"0", "0.5"}, {"0.5", "0"}} {
		want := map[string]float64{"0": 0, "0.5": 0.5}
		rep := filepath.Join(dir, "gat-"+rates[0]+"-"+rates[1]+".json")
		code, out, errOut := strata(t, "--quiet", "train", "--model", "gat", "--epochs", "2", "--hidden", "4", "--heads", "2",
			"--dropout", rates[0], "--attn-dropout", rates[1], "--report", rep)
		if code != 0 || !strings.Contains(out, "test accuracy") {
			t.Fatalf("--dropout %s --attn-dropout %s: exit %d, stderr %q", rates[0], rates[1], code, errOut)
		}
		r, err := fullgraph.ReadReport(rep)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Epochs) != 2 {
			t.Fatalf("%d epochs", len(r.Epochs))
		}
		for _, e := range r.Epochs {
			if math.IsNaN(e.Loss) || math.IsInf(e.Loss, 0) {
				t.Fatalf("--dropout %s --attn-dropout %s: epoch %d loss %v", rates[0], rates[1], e.Epoch, e.Loss)
			}
		}
		if r.Config.Dropout != want[rates[0]] || r.Config.AttnDrop != want[rates[1]] {
			t.Fatalf("report config dropout %v attention %v", r.Config.Dropout, r.Config.AttnDrop)
		}
	}
}

// TestDevicesResumeFinished: --resume of a checkpoint that has done
// every epoch prints the stored results and exits 0, as on one device (it
// exited 1 with "nothing to resume").
func TestDevicesResumeFinished(t *testing.T) {
	dir := t.TempDir()
	base := []string{"train", "--quiet", "--devices", "cpu:2", "--hidden", "16", "--epochs", "2", "--checkpoint", dir}
	code, first, errOut := strata(t, base...)
	if code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, errOut)
	}
	code, again, errOut := strata(t, append(base, "--resume")...)
	if code != 0 {
		t.Fatalf("resume with every epoch done: exit %d, stderr %q", code, errOut)
	}
	accuracies := func(out string) string { // the validation and test lines
		lines := strings.SplitN(out, "\n", 3)
		return strings.Join(lines[:min(2, len(lines))], "\n")
	}
	if a, b := accuracies(first), accuracies(again); !strings.Contains(a, "test accuracy") || a != b {
		t.Fatalf("resumed run printed\n%s\nthe run printed\n%s", b, a)
	}
}
