package fullgraph

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

func TestConfigErrors(t *testing.T) {
	ds := cora(t)
	bad := map[string]func(*Config){
		"model":                    func(c *Config) { c.Model = "mlp" },
		"layers":                   func(c *Config) { c.Layers = 0 },
		"hidden":                   func(c *Config) { c.Hidden = -1 },
		"heads":                    func(c *Config) { c.Heads = 2 },
		"dropout":                  func(c *Config) { c.Dropout = 1 },
		"attn_dropout":             func(c *Config) { *c = Defaults(GAT); c.AttnDrop = -0.1 },
		"row_norm":                 func(c *Config) { c.RowNorm = "maybe" },
		"lr":                       func(c *Config) { c.LR = 0 },
		"weight_decay":             func(c *Config) { c.WeightDecay = -1 },
		"epochs":                   func(c *Config) { c.Epochs = 0 },
		"eval_every":               func(c *Config) { c.EvalEvery = 0 },
		"select":                   func(c *Config) { c.Select = "first" },
		"partition":                func(c *Config) { c.Partition = "random" },
		"masks":                    func(c *Config) { c.Masks = "none" },
		"order":                    func(c *Config) { c.Order = "random" },
		"engine":                   func(c *Config) { c.Engine = "fast" },
		"staleness":                func(c *Config) { c.Staleness.Gradients = true },
		"staleness.epoch_bound":    func(c *Config) { c.Staleness = Staleness{Enabled: true, Epsilon: 1} },
		"staleness.epsilon":        func(c *Config) { c.Staleness = Staleness{Enabled: true, EpochBound: 1, Epsilon: -1} },
		"staleness.adaptive_floor": func(c *Config) { c.Staleness = Staleness{Enabled: true, EpochBound: 1, Adaptive: true} },
	}
	for field, mod := range bad {
		cfg := Defaults(GCN)
		mod(&cfg)
		_, err := Run(context.Background(), ds, cfg, Options{Backends: devices(t, 1)})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: got %v, want a *ConfigError for %q", field, err, field)
		}
	}
	// Options and device counts.
	b := cpuBackend(t)
	tape := Defaults(GAT)
	tape.Epochs, tape.Engine = 1, EngineTape
	comms, _ := inproc.New(2, comm.Options{})
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	for name, tc := range map[string]struct {
		cfg  Config
		opts Options
	}{
		"no devices":        {Defaults(GCN), Options{}},
		"nil device":        {Defaults(GCN), Options{Backends: []backend.Backend{b, nil}}},
		"tape on 2 devices": {tape, Options{Backends: []backend.Backend{b, b}}},
		"comms for 2 of 3":  {Defaults(GCN), Options{Backends: []backend.Backend{b, b, b}, Comms: comms}},
		"comms out of rank": {Defaults(GCN), Options{Backends: []backend.Backend{b, b}, Comms: []comm.Comm{comms[1], comms[0]}}},
	} {
		_, err := Run(context.Background(), ds, tc.cfg, tc.opts)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: got %v, want a *ConfigError", name, err)
		}
	}
	// Datasets that cannot be trained on.
	noFeat := *ds
	noFeat.Features, noFeat.FeatDim = nil, 0
	noTrain := *ds
	noTrain.Train = nil
	badLabel := *ds
	badLabel.Labels = append([]int32(nil), ds.Labels...)
	badLabel.Labels[ds.Test[0]] = 99
	for name, d := range map[string]*dataset.Dataset{"nil": nil, "no features": &noFeat, "no train": &noTrain, "bad label": &badLabel} {
		_, err := Run(context.Background(), d, Defaults(GCN), Options{Backends: devices(t, 2)})
		var de *DataError
		if !errors.As(err, &de) {
			t.Errorf("%s: got %v, want a *DataError", name, err)
		}
	}
}

