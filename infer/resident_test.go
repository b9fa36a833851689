package infer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// deepModel is a 3-layer model of kind on Cora (two hidden layers: a
// resident layer read by a resident layer).
func deepModel(t *testing.T, b backend.Backend, kind string, ds *dataset.Dataset) (nn.Config, []nn.NamedTensor) {
	t.Helper()
	cfg := nn.Config{Kind: kind, InDim: ds.FeatDim, OutDim: ds.NumClasses, Hidden: 16, Layers: 3, NoDropout: true, Seed: 11}
	if kind == nn.KindGAT {
		cfg.Hidden, cfg.Heads, cfg.OutHeads = 4, 3, 2
	}
	m, err := nn.New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.FreeParams(b, m.Params())
	params, err := nn.SaveParams(b, m.Params())
	if err != nil {
		t.Fatal(err)
	}
	return cfg, params
}

// runOn runs req on bs (CPU back ends) with opts' settings.
func runOn(t *testing.T, bs []backend.Backend, cfg nn.Config, params []nn.NamedTensor, in *graph.CSR, x *Input, req Request, opts Options) *Result {
	t.Helper()
	models, free, err := NewModels(bs, cfg, params)
	if err != nil {
		t.Fatal(err)
	}
	defer free()
	opts.Backends, opts.Models = bs, models
	res, err := Run(context.Background(), in, x, req, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func sameBits(t *testing.T, got, want *Result) {
	t.Helper()
	if got.Rows != want.Rows || got.Cols != want.Cols || len(got.Data) != len(want.Data) {
		t.Fatalf("result %d x %d, want %d x %d", got.Rows, got.Cols, want.Rows, want.Cols)
	}
	for i := range want.Data {
		if math.Float32bits(got.Data[i]) != math.Float32bits(want.Data[i]) {
			t.Fatalf("value %d (row %d) is %v, the host path's %v", i, i/want.Cols, got.Data[i], want.Data[i])
		}
	}
}

// TestResidentMatchesHost: hidden layers kept on the devices (each its
// range, rows exchanged between them in lockstep) give the host path's
// output bit for bit: 1, 2 and 4 CPU devices, uneven ranges (one empty),
// the minimum budget (many chunks, so devices run empty rounds), GCN,
// SAGE and GAT, every node or a few, the logits or a hidden layer.
func TestResidentMatchesHost(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	n := int64(ds.NumNodes())
	offsets := map[int][]int64{
		1: nil,
		2: {0, 400, n},              // uneven
		4: {0, 1500, 1500, 2000, n}, // one device without nodes
	}
	kinds := []string{nn.KindSAGE, nn.KindGCN, nn.KindGAT}
	for _, kind := range kinds {
		cfg, params := deepModel(t, b, kind, ds)
		x := inputs(t, ds, kind == nn.KindGCN) // sparse features for GCN, dense for the others
		for _, devices := range []int{1, 2, 4} {
			for i, req := range []Request{{}, {Nodes: []int32{2707, 3, 3, 1000, 42}}, {Layer: 2, Nodes: []int32{9, 1}}} {
				if testing.Short() && kind != nn.KindSAGE && (devices != 4 || i > 0) {
					continue // -short: SAGE, and the others on 4 devices
				}
				t.Run(fmt.Sprintf("%s/devices=%d/nodes=%d/layer=%d", kind, devices, len(req.Nodes), req.Layer), func(t *testing.T) {
					bs := make([]backend.Backend, devices)
					for i := range bs {
						bs[i] = newCPU(t)
					}
					if devices == 4 {
						bs[3] = bs[2] // virtual devices sharing a back end
					}
					want := runOn(t, bs, cfg, params, in, x, req, Options{Offsets: offsets[devices], Budget: MinBudget, Placement: PlaceHost})
					var log bytes.Buffer
					got := runOn(t, bs, cfg, params, in, x, req, Options{Offsets: offsets[devices], Budget: MinBudget, Resident: ResidentOn, Log: &log})
					sameBits(t, got, want)
					last := len(got.Layers) - 1
					for i, st := range got.Layers {
						wantOut, wantIn := "resident", "resident"
						if i == last {
							wantOut = "host"
						}
						if i == 0 {
							wantIn = "host" // the CPU does not place the features
						}
						if st.Output != wantOut || st.Input != wantIn {
							t.Errorf("layer %d: input %q output %q (%s), want %q and %q", st.Layer, st.Input, st.Output, st.Why, wantIn, wantOut)
						}
						if wantOut == "resident" && st.ResidentBytes <= 0 {
							t.Errorf("layer %d: resident with %d bytes", st.Layer, st.ResidentBytes)
						}
					}
					if !strings.Contains(log.String(), "output resident on") || !strings.Contains(log.String(), "input resident (") {
						t.Errorf("the log does not say the layers stayed on the devices:\n%s", log.String())
					}
					if want.Layers[0].Output != "host" || want.Layers[0].Why != "host placement" {
						t.Errorf("host run's layer 1: output %q (%q)", want.Layers[0].Output, want.Layers[0].Why)
					}
				})
			}
		}
	}
}

// TestResidentFallback: a layer whose range does not fit what a device
// may give it (ResidentBytes) goes to host memory, saying why, with the
// same output; under ResidentAuto CPU back ends keep layers only when
// ResidentBytes is set, and keep a layer whose ranges fit it while the
// next, wider, goes to the host.
func TestResidentFallback(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	cfg, params := deepModel(t, b, nn.KindSAGE, ds)
	cfg2 := cfg
	x := inputs(t, ds, false)
	bs := []backend.Backend{newCPU(t), newCPU(t)}
	want := runOn(t, bs, cfg, params, in, x, Request{}, Options{Placement: PlaceHost})
	// Each device's half of a 16-wide layer: 1354 x 16 x 4 bytes.
	half := int64(1354 * 16 * 4)
	for _, tc := range []struct {
		name  string
		opts  Options
		out   string
		why   string
		input string
	}{
		{name: "too small", opts: Options{Resident: ResidentOn, ResidentBytes: half - 1}, out: "host", why: "over the", input: "host"},
		{name: "auto on the CPU", opts: Options{}, out: "host", why: "does not report its memory", input: "host"},
		{name: "auto with a cap", opts: Options{ResidentBytes: half}, out: "resident", input: "resident"},
		{name: "off", opts: Options{Resident: ResidentOff, ResidentBytes: half}, out: "host", why: "resident layers off", input: "host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runOn(t, bs, cfg2, params, in, x, Request{}, tc.opts)
			sameBits(t, got, want)
			for _, st := range got.Layers[:2] {
				if st.Output != tc.out || !strings.Contains(st.Why, tc.why) {
					t.Errorf("layer %d: output %q (%q), want %q (%q)", st.Layer, st.Output, st.Why, tc.out, tc.why)
				}
			}
			if st := got.Layers[1]; st.Input != tc.input {
				t.Errorf("layer 2 read its input from %q, want %q", st.Input, tc.input)
			}
		})
	}
}

// stuckAt is a back end whose NewSparse blocks from its after-th call
// on until release is closed: a device that stops before a round of the
// exchange.
type stuckAt struct {
	backend.Backend
	calls   atomic.Int64
	after   int64
	release chan struct{}
}

func (s *stuckAt) NewSparse(rows, cols int, indptr []int64, indices []int32) (backend.Sparse, error) {
	if s.calls.Add(1) >= s.after {
		<-s.release
	}
	return s.Backend.NewSparse(rows, cols, indptr, indices)
}

func (s *stuckAt) Name() string { return "stuck:1" }

// TestResidentMissingDevice: a device that stops before the exchange of
// a resident layer fails the run within the stall timeout with an error
// naming it, from the device waiting for it in the exchange and from the
// stall watchdog, instead of a hang.
func TestResidentMissingDevice(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	cfg, params := deepModel(t, b, nn.KindSAGE, ds)
	x := inputs(t, ds, false)
	// Layer 1's chunks on device 1 (the minimum budget: a few) build
	// their blocks; the first of layer 2 blocks.
	probe := runOn(t, []backend.Backend{newCPU(t), newCPU(t)}, cfg, params, in, x, Request{}, Options{Budget: MinBudget, Placement: PlaceHost})
	first := int64(probe.Layers[0].Chunks) // both devices' chunks of layer 1
	s := &stuckAt{Backend: newCPU(t), release: make(chan struct{})}
	defer close(s.release)
	bs := []backend.Backend{b, s}
	models, _, err := NewModels(bs, cfg, params)
	if err != nil {
		t.Fatal(err)
	}
	// Device 1's share of layer 1's chunks: count them by running its
	// range alone is not needed: block at its first chunk of layer 2,
	// after all of its layer-1 chunks (at most first).
	s.after = 1 << 40
	r, err := newRun(in, x, Request{}, Options{Backends: bs, Models: models, Budget: MinBudget})
	if err != nil {
		t.Fatal(err)
	}
	s.after = int64(len(r.chunks(0, 1))-1) + 1
	if s.after < 2 || s.after > first {
		t.Fatalf("device 1 has %d chunks of layer 1 of %d", s.after-1, first)
	}
	t0 := time.Now()
	_, err = Run(context.Background(), in, x, Request{}, Options{Backends: bs, Models: models, Budget: MinBudget, Resident: ResidentOn, StallTimeout: time.Second})
	var ie *Error
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "[stuck:1 (device 1)] did not take part") || !strings.Contains(err.Error(), "stuck:1 (round 1 of") {
		t.Fatalf("error %v, want an *infer.Error naming the device missing from the exchange, stuck:1", err)
	}
	t.Logf("%v", err)
	if time.Since(t0) > time.Minute {
		t.Errorf("the failure took %v", time.Since(t0))
	}
}

