package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/train"
)

// job is a run of this test binary as 'strata' in n processes started by
// comm/launch, each one a simulated machine: its own host id
// (STRATA_HOST_ID) and its own loopback address (127.0.0.r+1, where its
// TCP endpoints bind), so the processes talk over TCP as machines do.
type job struct {
	done    chan struct{}
	results []launch.Result
	err     error
	out     syncBuffer
}

// syncBuffer is a bytes.Buffer the launcher's writers share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startJob launches n processes of 'strata args...'; with keepGoing a
// failed process does not stop the others (the survivors must notice).
func startJob(t *testing.T, n int, keepGoing bool, args ...string) *job {
	t.Helper()
	j := &job{done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cfg := launch.Config{N: n, Command: append([]string{os.Args[0]}, args...), Env: []string{"STRATA_TEST_MAIN=1"},
		PerRank: func(r int) []string {
			return []string{fmt.Sprintf("STRATA_HOST_ID=machine%d", r), fmt.Sprintf("STRATA_COMM_HOST=127.0.0.%d", r+1)}
		},
		Stdout: &j.out, Stderr: &j.out, Prefix: true, KeepGoing: keepGoing, Grace: time.Second}
	go func() {
		defer close(j.done)
		defer cancel()
		j.results, j.err = launch.Run(ctx, cfg)
	}()
	t.Cleanup(func() { cancel(); <-j.done })
	return j
}

// wait waits for the job; a job still running after limit fails the
// test (a hang guard: the processes have their own deadlines).
func (j *job) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case <-j.done:
		return j.err
	case <-time.After(limit):
		t.Fatalf("the job still runs after %v:\n%s", limit, j.out.String())
	}
	return nil
}

// jobArgs is the training both the one-process run and the jobs do:
// GraphSAGE on the built-in Cora, one batch per device and epoch.
func jobArgs(devices string, epochs int, more ...string) []string {
	a := []string{"--quiet", "train", "--devices", devices, "--hidden", "16", "--batch-size", "32", "--fanouts", "5,5",
		"--epochs", fmt.Sprint(epochs), "--seed", "7", "--stall-timeout", "30s"}
	return append(a, more...)
}

// sameRun fails unless got's losses (every batch) and accuracies are
// want's, bit for bit.
func sameRun(t *testing.T, got, want *train.Report) int {
	t.Helper()
	if len(got.Epochs) != len(want.Epochs) || len(want.Epochs) == 0 {
		t.Fatalf("%d epochs, want %d", len(got.Epochs), len(want.Epochs))
	}
	n := 0
	for i, w := range want.Epochs {
		g := got.Epochs[i]
		if len(g.BatchLosses) != len(w.BatchLosses) {
			t.Fatalf("epoch %d: %d batch losses, want %d", w.Epoch, len(g.BatchLosses), len(w.BatchLosses))
		}
		for b := range w.BatchLosses {
			if math.Float64bits(g.BatchLosses[b]) != math.Float64bits(w.BatchLosses[b]) {
				t.Fatalf("epoch %d batch %d: loss %v, one process %v", w.Epoch, b, g.BatchLosses[b], w.BatchLosses[b])
			}
			n++
		}
		if g.TestAccuracy != w.TestAccuracy || g.ValAccuracy != w.ValAccuracy {
			t.Fatalf("epoch %d: test %v val %v, one process %v %v", w.Epoch, g.TestAccuracy, g.ValAccuracy, w.TestAccuracy, w.ValAccuracy)
		}
	}
	if got.TestAccuracy != want.TestAccuracy {
		t.Fatalf("test accuracy %v, one process %v", got.TestAccuracy, want.TestAccuracy)
	}
	return n
}