func TestGATAndMemoryReport(t *testing.T) {
	ds := cora(t)
	for _, kind := range []string{GCN, SAGE, GAT} {
		cfg := Defaults(kind)
		cfg.Epochs = 2
		rep := run(t, ds, cfg, 1)
		m := rep.Memory
		if len(m.ActivationBytes) != cfg.Layers || len(m.PeakBytes) != 1 {
			t.Fatalf("%s: memory %+v", kind, m)
		}
		var act int64
		for l, a := range m.ActivationBytes {
			if a <= 0 {
				t.Errorf("%s: layer %d activation bytes %d", kind, l, a)
			}
			act += a
		}
		if m.PeakBytes[0] < act {
			t.Errorf("%s: peak %d below the activations %d", kind, m.PeakBytes[0], act)
		}
		// The first layer keeps at least its dropout output and its
		// N x hidden output.
		if min := int64(4 * ds.NumNodes() * int64(cfg.Hidden)); m.ActivationBytes[0] < min {
			t.Errorf("%s: layer 0 keeps %d bytes, less than one %d-wide output (%d)", kind, m.ActivationBytes[0], cfg.Hidden, min)
		}
		if rep.Epochs[1].EvalSkipped || rep.Epochs[1].TestAccuracy <= 0 {
			t.Errorf("%s: epoch record %+v", kind, rep.Epochs[1])
		}
		t.Logf("%s (%s engine): activations per layer %v bytes, peak %d bytes", kind, rep.Engine, m.ActivationBytes, m.PeakBytes[0])
	}
}