// TestResidentBadExchange: communicators of the wrong size are refused,
// and the layers go to the host.
func TestResidentBadExchange(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	cfg, params := deepModel(t, b, nn.KindSAGE, ds)
	x := inputs(t, ds, false)
	bs := []backend.Backend{newCPU(t), newCPU(t)}
	r := runOn(t, bs[:1], cfg, params, in, x, Request{}, Options{Resident: ResidentOn}) // one device: no exchange
	if r.Layers[0].Output != "resident" {
		t.Errorf("one device: layer 1's output %q (%s), want resident", r.Layers[0].Output, r.Layers[0].Why)
	}
	single := runOn(t, bs[:1], cfg, params, in, x, Request{}, Options{Resident: ResidentOff})
	sameBits(t, r, single)
	got := runOn(t, bs, cfg, params, in, x, Request{}, Options{Resident: ResidentOn, Exchange: make([]comm.Comm, 2)})
	if st := got.Layers[0]; st.Output != "host" || !strings.Contains(st.Why, "exchange communicator 0 is not rank 0 of 2") {
		t.Errorf("layer 1: output %q (%q), want host for want of communicators", st.Output, st.Why)
	}
	sameBits(t, got, single)
}

// TestBuildersMatchOne: several chunk builders per device (Workers 16:
// 4 builders, each chunk built by 4 goroutines) give the output of one
// serial builder bit for bit, with the hidden layers resident or on the
// host, on 1 and 2 CPU devices, and every chunk arrives in its turn.
func TestBuildersMatchOne(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	cfg, params := deepModel(t, b, nn.KindSAGE, ds)
	x := inputs(t, ds, false)
	for _, devices := range []int{1, 2} {
		for _, res := range []Residency{ResidentOff, ResidentOn} {
			t.Run(fmt.Sprintf("devices=%d/resident=%v", devices, res == ResidentOn), func(t *testing.T) {
				bs := make([]backend.Backend, devices)
				for i := range bs {
					bs[i] = newCPU(t)
				}
				want := runOn(t, bs, cfg, params, in, x, Request{}, Options{Budget: MinBudget, Resident: res, Workers: 1})
				got := runOn(t, bs, cfg, params, in, x, Request{}, Options{Budget: MinBudget, Resident: res, Workers: 16})
				if want.Layers[0].Chunks < 8 {
					t.Fatalf("%d chunks in layer 1: too few to run builders side by side", want.Layers[0].Chunks)
				}
				sameBits(t, got, want)
			})
		}
	}
}

