package engine

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// heteroData is the hetero generator preset with papers papers.
func heteroData(t testing.TB, papers int64, seed uint64) *dataset.Hetero {
	t.Helper()
	c := gen.HeteroPreset()
	c.Papers, c.Seed = papers, seed
	h, err := gen.GenerateHetero(c)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func heteroCfg(seed uint64, epochs int) train.HeteroConfig {
	cfg := train.HeteroDefaults(train.HSAGE)
	cfg.Epochs, cfg.Hidden, cfg.Seed = epochs, 32, seed
	return cfg
}

func runHeteroOn(t testing.TB, h *dataset.Hetero, cfg train.HeteroConfig, k int, opts HeteroOptions) *train.HeteroReport {
	t.Helper()
	opts.Backends = cpus(t, k)
	if opts.CommTimeout == 0 {
		opts.CommTimeout = 30 * time.Second
	}
	rep, err := RunHetero(context.Background(), h, cfg, opts)
	if err != nil {
		t.Fatalf("%d devices: %v", k, err)
	}
	return rep
}

func batchLosses(rep *train.HeteroReport) []float64 {
	var out []float64
	for _, e := range rep.Epochs {
		out = append(out, e.BatchLosses...)
	}
	return out
}

// TestHeteroOneDeviceIsRunHetero: on one device RunHetero is
// train.RunHetero, loss for loss and accuracy for accuracy (the same
// batches, keys and dropout seeds; no reduction), reverse relations
// (added once for every replica) and a relation's own fanouts included.
func TestHeteroOneDeviceIsRunHetero(t *testing.T) {
	h := heteroData(t, 600, 3)
	cfg := heteroCfg(5, 2)
	cfg.AddReverse, cfg.RelFanouts = true, map[string][]int{"rev_writes": {3, 2}}
	want, err := train.RunHetero(context.Background(), h, cfg, train.Options{Backend: cpus(t, 1)[0]})
	if err != nil {
		t.Fatal(err)
	}
	got := runHeteroOn(t, h, cfg, 1, HeteroOptions{})
	if a, b := batchLosses(got), batchLosses(want); !slices.Equal(a, b) {
		t.Fatalf("batch losses on one device differ from train.RunHetero's:\n got %v\nwant %v", a, b)
	}
	if got.TestAccuracy != want.TestAccuracy || got.ValAccuracy != want.ValAccuracy {
		t.Fatalf("accuracy val %v test %v, want %v %v", got.ValAccuracy, got.TestAccuracy, want.ValAccuracy, want.TestAccuracy)
	}
	if !got.Hetero.AddReverse || len(got.Hetero.EdgeTypes) != len(want.Hetero.EdgeTypes) {
		t.Fatalf("hetero section %+v, want %+v", got.Hetero, want.Hetero)
	}
	if m := got.Multi; m == nil || m.Devices != 1 || m.Comm != "none" || m.BatchesPerDevice != len(want.Epochs[0].BatchLosses) {
		t.Fatalf("multi-device section %+v", got.Multi)
	}
}

// TestHeteroDevicesAccuracy: 1, 2 and 4 CPU devices reach the same test
// accuracy on the hetero preset (2,000 papers, 6 epochs) within noise.
// The batch size is per device, so K devices take 1/K of an epoch's
// steps with K times the seeds each. Measured (seeds 1, 2): mean test
// 0.9525, 0.9531, 0.9525 on 1, 2, 4 devices; about 4 s.
func TestHeteroDevicesAccuracy(t *testing.T) {
	seeds := []uint64{1, 2}
	if testing.Short() {
		seeds = seeds[:1]
	}
	mean := map[int]float64{}
	for _, k := range []int{1, 2, 4} {
		for _, s := range seeds {
			h := heteroData(t, 2000, s)
			rep := runHeteroOn(t, h, heteroCfg(s, 6), k, HeteroOptions{})
			t.Logf("%d devices, seed %d: test %.4f (val %.4f), last loss %.4f, %d batches per device", k, s, rep.TestAccuracy, rep.ValAccuracy, rep.Epochs[len(rep.Epochs)-1].Loss, rep.Multi.BatchesPerDevice)
			mean[k] += rep.TestAccuracy / float64(len(seeds))
		}
	}
	for _, k := range []int{1, 2, 4} {
		if mean[k] < 0.9 || math.Abs(mean[k]-mean[1]) > 0.03 {
			t.Fatalf("mean test accuracy %v by device count; want each >= 0.90 and within 0.03 of one device's", mean)
		}
	}
}

// TestHeteroDevicesDeterministic: the same seed gives the same losses,
// bit for bit, whatever GOMAXPROCS (3 devices); the replica check at
// the end compares the devices' parameters.
func TestHeteroDevicesDeterministic(t *testing.T) {
	h := heteroData(t, 800, 4)
	cfg := heteroCfg(9, 2)
	var runs [][]float64
	for _, procs := range []int{1, 4} {
		prev := runtime.GOMAXPROCS(procs)
		rep := runHeteroOn(t, h, cfg, 3, HeteroOptions{})
		runtime.GOMAXPROCS(prev)
		runs = append(runs, batchLosses(rep))
	}
	if !slices.Equal(runs[0], runs[1]) {
		t.Fatalf("losses differ with GOMAXPROCS 1 and 4:\n%v\n%v", runs[0], runs[1])
	}
	for _, l := range runs[0] {
		if math.IsNaN(l) || l <= 0 {
			t.Fatalf("losses %v", runs[0])
		}
	}
}

// TestHeteroDevicesUneven: device counts that divide neither the
// training nodes, nor the target type's nodes, nor the batches still
// train: shares of ceil or floor(T/K), a short last batch, devices that
// own no training node.
func TestHeteroDevicesUneven(t *testing.T) {
	h := heteroData(t, 500, 6)
	for _, tc := range []struct {
		train, k, batch, want int
	}{
		{37, 3, 8, 2}, // shares 13, 12, 12: 2 batches each
		{37, 7, 64, 1},
		{3, 5, 4, 1}, // two devices have no share: they repeat a node
	} {
		hh := *h
		hh.Train = h.Train[:tc.train]
		cfg := heteroCfg(2, 2)
		cfg.BatchSize = tc.batch
		rep := runHeteroOn(t, &hh, cfg, tc.k, HeteroOptions{})
		if got := rep.Multi.BatchesPerDevice; got != tc.want {
			t.Errorf("%d training nodes on %d devices, batches of %d: %d batches per device, want %d", tc.train, tc.k, tc.batch, got, tc.want)
		}
		if n := len(batchLosses(rep)); n != 2*tc.want {
			t.Errorf("%d training nodes on %d devices: %d losses, want %d", tc.train, tc.k, n, 2*tc.want)
		}
		if rep.Epochs[1].EvalSkipped || rep.TestAccuracy <= 0 {
			t.Errorf("%d training nodes on %d devices: last epoch not evaluated (%+v)", tc.train, tc.k, rep.Epochs[1])
		}
	}
}

var errInjected = errors.New("injected failure")

// TestHeteroDeviceFailureStopsAll: a device that fails mid-run (at its
// third gradient all-reduce) stops the others, which wait for it in the
// collective, at once: the run returns that device's error, not a
// peer's or a cancellation. The deadline is an hour, so a wait for it
// would hang the test.
func TestHeteroDeviceFailureStopsAll(t *testing.T) {
	h := heteroData(t, 800, 4)
	n := 0
	opts := HeteroOptions{Backends: cpus(t, 4), CommTimeout: time.Hour, replica: func(r int, rp *train.Replica) {
		if r != 2 {
			return
		}
		reduce := rp.Reduce
		rp.Reduce = func(buf backend.Buffer) error {
			if n++; n == 3 {
				return errInjected
			}
			return reduce(buf)
		}
	}}
	_, err := RunHetero(context.Background(), h, heteroCfg(1, 3), opts)
	if !errors.Is(err, errInjected) {
		t.Fatalf("got %v, want the injected failure", err)
	}
	var re *RunError
	if !errors.As(err, &re) || re.Op != "rank 2 (cpu)" {
		t.Fatalf("error %v does not name rank 2", err)
	}
}

// TestHeteroInterrupted: cancelling the context mid-run stops every
// device with an error wrapping train.ErrInterrupted.
func TestHeteroInterrupted(t *testing.T) {
	h := heteroData(t, 800, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := HeteroOptions{Backends: cpus(t, 2), CommTimeout: time.Hour,
		OnBatch: func(epoch, batch int, loss float64) {
			if epoch == 1 {
				cancel()
			}
		}}
	_, err := RunHetero(ctx, h, heteroCfg(1, 3), opts)
	if !errors.Is(err, train.ErrInterrupted) {
		t.Fatalf("got %v, want an interruption", err)
	}
}

// TestHeteroErrors: bad settings are typed errors naming the field.
func TestHeteroErrors(t *testing.T) {
	h := heteroData(t, 300, 1)
	bad := heteroCfg(1, 1)
	bad.BatchSize = 0
	var ce *ConfigError
	var tce *train.ConfigError
	var de *train.DataError
	if _, err := RunHetero(context.Background(), h, heteroCfg(1, 1), HeteroOptions{}); !errors.As(err, &ce) || ce.Field != "devices" {
		t.Errorf("no devices: %v", err)
	}
	if _, err := RunHetero(context.Background(), h, heteroCfg(1, 1), HeteroOptions{Backends: cpus(t, 2), Comm: "nccl"}); !errors.As(err, &ce) || ce.Field != "comm" {
		t.Errorf("nccl on CPU devices: %v", err)
	}
	if _, err := RunHetero(context.Background(), h, bad, HeteroOptions{Backends: cpus(t, 2)}); !errors.As(err, &tce) || tce.Field != "batch_size" {
		t.Errorf("batch size 0: %v", err)
	}
	nolabels := *h
	nolabels.Labels = nil
	if _, err := RunHetero(context.Background(), &nolabels, heteroCfg(1, 1), HeteroOptions{Backends: cpus(t, 2)}); !errors.As(err, &de) {
		t.Errorf("no labels: %v", err)
	}
}

// TestHeteroCommKinds: the host kinds CPU devices take give the
// in-process communicators' losses.
func TestHeteroCommKinds(t *testing.T) {
	h := heteroData(t, 600, 2)
	cfg := heteroCfg(3, 1)
	want := runHeteroOn(t, h, cfg, 2, HeteroOptions{})
	if want.Multi.Comm != "inproc" {
		t.Fatalf("auto on CPU devices chose %q", want.Multi.Comm)
	}
	for _, kind := range []string{"shm", "tcp"} {
		got := runHeteroOn(t, h, cfg, 2, HeteroOptions{Comm: kind})
		if got.Multi.Comm != kind || !slices.Equal(batchLosses(got), batchLosses(want)) {
			t.Errorf("comm %s (%s): losses %v, want %v", kind, got.Multi.Comm, batchLosses(got), batchLosses(want))
		}
	}
}