// readReport reads the training part of a report file (the engines add
// their own sections).
func readReport(t *testing.T, path string) *train.Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r train.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// reportWorld reads the "world" section of a report file.
func reportWorld(t *testing.T, path string) world.Info {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		World world.Info `json:"world"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.World
}

// TestTwoMachinesEqualOneProcess: two simulated machines, each a process
// with cpu:2, train Cora with the batch losses (bit for bit) and test
// accuracy of one process with cpu:4.
func TestTwoMachinesEqualOneProcess(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "one.json")
	if code, _, errs := strata(t, jobArgs("cpu:4", 3, "--report", ref)...); code != 0 {
		t.Fatalf("one process: exit %d\n%s", code, errs)
	}
	got := filepath.Join(dir, "job.json")
	j := startJob(t, 2, false, jobArgs("cpu:2", 3, "--report", got)...)
	if err := j.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("job: %v\n%s", err, j.out.String())
	}
	want, rep := readReport(t, ref), readReport(t, got)
	n := sameRun(t, rep, want)
	if w := reportWorld(t, got); w.Machines != 2 || w.Processes != 2 || w.Ranks != 4 || w.Comm != "tcp" {
		t.Fatalf("report.world %+v", w)
	}
	if out := j.out.String(); !strings.Contains(out, "[rank 1] process 1 of 2 (host machine1, ranks 2-3): trained 3 epochs") ||
		!strings.Contains(out, "[rank 0] test accuracy") {
		t.Fatalf("output:\n%s", out)
	}
	t.Logf("%d batch losses identical, test accuracy %.4f", n, rep.TestAccuracy)
}

// TestJobRefusesAnotherConfig: a process started with other training
// flags is refused by name, before training, and so is the job.
func TestJobRefusesAnotherConfig(t *testing.T) {
	j := &job{done: make(chan struct{})}
	cfg := launch.Config{N: 2, Env: []string{"STRATA_TEST_MAIN=1"},
		Command: []string{"/bin/sh", "-c", `exec "$0" train --devices cpu:1 --epochs 1 --lr "0.0$((RANK+1))"`, os.Args[0]},
		Stdout:  &j.out, Stderr: &j.out, Prefix: true, KeepGoing: true}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	j.results, j.err = launch.Run(ctx, cfg)
	out := j.out.String()
	for _, r := range j.results {
		if r.Err == nil {
			t.Fatalf("process %d succeeded:\n%s", r.Rank, out)
		}
	}
	want := "has another config than process 0: lr is 0.02 there, 0.01 on process 0"
	if strings.Count(out, want) != 2 || strings.Contains(out, "epoch 1/1") {
		t.Fatalf("want both processes to refuse, naming --lr, before training:\n%s", out)
	}
}

// TestKillMachineThenResume: SIGKILL one machine's process mid-run: the
// other fails within the deadline naming it (process, host, ranks); the
// job started again with --resume ends with the losses of a run that was
// never stopped, bit for bit.
func TestKillMachineThenResume(t *testing.T) {
	dir := t.TempDir()
	const epochs = 12
	ref := filepath.Join(dir, "one.json")
	if code, _, errs := strata(t, jobArgs("cpu:4", epochs, "--report", ref)...); code != 0 {
		t.Fatalf("one process: exit %d\n%s", code, errs)
	}
	ck := filepath.Join(dir, "ck")
	got := filepath.Join(dir, "job.json")
	args := jobArgs("cpu:2", epochs, "--checkpoint", ck, "--report", got)
	j := startJob(t, 2, true, args...)
	state := filepath.Join(ck, "process-1.json")
	deadline := time.After(2 * time.Minute)
	var pid int
	for pid == 0 {
		if b, err := os.ReadFile(state); err == nil {
			st, err := world.ParseState(state, b)
			if err != nil {
				t.Fatal(err)
			}
			pid = st.PID
			break
		}
		select {
		case <-j.done:
			t.Fatalf("the job ended before it could be killed: %v\n%s", j.err, j.out.String())
		case <-deadline:
			t.Fatalf("no state file after 2 minutes:\n%s", j.out.String())
		case <-time.After(2 * time.Millisecond):
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := j.wait(t, 2*time.Minute) // the stall timeout is 30s
	if err == nil {
		t.Fatalf("the job succeeded with a process killed:\n%s", j.out.String())
	}
	out := j.out.String()
	if !strings.Contains(out, "[rank 0] strata: ") || !strings.Contains(out, "process 1 (host machine1 at 127.0.0.2") || !strings.Contains(out, "ranks 2-3)") {
		t.Fatalf("process 0 does not name the killed process 1:\n%s", out)
	}
	for _, r := range j.results {
		if r.Rank == 0 && (r.Err == nil || r.Stopped) {
			t.Fatalf("process 0: %+v: it must fail by itself", r)
		}
	}
	if _, err := os.Stat(got); err == nil {
		t.Fatal("the killed job wrote a report")
	}

	j = startJob(t, 2, false, append(args, "--resume")...)
	if err := j.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("resume: %v\n%s", err, j.out.String())
	}
	want, rep := readReport(t, ref), readReport(t, got)
	if rep.ResumedFrom == nil || rep.ResumedFrom.Epoch < 1 || rep.ResumedFrom.Epoch >= epochs {
		t.Fatalf("resumed from %+v", rep.ResumedFrom)
	}
	n := sameRun(t, rep, want)
	t.Logf("killed after epoch %d; %d batch losses identical after resume; the survivor said:\n%s", rep.ResumedFrom.Epoch, n, out)
}

// TestStoppedMachineFailsTheOther: a machine's process that stops
// (SIGSTOP: alive, silent) makes the other fail within the stall
// timeout, naming it.
func TestStoppedMachineFailsTheOther(t *testing.T) {
	ck := t.TempDir()
	args := jobArgs("cpu:2", 200, "--checkpoint", ck)
	for i, a := range args {
		if a == "30s" {
			args[i] = "3s" // --stall-timeout
		}
	}
	j := startJob(t, 2, true, args...)
	state := filepath.Join(ck, "process-1.json")
	deadline := time.After(2 * time.Minute)
	var pid int
	for pid == 0 {
		if b, err := os.ReadFile(state); err == nil {
			st, err := world.ParseState(state, b)
			if err != nil {
				t.Fatal(err)
			}
			pid = st.PID
			break
		}
		select {
		case <-j.done:
			t.Fatalf("the job ended before it could be stopped: %v\n%s", j.err, j.out.String())
		case <-deadline:
			t.Fatalf("no state file after 2 minutes:\n%s", j.out.String())
		case <-time.After(2 * time.Millisecond):
		}
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	// Process 0 fails by itself; the launcher (KeepGoing) then waits for
	// the stopped one, which the test kills once process 0 is out.
	for {
		out := j.out.String()
		if strings.Contains(out, "[rank 0] strata: ") {
			if !strings.Contains(out, "process 1 (host machine1 at 127.0.0.2") {
				t.Fatalf("process 0 does not name the stopped process 1:\n%s", out)
			}
			t.Logf("process 0 said:\n%s", out)
			break
		}
		select {
		case <-j.done:
			t.Fatalf("the job ended: %v\n%s", j.err, out)
		case <-deadline: // a hang guard far beyond the 3s stall timeout
			t.Fatalf("process 0 has not failed:\n%s", out)
		case <-time.After(20 * time.Millisecond):
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
	j.wait(t, time.Minute)
}

// TestTwoMachinesInNetworkNamespaces is TestTwoMachinesEqualOneProcess
// with each process in its own network namespace, joined by a veth pair
// (addresses 10.251.x.1 and .2): the store and the TCP transport leave
// loopback, so every connection is mutual TLS with the job's
// certificates. It needs root and working 'ip netns'; it skips
// otherwise.
func TestTwoMachinesInNetworkNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("no ip command")
	}
	id := os.Getpid() % 200
	cmd := func(args ...string) error {
		out, err := exec.Command(ip, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	ns := []string{fmt.Sprintf("strata-%d-0", id), fmt.Sprintf("strata-%d-1", id)}
	veth := []string{fmt.Sprintf("stv%da", id), fmt.Sprintf("stv%db", id)}
	addrs := []string{fmt.Sprintf("10.251.%d.1", id), fmt.Sprintf("10.251.%d.2", id)}
	for _, n := range ns {
		if err := cmd("netns", "add", n); err != nil {
			t.Skipf("network namespaces do not work here: %v", err)
		}
		t.Cleanup(func() { cmd("netns", "del", n) })
	}
	steps := [][]string{{"link", "add", veth[0], "type", "veth", "peer", "name", veth[1]}}
	for i := range ns {
		steps = append(steps, []string{"link", "set", veth[i], "netns", ns[i]},
			[]string{"-n", ns[i], "addr", "add", addrs[i] + "/24", "dev", veth[i]},
			[]string{"-n", ns[i], "link", "set", veth[i], "up"}, []string{"-n", ns[i], "link", "set", "lo", "up"})
	}
	for _, s := range steps {
		if err := cmd(s...); err != nil {
			t.Skipf("cannot wire the namespaces: %v", err)
		}
	}
	dir := t.TempDir()
	ca, cert, key, err := auth.NewTestPKI("strata")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"ca.pem": ca, "node.pem": cert, "node.key": key}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ref := filepath.Join(dir, "one.json")
	if code, _, errs := strata(t, jobArgs("cpu:4", 3, "--report", ref)...); code != 0 {
		t.Fatalf("one process: exit %d\n%s", code, errs)
	}
	got := filepath.Join(dir, "job.json")
	j := &job{done: make(chan struct{})}
	script := fmt.Sprintf(`exec %s netns exec "strata-%d-$RANK" "$0" "$@"`, ip, id)
	cfg := launch.Config{N: 2, Command: append([]string{"/bin/sh", "-c", script, os.Args[0]}, jobArgs("cpu:2", 3, "--report", got)...),
		Env:     []string{"STRATA_TEST_MAIN=1"},
		PerRank: func(r int) []string { return []string{fmt.Sprintf("STRATA_HOST_ID=machine%d", r)} },
		Stdout:  &j.out, Stderr: &j.out, Prefix: true, MasterAddr: addrs[0], MasterPort: 29400 + id,
		Auth: auth.Config{TLSCert: filepath.Join(dir, "node.pem"), TLSKey: filepath.Join(dir, "node.key"), TLSCA: filepath.Join(dir, "ca.pem")}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := launch.Run(ctx, cfg); err != nil {
		t.Fatalf("job: %v\n%s", err, j.out.String())
	}
	n := sameRun(t, readReport(t, got), readReport(t, ref))
	if w := reportWorld(t, got); w.Machines != 2 || w.Comm != "tcp" || w.PerProcess[1].Addr != addrs[1] {
		t.Fatalf("report.world %+v", w)
	}
	t.Logf("%d batch losses identical across namespaces %v over mutual TLS", n, ns)
}

// TestTwoMachinesFullGraph: full-graph training with skip-broadcast
// (Sancus) on two simulated machines x cpu:2 equals one process with
// cpu:4: losses, accuracies and the broadcasts skipped.
func TestTwoMachinesFullGraph(t *testing.T) {
	dir := t.TempDir()
	args := func(devices, report string) []string {
		return []string{"--quiet", "train", "--mode", "fullgraph", "--model", "gcn", "--devices", devices, "--staleness",
			"--epochs", "12", "--seed", "3", "--comm-timeout", "30s", "--report", report}
	}
	ref, got := filepath.Join(dir, "one.json"), filepath.Join(dir, "job.json")
	if code, _, errs := strata(t, args("cpu:4", ref)...); code != 0 {
		t.Fatalf("one process: exit %d\n%s", code, errs)
	}
	j := startJob(t, 2, false, args("cpu:2", got)...)
	if err := j.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("job: %v\n%s", err, j.out.String())
	}
	want, rep := readReport(t, ref), readReport(t, got)
	for i, w := range want.Epochs {
		g := rep.Epochs[i]
		if math.Float64bits(g.Loss) != math.Float64bits(w.Loss) || g.TestAccuracy != w.TestAccuracy {
			t.Fatalf("epoch %d: loss %v test %v, one process %v %v", w.Epoch, g.Loss, g.TestAccuracy, w.Loss, w.TestAccuracy)
		}
	}
	skipped := func(path string) (n int64) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Comm struct {
				Skipped int64 `json:"broadcasts_skipped"`
			} `json:"comm"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		return r.Comm.Skipped
	}
	if s, w := skipped(got), skipped(ref); s != w || s == 0 {
		t.Fatalf("skipped %d broadcasts, one process %d", s, w)
	}
	if w := reportWorld(t, got); w.Processes != 2 || w.Machines != 2 || w.Comm != "tcp" {
		t.Fatalf("report.world %+v", w)
	}
}

