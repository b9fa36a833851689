package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/train"
)

// joinJob joins one simulated process per entry of layout (goroutines of
// this test, each with its own world and store connection) on distinct
// host ids, so their communicators go over TCP as between machines.
func joinJob(t *testing.T, layout []int) []*world.World {
	t.Helper()
	ws, err := world.JoinLocal(context.Background(), layout, world.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, w := range ws {
			w.Leave(nil)
		}
	})
	return ws
}

// runJob runs cfg on every process of ws at once (opts per process from
// optsOf) and returns the reports and errors.
func runJobs(t *testing.T, ds *dataset.Dataset, cfg Config, ws []*world.World, optsOf func(p int) Options) ([]*Report, []error) {
	t.Helper()
	reps, errs := make([]*Report, len(ws)), make([]error, len(ws))
	var wg sync.WaitGroup
	for p, w := range ws {
		o := optsOf(p)
		o.World = w
		o.Backends = cpus(t, w.Local())
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			reps[p], errs[p] = Run(ctx, ds, cfg, o)
			if errs[p] != nil {
				w.Leave(errs[p])
			}
		}()
	}
	wg.Wait()
	return reps, errs
}

// TestJobAcrossProcessesEqualsOneProcess: two processes of two devices
// each, talking over TCP, give the losses and accuracies of one process
// with four devices, bit for bit; process 0 reports the job's layout and
// every process its own devices.
func TestJobAcrossProcessesEqualsOneProcess(t *testing.T) {
	cfg := small(4, 2)
	want := runOn(t, cora(t), cfg, Options{})
	ws := joinJob(t, []int{2, 2})
	var mu sync.Mutex
	seen := map[int]int{}
	reps, errs := runJobs(t, cora(t), cfg, ws, func(int) Options {
		return Options{OnBatch: func(rank, epoch, batch int, loss float64) {
			mu.Lock()
			seen[rank]++
			mu.Unlock()
		}}
	})
	for p, err := range errs {
		if err != nil {
			t.Fatalf("process %d: %v", p, err)
		}
	}
	sameEpochs(t, &reps[0].Report, &want.Report)
	if !reps[0].Run.ReplicasEqual {
		t.Fatal("process 0 did not check the replicas")
	}
	if w := reps[0].World; w.Machines != 2 || w.Processes != 2 || w.Ranks != 4 || w.Comm != "tcp" || len(w.PerProcess) != 2 ||
		w.PerProcess[1].First != 2 || w.PerProcess[1].Devices != 2 {
		t.Fatalf("world %+v", w)
	}
	if reps[0].DSP.Comm != "tcp" {
		t.Fatalf("device communicators %q, want tcp", reps[0].DSP.Comm)
	}
	for p, rep := range reps {
		if len(rep.Metrics.Ranks) != 2 || rep.Metrics.Ranks[0].Rank != 2*p || len(rep.DSP.PerDevice) != 2 || rep.DSP.PerDevice[1].Rank != 2*p+1 {
			t.Fatalf("process %d reports ranks %+v, devices %+v", p, rep.Metrics.Ranks, rep.DSP.PerDevice)
		}
	}
	for r := range 4 {
		if seen[r] != seen[0] || seen[0] == 0 {
			t.Fatalf("batches per rank %v", seen)
		}
	}
}

// TestJobStallNamesTheProcess: a rank of process 1 that stops working
// makes process 0 fail within the communication timeout, naming process
// 1, its host and the rank.
func TestJobStallNamesTheProcess(t *testing.T) {
	cfg := small(4, 2)
	cfg.WaitTimeout, cfg.CommTimeout = 3*time.Second, 3*time.Second
	ws := joinJob(t, []int{2, 2})
	var n atomic.Int64
	_, errs := runJobs(t, tiny(t), cfg, ws, func(p int) Options {
		if p != 1 {
			return Options{}
		}
		return Options{Hook: func(ctx context.Context, rank int, point string) {
			if rank == 3 && point == "trainer" && n.Add(1) == 2 {
				<-ctx.Done() // stuck until the run gives up
			}
		}}
	})
	var pe *world.PeerError
	if !errors.As(errs[0], &pe) || len(pe.Processes) != 1 || pe.Processes[0].Index != 1 || !strings.Contains(errs[0].Error(), "host machine1") {
		t.Fatalf("process 0: %v, want process 1 on machine1 named", errs[0])
	}
	if errs[1] == nil {
		t.Fatal("process 1 succeeded")
	}
}