func TestBuildersSplitWorkers(t *testing.T) {
	for _, c := range []struct{ workers, n, each int }{{1, 1, 1}, {3, 1, 3}, {4, 1, 4}, {8, 2, 4}, {16, 4, 4}, {64, 4, 16}} {
		r := run{opts: Options{Backends: make([]backend.Backend, 1), Workers: c.workers}}
		if n, each := r.builders(); n != c.n || each != c.each {
			t.Errorf("workers %d: %d builders of %d, want %d of %d", c.workers, n, each, c.n, c.each)
		}
	}
}

// TestPhases: every layer reports the host time of each phase of its
// chunks, and with ProfileOps the log has a line of them per layer (the
// CPU back end has no op profiler: no op lines, no Ops).
func TestPhases(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	cfg, params := deepModel(t, b, nn.KindSAGE, ds)
	x := inputs(t, ds, false)
	bs := []backend.Backend{newCPU(t), newCPU(t)}
	var log bytes.Buffer
	res := runOn(t, bs, cfg, params, in, x, Request{}, Options{Budget: MinBudget, Resident: ResidentOn, Log: &log, ProfileOps: true})
	for _, st := range res.Layers {
		if len(st.Phases) != numPhases || st.Phases["input"] <= 0 || st.Phases["forward"] <= 0 || st.Ops != nil {
			t.Errorf("layer %d: phases %v, ops %v", st.Layer, st.Phases, st.Ops)
		}
		if want := fmt.Sprintf("inference layer %d host time (slowest device): block ", st.Layer); !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
		if want := fmt.Sprintf("inference layer %d wall %.2f s: setup ", st.Layer, st.Seconds); !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
		// The accounting covers the wall time: setup, finish and any
		// device's parts add up to it.
		if len(st.Devices) != len(bs) {
			t.Fatalf("layer %d: %d device times for %d devices", st.Layer, len(st.Devices), len(bs))
		}
		for d, dt := range st.Devices {
			sum := st.SetupSeconds + st.FinishSeconds + dt.Start + dt.Phases + dt.BuildWait + dt.Other + dt.End + dt.Idle
			if math.Abs(sum-st.Seconds) > 1e-6 || dt.Phases <= 0 || dt.Other < 0 || dt.Idle < 0 {
				t.Errorf("layer %d device %d: %+v, setup %g, finish %g add up to %g s of %g", st.Layer, d, dt, st.SetupSeconds, st.FinishSeconds, sum, st.Seconds)
			}
		}
	}
	t.Log(log.String())
	if strings.Contains(log.String(), " ops on ") {
		t.Errorf("op lines without a profiler:\n%s", log.String())
	}
}