// TestJobEnvironmentErrors: a job's environment that cannot work is a
// usage error naming the variable, whatever the mode.
func TestJobEnvironmentErrors(t *testing.T) {
	for _, args := range [][]string{{"--quiet", "train", "--epochs", "1"}, {"--quiet", "train", "--devices", "cpu:2", "--epochs", "1"},
		{"--quiet", "train", "--mode", "fullgraph", "--model", "gcn", "--devices", "cpu:2", "--epochs", "1"}} {
		t.Setenv("RANK", "1")
		t.Setenv("WORLD_SIZE", "2")
		t.Setenv("MASTER_PORT", "29500") // no MASTER_ADDR
		code, _, errs := strata(t, args...)
		if code != 2 || !strings.Contains(errs, "MASTER_ADDR is not set") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: exit %d, %q; want exit 2 and one line naming MASTER_ADDR", args, code, errs)
		}
	}
}

func TestCommTimeoutFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--quiet", "train", "--comm-timeout", "1m"}, "--comm-timeout applies to several devices"},
		{[]string{"--quiet", "train", "--devices", "cpu:2", "--comm-timeout", "soon"}, `--comm-timeout "soon"`},
		{[]string{"--quiet", "train", "--mode", "fullgraph", "--model", "gcn", "--devices", "cpu:2", "--comm-timeout=-1s"}, `--comm-timeout "-1s"`},
	} {
		code, _, errs := strata(t, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 naming %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestJobRefusesGPUShm: --comm gpushm cannot span processes; in a job
// every process refuses it as a usage error (exit 2) naming --comm,
// before training.
func TestJobRefusesGPUShm(t *testing.T) {
	var out syncBuffer
	cfg := launch.Config{N: 2, Env: []string{"STRATA_TEST_MAIN=1"},
		Command: []string{os.Args[0], "train", "--devices", "cpu:1", "--epochs", "1", "--comm", "gpushm"},
		Stdout:  &out, Stderr: &out, Prefix: true, KeepGoing: true}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results, _ := launch.Run(ctx, cfg)
	got := out.String()
	if len(results) != 2 {
		t.Fatalf("%d results:\n%s", len(results), got)
	}
	for _, r := range results {
		var ee *exec.ExitError
		if !errors.As(r.Err, &ee) || ee.ExitCode() != 2 {
			t.Fatalf("process %d: %v, want exit status 2:\n%s", r.Rank, r.Err, got)
		}
	}
	if strings.Count(got, "--comm: gpushm cannot span processes") != 2 || strings.Contains(got, "epoch 1/1") {
		t.Fatalf("want both processes to refuse --comm gpushm before training:\n%s", got)
	}
}

// startMachineJob is startJob with each process given its machine's
// directory, parts/machine-$RANK (with other, when set, for machine 1).
func startMachineJob(t *testing.T, parts, other string, args ...string) *job {
	t.Helper()
	j := &job{done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	dir1 := filepath.Join(parts, "machine-1")
	if other != "" {
		dir1 = filepath.Join(other, "machine-1")
	}
	dirs := []string{filepath.Join(parts, "machine-0"), dir1}
	cmd := append([]string{"/bin/sh", "-c", `exec "$0" "$@" --machine-dir "$STRATA_TEST_MACHINE_DIR"`, os.Args[0]}, args...)
	cfg := launch.Config{N: 2, Command: cmd, Env: []string{"STRATA_TEST_MAIN=1"},
		PerRank: func(r int) []string {
			return []string{fmt.Sprintf("STRATA_HOST_ID=machine%d", r), fmt.Sprintf("STRATA_COMM_HOST=127.0.0.%d", r+1), "STRATA_TEST_MACHINE_DIR=" + dirs[r]}
		},
		Stdout: &j.out, Stderr: &j.out, Prefix: true, KeepGoing: true, Grace: time.Second}
	go func() {
		defer close(j.done)
		defer cancel()
		j.results, j.err = launch.Run(ctx, cfg)
	}()
	t.Cleanup(func() { cancel(); <-j.done })
	return j
}

// TestTwoMachinesWithMachineDirs: `strata partition --machines 2` writes
// one directory per machine; two simulated machines (cpu:2 each) that
// load only their own directory, reading the other's rows through its
// feature service, train Cora with the batch losses of one process with
// cpu:4, bit for bit, and report network bytes and remote latency per
// machine. A directory of another partition is refused on both.
func TestTwoMachinesWithMachineDirs(t *testing.T) {
	dir := t.TempDir()
	parts := filepath.Join(dir, "parts")
	if code, out, errs := strata(t, "partition", "--machines", "2", "--devices-per-machine", "2", "--seed", "7", "cora", parts); code != 0 {
		t.Fatalf("partition: exit %d\n%s%s", code, out, errs)
	}
	ref := filepath.Join(dir, "one.json")
	if code, _, errs := strata(t, jobArgs("cpu:4", 3, "--cache", "0", "--report", ref)...); code != 0 {
		t.Fatalf("one process: exit %d\n%s", code, errs)
	}
	got := filepath.Join(dir, "job.json")
	j := startMachineJob(t, parts, "", jobArgs("cpu:2", 3, "--cache", "0", "--remote-cache", "1MiB", "--report", got)...)
	if err := j.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("job: %v\n%s", err, j.out.String())
	}
	want, rep := readReport(t, ref), readReport(t, got)
	n := sameRun(t, rep, want)
	w := reportWorld(t, got)
	if w.Machines != 2 || len(w.PerMachine) != 2 {
		t.Fatalf("report.world %+v", w)
	}
	for _, m := range w.PerMachine {
		rf := m.RemoteFeatures
		if m.Bytes["network"] <= 0 || rf == nil || rf.Rows <= 0 || rf.P99Ms < rf.P50Ms || rf.P50Ms <= 0 {
			t.Fatalf("machine %d: bytes %v, remote features %+v", m.Machine, m.Bytes, rf)
		}
	}
	if !strings.Contains(j.out.String(), " network ") {
		t.Fatalf("no network bytes in the progress lines:\n%s", j.out.String())
	}
	t.Logf("%d batch losses identical, test accuracy %.4f; network bytes %d and %d", n, rep.TestAccuracy, w.PerMachine[0].Bytes["network"], w.PerMachine[1].Bytes["network"])

	// With the default cache (all: every row a device can hold) the
	// devices keep the machine's hot rows of other machines in their
	// memory: the same losses, and the same hot rows read, all of them
	// there (with --cache 0 above, all copied from host memory).
	all := filepath.Join(dir, "all.json")
	// (Not --quiet: the epoch lines show the hot rows.)
	j = startMachineJob(t, parts, "", jobArgs("cpu:2", 3, "--remote-cache", "1MiB", "--report", all)[1:]...)
	if err := j.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("job with --cache all: %v\n%s", err, j.out.String())
	}
	sameRun(t, readReport(t, all), want)
	wa := reportWorld(t, all)
	for m := range wa.PerMachine {
		a, z := wa.PerMachine[m].RemoteFeatures, w.PerMachine[m].RemoteFeatures
		if a == nil || z.HotRows <= 0 || z.HotDeviceRows != 0 || a.HotRows != z.HotRows || a.HotDeviceRows != a.HotRows {
			t.Fatalf("machine %d: hot rows %+v with --cache all, %+v with --cache 0: want the same hot rows, all on the device with --cache all, none with 0", m, a, z)
		}
		t.Logf("machine %d: %d hot rows read, on the device with --cache all; %d remote rows with it, %d without", m, a.HotRows, a.Rows, z.Rows)
	}
	if !regexp.MustCompile(`hot rows [1-9][0-9]* \([1-9][0-9]* on device\)`).MatchString(j.out.String()) {
		t.Fatalf("no hot rows in the progress lines:\n%s", j.out.String())
	}

	// Without hot rows (--hot-bytes 0) every row of the other machine
	// crosses the network: the same losses, more remote rows (the hot
	// rows above were read from the directories).
	cold := filepath.Join(dir, "cold")
	if code, out, errs := strata(t, "partition", "--machines", "2", "--devices-per-machine", "2", "--seed", "7", "--hot-bytes", "0", "cora", cold); code != 0 {
		t.Fatalf("partition --hot-bytes 0: exit %d\n%s%s", code, out, errs)
	}
	got0 := filepath.Join(dir, "job0.json")
	j = startMachineJob(t, cold, "", jobArgs("cpu:2", 3, "--cache", "0", "--remote-cache", "0", "--report", got0)...)
	if err := j.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("job without hot rows: %v\n%s", err, j.out.String())
	}
	sameRun(t, readReport(t, got0), want)
	w0 := reportWorld(t, got0)
	for m := range w0.PerMachine {
		hot, none := w.PerMachine[m].RemoteFeatures.Rows, w0.PerMachine[m].RemoteFeatures.Rows
		if none <= hot {
			t.Fatalf("machine %d: %d remote rows without hot rows, %d with", m, none, hot)
		}
		t.Logf("machine %d: %d remote rows without hot rows, %d with", m, none, hot)
	}

	// Machine 1 with a directory of another partition (another seed).
	other := filepath.Join(dir, "other")
	if code, out, errs := strata(t, "partition", "--machines", "2", "--devices-per-machine", "2", "--seed", "8", "cora", other); code != 0 {
		t.Fatalf("partition: exit %d\n%s%s", code, out, errs)
	}
	j = startMachineJob(t, parts, other, jobArgs("cpu:2", 1, "--cache", "0")...)
	j.wait(t, time.Minute)
	out := j.out.String()
	if c := strings.Count(out, "machine directory from another partition"); c != 2 || strings.Contains(out, "epoch 1/1") {
		t.Fatalf("want both processes to refuse the other partition before training:\n%s", out)
	}
}
