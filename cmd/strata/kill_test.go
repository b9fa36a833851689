package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/strata-gnn/strata/train"
	"github.com/strata-gnn/strata/train/checkpoint"
)

// startStrata runs this test binary as the strata command (see TestMain).
func startStrata(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "STRATA_TEST_MAIN=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

func runStrata(t *testing.T, args ...string) {
	t.Helper()
	cmd, out := startStrata(t, args...)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("strata %v: %v\n%s", args, err, out)
	}
}

// cursorOf reads the cursor of the checkpoint at path; ok is false while
// there is no checkpoint yet.
func cursorOf(t *testing.T, path string) (c train.Cursor, ok bool) {
	f, err := checkpoint.ReadFile(path)
	if os.IsNotExist(err) {
		return c, false
	}
	if err != nil {
		t.Fatalf("checkpoint unreadable while training: %v", err)
	}
	var m struct {
		Cursor train.Cursor `json:"cursor"`
	}
	if err := json.Unmarshal(f.Meta, &m); err != nil {
		t.Fatal(err)
	}
	return m.Cursor, true
}

// TestSIGKILLThenResumeIsExact kills a training process with SIGKILL in
// the middle of an epoch, after a checkpoint was written, resumes it, and
// checks that every batch loss and every evaluation equals, bit for bit,
// those of a run that was never stopped.
func TestSIGKILLThenResumeIsExact(t *testing.T) {
	dir := t.TempDir()
	// 140 training nodes in batches of 8: 18 batches per epoch; a
	// checkpoint every 5 batches falls inside epochs.
	epochs := "10"
	if testing.Short() {
		epochs = "4" // the kill lands in epoch 2; -race makes each epoch slow
	}
	common := []string{"--quiet", "train", "--device", "cpu", "--model", "sage", "--hidden", "16", "--batch-size", "8",
		"--fanouts", "5,5", "--epochs", epochs, "--seed", "11"}
	ref := filepath.Join(dir, "ref.json")
	runStrata(t, append(common, "--report", ref)...)

	ckdir := filepath.Join(dir, "ck")
	ckfile := filepath.Join(ckdir, train.CheckpointFile)
	withCk := append(common, "--checkpoint", ckdir, "--checkpoint-every", "5", "--report", filepath.Join(dir, "resumed.json"))
	victim, out := startStrata(t, withCk...)
	done := make(chan error, 1)
	go func() { done <- victim.Wait() }()
	deadline := time.After(2 * time.Minute)
	for {
		if c, ok := cursorOf(t, ckfile); ok && c.Epoch >= 1 && c.Batch > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("training ended before it could be killed (%v): make the run longer\n%s", err, out)
		case <-deadline:
			victim.Process.Kill()
			t.Fatal("no mid-epoch checkpoint after 2 minutes")
		case <-time.After(2 * time.Millisecond):
		}
	}
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-done
	ws, ok := victim.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("victim was not killed by SIGKILL: %v", err)
	}
	at, _ := cursorOf(t, ckfile)
	if at.Batch == 0 {
		t.Fatalf("the last checkpoint is at an epoch boundary (%+v), want mid-epoch", at)
	}
	if _, err := os.Stat(filepath.Join(dir, "resumed.json")); err == nil {
		t.Fatal("the killed run wrote a report")
	}

	runStrata(t, append(withCk, "--resume")...)
	want, err := train.ReadReport(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := train.ReadReport(filepath.Join(dir, "resumed.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got.ResumedFrom == nil || *got.ResumedFrom != at {
		t.Fatalf("resumed from %+v, the checkpoint was at %+v", got.ResumedFrom, at)
	}
	if len(got.Epochs) != len(want.Epochs) {
		t.Fatalf("%d epochs after resume, want %d", len(got.Epochs), len(want.Epochs))
	}
	n := 0
	for i := range want.Epochs {
		w, g := want.Epochs[i], got.Epochs[i]
		if len(w.BatchLosses) != 18 || len(g.BatchLosses) != 18 {
			t.Fatalf("epoch %d: %d and %d batch losses, want 18", i+1, len(w.BatchLosses), len(g.BatchLosses))
		}
		for j := range w.BatchLosses {
			if math.Float64bits(w.BatchLosses[j]) != math.Float64bits(g.BatchLosses[j]) {
				t.Fatalf("epoch %d batch %d: loss %v after resume, %v uninterrupted", i+1, j, g.BatchLosses[j], w.BatchLosses[j])
			}
			n++
		}
		if w.Loss != g.Loss || w.TrainAccuracy != g.TrainAccuracy || w.ValAccuracy != g.ValAccuracy ||
			w.TestAccuracy != g.TestAccuracy || w.ValLoss != g.ValLoss {
			t.Fatalf("epoch %d evaluation differs:\n got %+v\nwant %+v", i+1, g, w)
		}
	}
	if got.TestAccuracy != want.TestAccuracy || got.SelectedEpoch != want.SelectedEpoch {
		t.Fatalf("headline: test %v at %d after resume, %v at %d uninterrupted", got.TestAccuracy, got.SelectedEpoch, want.TestAccuracy, want.SelectedEpoch)
	}
	t.Logf("killed at epoch %d batch %d; %d batch losses identical", at.Epoch+1, at.Batch, n)
}