// TestAsyncOutputsMatch: outputs copied to the host asynchronously
// (the default) are the waited copies' (Options.SyncOutputs) bit for bit: layers on
// the host and kept on the devices, 1, 2 and 4 CPU devices (two sharing
// a back end), many chunks, every node, a few (scattered rows) or a
// hidden layer, SAGE on dense and GCN on sparse features.
func TestAsyncOutputsMatch(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	n := int64(ds.NumNodes())
	offsets := map[int][]int64{1: nil, 2: {0, 400, n}, 4: {0, 1500, 1500, 2000, n}}
	for _, kind := range []string{nn.KindSAGE, nn.KindGCN} {
		cfg, params := deepModel(t, b, kind, ds)
		x := inputs(t, ds, kind == nn.KindGCN)
		for _, devices := range []int{1, 2, 4} {
			bs := make([]backend.Backend, devices)
			for i := range bs {
				bs[i] = newCPU(t)
			}
			if devices == 4 {
				bs[3] = bs[2]
			}
			for _, req := range []Request{{}, {Nodes: []int32{2707, 3, 3, 1000, 42}}, {Layer: 2, Nodes: []int32{9, 1}}} {
				for _, base := range []Options{{Placement: PlaceHost}, {Resident: ResidentOn}} {
					base.Offsets, base.Budget = offsets[devices], MinBudget
					got := runOn(t, bs, cfg, params, in, x, req, base)
					base.SyncOutputs = true
					want := runOn(t, bs, cfg, params, in, x, req, base)
					sameBits(t, got, want)
				}
			}
		}
	}
}
