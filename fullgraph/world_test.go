package fullgraph

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/dataset"
)

// jobRun runs cfg on every simulated process of layout at once (comm/
// world.JoinLocal: goroutines, TCP between them), each with its own CPU
// devices, and returns the reports and errors.
func jobRun(t *testing.T, ds *dataset.Dataset, cfg Config, layout []int, opts Options) ([]*Report, []error) {
	t.Helper()
	ws, err := world.JoinLocal(context.Background(), layout, world.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	reps, errs := make([]*Report, len(ws)), make([]error, len(ws))
	var wg sync.WaitGroup
	for p, w := range ws {
		o := opts
		o.World, o.Backends, o.CommTimeout = w, devices(t, w.Local()), 30*time.Second
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[p], errs[p] = Run(context.Background(), ds, cfg, o)
			w.Leave(errs[p])
		}()
	}
	wg.Wait()
	return reps, errs
}

// sameJobEpochs fails unless got's epochs are want's, bit for bit (losses,
// accuracies) and with the same broadcasts skipped.
func sameJobEpochs(t *testing.T, got, want *Report) {
	t.Helper()
	if len(got.Epochs) != len(want.Epochs) {
		t.Fatalf("%d epochs, want %d", len(got.Epochs), len(want.Epochs))
	}
	for i, w := range want.Epochs {
		g := got.Epochs[i]
		if math.Float64bits(g.Loss) != math.Float64bits(w.Loss) || g.TestAccuracy != w.TestAccuracy || g.ValAccuracy != w.ValAccuracy {
			t.Fatalf("epoch %d: loss %v test %v val %v; one process %v %v %v", w.Epoch, g.Loss, g.TestAccuracy, g.ValAccuracy, w.Loss, w.TestAccuracy, w.ValAccuracy)
		}
		if got.EpochComm[i].Skipped != want.EpochComm[i].Skipped || got.EpochComm[i].Broadcasts != want.EpochComm[i].Broadcasts {
			t.Fatalf("epoch %d: skipped %d of %d broadcasts, one process %d of %d", w.Epoch, got.EpochComm[i].Skipped,
				got.EpochComm[i].Broadcasts, want.EpochComm[i].Skipped, want.EpochComm[i].Broadcasts)
		}
	}
	if got.TestAccuracy != want.TestAccuracy || got.Comm.BytesAvoided != want.Comm.BytesAvoided {
		t.Fatalf("test %v, avoided %d bytes; one process %v, %d", got.TestAccuracy, got.Comm.BytesAvoided, want.TestAccuracy, want.Comm.BytesAvoided)
	}
}

// TestJobAcrossProcessesEqualsOneProcess: full-graph training over two
// processes of two devices each (blocks exchanged over TCP) equals one
// process with four devices, exactly and with Sancus's skip-broadcast.
func TestJobAcrossProcessesEqualsOneProcess(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("staleness=%v", stale), func(t *testing.T) {
			cfg := Defaults(GCN)
			cfg.Epochs = 8
			if stale {
				cfg.Staleness = DefaultStaleness()
			}
			want := run(t, cora(t), cfg, 4)
			reps, errs := jobRun(t, cora(t), cfg, []int{2, 2}, Options{})
			for p, err := range errs {
				if err != nil {
					t.Fatalf("process %d: %v", p, err)
				}
			}
			sameJobEpochs(t, reps[0], want)
			if stale && want.Comm.BroadcastsSkipped == 0 {
				t.Fatal("no broadcast skipped: the staleness run checks nothing")
			}
			if w := reps[0].World; w.Processes != 2 || w.Machines != 2 || w.Ranks != 4 || w.Comm != "tcp" {
				t.Fatalf("world %+v", w)
			}
			if len(reps[1].Memory.PeakBytes) != 2 {
				t.Fatalf("process 1 reports %d devices' memory", len(reps[1].Memory.PeakBytes))
			}
		})
	}
}

// TestJobCheckpoints: a job's checkpoint resumes on the same layout with
// an uninterrupted run's numbers; another layout is refused by name.
func TestJobCheckpoints(t *testing.T) {
	cfg := Defaults(GCN)
	cfg.Epochs = 6
	want := run(t, cora(t), cfg, 4)
	dir := t.TempDir()
	first := cfg
	first.Epochs = 3
	if _, errs := jobRun(t, cora(t), first, []int{2, 2}, Options{CheckpointDir: dir}); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	for p := range 2 {
		if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("process-%d.json", p))); err != nil || !strings.Contains(string(b), `"epochs_done": 3`) {
			t.Fatalf("process %d's state: %s %v", p, b, err)
		}
	}
	_, errs := jobRun(t, cora(t), cfg, []int{3, 1}, Options{CheckpointDir: dir, Resume: true})
	for p, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "written by 2 processes with [2 2] devices, this run is 2 processes with [3 1] devices") {
			t.Fatalf("process %d: %v, want the layouts named", p, err)
		}
	}
	reps, errs := jobRun(t, cora(t), cfg, []int{2, 2}, Options{CheckpointDir: dir, Resume: true})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	sameJobEpochs(t, reps[0], want)
	if reps[0].ResumedFrom == nil || reps[0].ResumedFrom.Epoch != 3 {
		t.Fatalf("resumed from %+v", reps[0].ResumedFrom)
	}
}