func TestEvalEveryAndReportJSON(t *testing.T) {
	cfg := Defaults(SAGE)
	cfg.Epochs, cfg.EvalEvery = 5, 2
	cfg.Staleness = DefaultStaleness()
	rep := run(t, cora(t), cfg, 2)
	for _, e := range rep.Epochs {
		if want := e.Epoch%2 == 0 || e.Epoch == 5; e.EvalSkipped == want {
			t.Errorf("epoch %d eval skipped %v", e.Epoch, e.EvalSkipped)
		}
	}
	if rep.SelectedEpoch%2 != 0 && rep.SelectedEpoch != 5 {
		t.Errorf("selected epoch %d was not evaluated", rep.SelectedEpoch)
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.TestAccuracy != rep.TestAccuracy || len(back.Comm.Blocks) != len(rep.Comm.Blocks) || back.Comm.BytesSent != rep.Comm.BytesSent ||
		back.Config.Staleness != rep.Config.Staleness || len(back.Memory.PeakBytes) != 2 {
		t.Errorf("report did not round-trip")
	}
}

// failing fails every Gemm after the first n on one device.
type failing struct {
	backend.Backend
	left atomic.Int64
}

var errInjected = errors.New("injected failure")

func (f *failing) Gemm(ta, tb bool, m, n, k int, alpha float32, a, b backend.Buffer, beta float32, c backend.Buffer) error {
	if f.left.Add(-1) < 0 {
		return errInjected
	}
	return f.Backend.Gemm(ta, tb, m, n, k, alpha, a, b, beta, c)
}

// TestDeviceFailureStopsAll: a device that fails mid-run makes Run return
// its error promptly, without the others waiting for their deadline.
func TestDeviceFailureStopsAll(t *testing.T) {
	ds := cora(t)
	bs := devices(t, 4)
	f := &failing{Backend: bs[2]}
	f.left.Store(7)
	bs[2] = f
	cfg := Defaults(GCN)
	cfg.Epochs = 50
	start := time.Now()
	_, err := Run(context.Background(), ds, cfg, Options{Backends: bs, CommTimeout: time.Minute})
	var re *RunError
	if !errors.Is(err, errInjected) || !errors.As(err, &re) || re.Rank != 2 {
		t.Fatalf("got %v, want device 2's injected failure", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestInterrupted(t *testing.T) {
	ds := cora(t)
	ctx, cancel := context.WithCancel(context.Background())
	cfg := Defaults(GCN)
	cfg.Epochs = 1000
	n := 0
	_, err := Run(ctx, ds, cfg, Options{Backends: devices(t, 3), OnEpoch: func(train.EpochRecord) {
		if n++; n == 3 {
			cancel()
		}
	}})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("got %v, want ErrInterrupted", err)
	}
}

// poisoned hands out NaN-filled buffers from AllocRaw, as the CUDA back
// end does with STRATA_CUDA_POISON=1: a step buffer read before it is
// written turns the run into NaNs.
type poisoned struct{ backend.Backend }

func (p poisoned) AllocRaw(dt backend.DType, n int) (backend.Buffer, error) {
	buf, err := p.Backend.Alloc(dt, n)
	if err != nil || dt != backend.Float32 {
		return buf, err
	}
	nan := make([]float32, n)
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	return buf, p.Backend.Upload(buf, nan)
}

// TestNoReadBeforeWrite runs with poisoned raw buffers, on devices that
// own no training nodes (range partition: cora's training nodes are its
// first 140), with every optional path on, and expects the clean run.
func TestNoReadBeforeWrite(t *testing.T) {
	ds := cora(t)
	for _, kind := range []string{GCN, SAGE, GAT} {
		cfg := Defaults(kind)
		cfg.Epochs = 4
		cfg.Partition = PartitionRange
		cfg.Staleness = DefaultStaleness()
		cfg.Staleness.Gradients, cfg.Staleness.Adaptive = true, true
		want := run(t, ds, cfg, 4)
		bs := devices(t, 4)
		for i := range bs {
			bs[i] = poisoned{bs[i]}
		}
		got, err := Run(context.Background(), ds, cfg, Options{Backends: bs})
		if err != nil {
			t.Fatal(err)
		}
		for e := range want.Epochs {
			if got.Epochs[e].Loss != want.Epochs[e].Loss || got.Epochs[e].TestAccuracy != want.Epochs[e].TestAccuracy {
				t.Fatalf("%s epoch %d: loss %v acc %v with poisoned buffers, %v %v without", kind, e+1,
					got.Epochs[e].Loss, got.Epochs[e].TestAccuracy, want.Epochs[e].Loss, want.Epochs[e].TestAccuracy)
			}
		}
	}
}

// TestSampledEvaluation: Eval "sampled" scores device 0's model with
// train.Evaluator on sampled neighborhoods; for GraphSAGE with every
// neighbor sampled (fanouts -1) that is the whole-graph evaluation (the
// mean over all in-neighbors), on one device and on two, and training is
// not affected.
func TestSampledEvaluation(t *testing.T) {
	ds := cora(t)
	for _, p := range []int{1, 2} {
		cfg := Defaults(SAGE)
		cfg.Epochs, cfg.Hidden = 3, 16
		want := run(t, ds, cfg, p)
		cfg.Eval, cfg.EvalFanouts, cfg.EvalBatchSize = train.Sampled, []int{-1, -1}, 400
		got := run(t, ds, cfg, p)
		for e := range want.Epochs {
			g, w := got.Epochs[e], want.Epochs[e]
			if g.Loss != w.Loss || g.TrainAccuracy != w.TrainAccuracy || g.ValAccuracy != w.ValAccuracy || g.TestAccuracy != w.TestAccuracy ||
				math.Abs(g.ValLoss-w.ValLoss) > 1e-6*w.ValLoss {
				t.Fatalf("P=%d epoch %d: sampled evaluation %+v, whole graph %+v", p, e+1, g, w)
			}
		}
		cfg.EvalFanouts = []int{2, 2}
		if small := run(t, ds, cfg, p); small.Epochs[2].Loss != want.Epochs[2].Loss || small.Epochs[2].ValLoss == want.Epochs[2].ValLoss {
			t.Fatalf("P=%d: fanouts 2,2: loss %v (want %v), val loss %v (whole graph %v)", p, small.Epochs[2].Loss,
				want.Epochs[2].Loss, small.Epochs[2].ValLoss, want.Epochs[2].ValLoss)
		}
	}
}
