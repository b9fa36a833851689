package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
)

// TestTwoMachinesGPUMachineDirs: two simulated machines with one GPU
// each (processes with their own STRATA_HOST_ID and NCCL_HOSTID,
// CUDA_VISIBLE_DEVICES 0 and 1), each loading only its machine
// directory (the GPU store: its shard on the device and pinned, other
// machines' rows staged from the feature service), train Cora with the
// losses of one process with cuda:0,1 (within the GPU tests' tolerance).
// Skipped without 2 GPUs.
func TestTwoMachinesGPUMachineDirs(t *testing.T) {
	if len(gputest.All(t)) < 2 {
		t.Skip("needs 2 GPUs")
	}
	dir := t.TempDir()
	parts := filepath.Join(dir, "parts")
	if code, out, errs := strata(t, "partition", "--machines", "2", "--devices-per-machine", "1", "--seed", "7", "cora", parts); code != 0 {
		t.Fatalf("partition: exit %d\n%s%s", code, out, errs)
	}
	ref := filepath.Join(dir, "one.json")
	if code, _, errs := strata(t, jobArgs("cuda:0,1", 3, "--cache", "64KiB", "--report", ref)...); code != 0 {
		t.Fatalf("one process: exit %d\n%s", code, errs)
	}
	got := filepath.Join(dir, "job.json")
	args := jobArgs("cuda:0", 3, "--cache", "64KiB", "--remote-cache", "1MiB", "--report", got)
	cmd := append([]string{"/bin/sh", "-c", `exec "$0" "$@" --machine-dir "$STRATA_TEST_MACHINE_DIR"`, os.Args[0]}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out syncBuffer
	cfg := launch.Config{N: 2, Command: cmd, Env: []string{"STRATA_TEST_MAIN=1", "NCCL_NVLS_ENABLE=0", "NCCL_SOCKET_IFNAME=lo"},
		PerRank: func(r int) []string {
			return []string{fmt.Sprintf("STRATA_HOST_ID=machine%d", r), fmt.Sprintf("NCCL_HOSTID=machine%d", r),
				fmt.Sprintf("CUDA_VISIBLE_DEVICES=%d", r), fmt.Sprintf("STRATA_COMM_HOST=127.0.0.%d", r+1),
				"STRATA_TEST_MACHINE_DIR=" + filepath.Join(parts, fmt.Sprintf("machine-%d", r))}
		},
		Stdout: &out, Stderr: &out, Prefix: true, Grace: time.Second}
	if _, err := launch.Run(ctx, cfg); err != nil {
		t.Fatalf("job: %v\n%s", err, out.String())
	}
	want, rep := readReport(t, ref), readReport(t, got)
	if len(rep.Epochs) != len(want.Epochs) || len(want.Epochs) == 0 {
		t.Fatalf("%d epochs, want %d", len(rep.Epochs), len(want.Epochs))
	}
	worst, n := 0.0, 0
	for i, w := range want.Epochs {
		g := rep.Epochs[i]
		if len(g.BatchLosses) != len(w.BatchLosses) {
			t.Fatalf("epoch %d: %d batch losses, want %d", w.Epoch, len(g.BatchLosses), len(w.BatchLosses))
		}
		for b := range w.BatchLosses {
			worst = max(worst, math.Abs(g.BatchLosses[b]-w.BatchLosses[b])/math.Abs(w.BatchLosses[b]))
			n++
		}
	}
	w := reportWorld(t, got)
	t.Logf("%d batch losses, largest relative difference to one process %.2e; test accuracy %.4f (one process %.4f); per machine %+v",
		n, worst, rep.TestAccuracy, want.TestAccuracy, w.PerMachine)
	if worst > 1e-3 || math.Abs(rep.TestAccuracy-want.TestAccuracy) > 0.02 {
		t.Fatalf("losses differ by up to %.2e relative, test accuracy %.4f vs %.4f", worst, rep.TestAccuracy, want.TestAccuracy)
	}
	if w.Machines != 2 || len(w.PerMachine) != 2 {
		t.Fatalf("report.world %+v", w)
	}
	for _, m := range w.PerMachine {
		if rf := m.RemoteFeatures; rf == nil || rf.Rows <= 0 {
			t.Fatalf("machine %d fetched no remote rows: %+v", m.Machine, rf)
		}
	}
}