// TestJobCheckpointLayout: a job's checkpoint records its layout and
// every process's state; resuming it resumes every process with the
// uninterrupted run's numbers, and another layout is refused by name.
func TestJobCheckpointLayout(t *testing.T) {
	cfg := small(4, 2)
	dir := t.TempDir()
	want := runOn(t, tiny(t), cfg, Options{})
	one := cfg
	one.Train.Epochs = 1
	_, errs := runJobs(t, tiny(t), one, joinJob(t, []int{2, 2}), func(int) Options { return Options{CheckpointDir: dir} })
	for p, err := range errs {
		if err != nil {
			t.Fatalf("first epoch, process %d: %v", p, err)
		}
	}
	for p := range 2 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("process-%d.json", p)))
		if err != nil || !strings.Contains(string(b), `"epochs_done": 1`) {
			t.Fatalf("process %d's state: %s %v", p, b, err)
		}
	}
	if m := meta(t, dir); fmt.Sprint(m["layout"]) != "[2 2]" {
		t.Fatalf("layout %v", m["layout"])
	}
	// Another layout: refused on every process, naming both layouts.
	_, errs = runJobs(t, tiny(t), cfg, joinJob(t, []int{1, 3}), func(int) Options { return Options{CheckpointDir: dir, Resume: true} })
	for p, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "2 processes with [2 2] devices, this run is 2 processes with [1 3] devices") {
			t.Fatalf("process %d: %v, want the layouts named", p, err)
		}
	}
	// One process of four devices: refused too.
	if _, err := Run(context.Background(), tiny(t), cfg, Options{Backends: cpus(t, 4), CheckpointDir: dir, Resume: true}); err == nil ||
		!strings.Contains(err.Error(), "this run is 1 process with 4 devices") {
		t.Fatalf("one process: %v", err)
	}
	// The same layout goes on exactly.
	reps, errs := runJobs(t, tiny(t), cfg, joinJob(t, []int{2, 2}), func(int) Options { return Options{CheckpointDir: dir, Resume: true} })
	for p, err := range errs {
		if err != nil {
			t.Fatalf("resume, process %d: %v", p, err)
		}
	}
	sameEpochs(t, &reps[0].Report, &want.Report)
	if reps[0].ResumedFrom == nil || reps[0].ResumedFrom.Epoch != 1 {
		t.Fatalf("resumed from %+v", reps[0].ResumedFrom)
	}
}

// TestJobCommKinds: in a job of several processes Config.Comm keeps only
// the kinds that span processes: auto picks the world's host transport
// (tcp between simulated machines), tcp is taken as asked, gpushm and
// (across machines) shm are refused with a ConfigError on "comm" before
// any communicator opens; one process keeps commKind's choices.
func TestJobCommKinds(t *testing.T) {
	ws := joinJob(t, []int{1, 1})
	for _, tc := range []struct {
		kind, want string
		bad        bool
	}{
		{"auto", "tcp", false},
		{"", "tcp", false},
		{"tcp", "tcp", false},
		{"shm", "", true},
		{"gpushm", "", true},
		{"nccl", "", true}, // CPU devices
	} {
		got, why, err := jobCommKind(ws[0], tc.kind, false)
		var ce *ConfigError
		if tc.bad {
			if !errors.As(err, &ce) || ce.Field != "comm" {
				t.Errorf("%q: %q, %v; want a ConfigError on comm", tc.kind, got, err)
			}
			continue
		}
		if err != nil || got != tc.want || why == "" {
			t.Errorf("%q: %q (%q), %v; want %q", tc.kind, got, why, err, tc.want)
		}
	}
	one := world.Single(2)
	if got, _, err := jobCommKind(one, "gpushm", true); err != nil || got != "gpushm" {
		t.Errorf("one process, gpushm: %q, %v", got, err)
	}
	if got, _, err := jobCommKind(one, "auto", false); err != nil || got != "inproc" {
		t.Errorf("one process, auto: %q, %v", got, err)
	}
	// The refusal comes from Run on every process, naming the flag.
	cfg := small(2, 2)
	cfg.Comm = "gpushm"
	_, errs := runJobs(t, tiny(t), cfg, joinJob(t, []int{1, 1}), func(int) Options { return Options{} })
	for p, err := range errs {
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "comm" || !strings.Contains(err.Error(), "cannot span processes") {
			t.Errorf("process %d: %v, want gpushm refused", p, err)
		}
	}
}

// TestJobFullEvaluation: with the whole-graph evaluation, only process 0
// evaluates (device 0 runs the inference on its process's devices after
// the job's barrier) and the job's accuracies equal one process's with
// every device.
func TestJobFullEvaluation(t *testing.T) {
	cfg := small(4, 2)
	cfg.Train.Eval, cfg.Train.EvalFanouts = train.Full, nil
	want := runOn(t, cora(t), cfg, Options{})
	reps, errs := runJobs(t, cora(t), cfg, joinJob(t, []int{2, 2}), func(int) Options { return Options{} })
	for p, err := range errs {
		if err != nil {
			t.Fatalf("process %d: %v", p, err)
		}
	}
	sameEpochs(t, &reps[0].Report, &want.Report)
	if last := reps[0].Epochs[len(reps[0].Epochs)-1]; last.TestAccuracy <= 0 {
		t.Fatalf("no evaluation: %+v", last)
	}
}
