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
// directory (the GPU store: its shard and its hot rows of the other
// machine on the device as far as --cache goes, the rest of the shard
// pinned, the other rows staged from the feature service), train Cora
// with the losses of one process with cuda:0,1 (within the GPU tests'
// tolerance), with a small cache and with every local row on the device.
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
	// --cache 64KiB: a few rows in device memory, most of the hot rows
	// staged; all: the shard and every hot row of the other machine in
	// device memory (the gather kernel's held rows), only cold rows
	// staged. The same losses either way.
	for _, c := range []struct{ name, cache string }{{"job", "64KiB"}, {"all", "all"}} {
		got := filepath.Join(dir, c.name+".json")
		args := jobArgs("cuda:0", 3, "--cache", c.cache, "--remote-cache", "1MiB", "--report", got)
		cmd := append([]string{"/bin/sh", "-c", `exec "$0" "$@" --machine-dir "$STRATA_TEST_MACHINE_DIR"`, os.Args[0]}, args...)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		var out syncBuffer
		cfg := launch.Config{N: 2, Command: cmd, Env: []string{"STRATA_TEST_MAIN=1", "NCCL_NVLS_ENABLE=0", "NCCL_SOCKET_IFNAME=lo"},
			PerRank: func(r int) []string {
				return []string{fmt.Sprintf("STRATA_HOST_ID=machine%d", r), fmt.Sprintf("NCCL_HOSTID=machine%d", r),
					fmt.Sprintf("CUDA_VISIBLE_DEVICES=%d", r), fmt.Sprintf("STRATA_COMM_HOST=127.0.0.%d", r+1),
					"STRATA_TEST_MACHINE_DIR=" + filepath.Join(parts, fmt.Sprintf("machine-%d", r))}
			},
			Stdout: &out, Stderr: &out, Prefix: true, Grace: time.Second}
		_, err := launch.Run(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatalf("job with --cache %s: %v\n%s", c.cache, err, out.String())
		}
		want, rep := readReport(t, ref), readReport(t, got)
		if len(rep.Epochs) != len(want.Epochs) || len(want.Epochs) == 0 {
			t.Fatalf("--cache %s: %d epochs, want %d", c.cache, len(rep.Epochs), len(want.Epochs))
		}
		worst, n := 0.0, 0
		for i, w := range want.Epochs {
			g := rep.Epochs[i]
			if len(g.BatchLosses) != len(w.BatchLosses) {
				t.Fatalf("--cache %s epoch %d: %d batch losses, want %d", c.cache, w.Epoch, len(g.BatchLosses), len(w.BatchLosses))
			}
			for b := range w.BatchLosses {
				worst = max(worst, math.Abs(g.BatchLosses[b]-w.BatchLosses[b])/math.Abs(w.BatchLosses[b]))
				n++
			}
		}
		w := reportWorld(t, got)
		t.Logf("--cache %s: %d batch losses, largest relative difference to one process %.2e; test accuracy %.4f (one process %.4f); per machine %+v",
			c.cache, n, worst, rep.TestAccuracy, want.TestAccuracy, w.PerMachine)
		if worst > 1e-3 || math.Abs(rep.TestAccuracy-want.TestAccuracy) > 0.02 {
			t.Fatalf("--cache %s: losses differ by up to %.2e relative, test accuracy %.4f vs %.4f", c.cache, worst, rep.TestAccuracy, want.TestAccuracy)
		}
		if w.Machines != 2 || len(w.PerMachine) != 2 {
			t.Fatalf("report.world %+v", w)
		}
		for _, m := range w.PerMachine {
			rf := m.RemoteFeatures
			if rf == nil || rf.Rows <= 0 || rf.HotRows <= 0 {
				t.Fatalf("--cache %s: machine %d fetched no remote rows or read no hot rows: %+v", c.cache, m.Machine, rf)
			}
			if c.cache == "all" && rf.HotDeviceRows != rf.HotRows {
				t.Fatalf("--cache all: machine %d read %d of its %d hot rows from device memory, want all", m.Machine, rf.HotDeviceRows, rf.HotRows)
			}
		}
	}
}
