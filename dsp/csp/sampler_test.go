package csp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// TestSiblingCPU: on CPU back ends, as on GPUs, a sibling of every rank's
// sampler (its own back end and communicators) draws the same batches,
// two sampling alternate batches; a sibling with a communicator of
// another rank, without one in a group, on another kind of back end or
// of a closed sampler is refused; closing the sibling leaves the first
// one working.
func TestSiblingCPU(t *testing.T) {
	g := randomGraph(5, 2000, 8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, P := range []int{1, 3} {
		off := make([]int64, P+1)
		for p := range off {
			off[p] = g.NumRows * int64(p) / int64(P)
		}
		cfg := Config{Fanouts: []int{6, 4}, EdgeIDs: true}
		ss := openCPUGroup(t, g, off, nil, func(be *cpu.Backend, p *layout.Patch, c comm.Comm) (*Sampler, error) {
			return New(be, p, off, c, cfg)
		})
		bs := cpuBackends(t, P)
		cs := cpuComms(t, bs, nil)
		sibs := make([]*Sampler, P)
		for r := range P {
			var c comm.Comm
			if cs != nil {
				c = cs[r]
			}
			var err error
			if sibs[r], err = ss[r].Sibling(bs[r], c); err != nil {
				t.Fatalf("P=%d rank %d: %v", P, r, err)
			}
			if sibs[r].Rank() != r || sibs[r].Size() != P || sibs[r].NumHops() != 2 {
				t.Fatalf("P=%d: sibling of rank %d is rank %d of %d with %d hops", P, r, sibs[r].Rank(), sibs[r].Size(), sibs[r].NumHops())
			}
		}
		for bi := range 4 {
			seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
			for r := range P {
				seeds[r] = ownedSeeds(uint64(100*bi+r), off, r, 50)
				keys[r] = sample.Key{Seed: 9, Batch: bi*P + r}
			}
			who := ss
			if bi%2 == 1 {
				who = sibs
			}
			got, errs := sampleAll(ctx, who, seeds, keys)
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("P=%d batch %d: %v", P, bi, err)
			}
			want, errs := sampleAll(ctx, ss, seeds, keys)
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("P=%d batch %d (first sampler): %v", P, bi, err)
			}
			for r := range P {
				compareBlocks(t, fmt.Sprintf("P=%d batch %d rank %d", P, bi, r), got[r].Blocks, want[r].Blocks)
			}
		}
		if P > 1 {
			for name, c := range map[string]comm.Comm{"another rank's communicator": cs[1], "no communicator": nil} {
				if _, err := ss[0].Sibling(bs[0], c); !errors.Is(err, ErrInput) {
					t.Errorf("sibling with %s: %v, want ErrInput", name, err)
				}
			}
		}
		if _, err := ss[0].Sibling(otherBackend{}, nil); !errors.Is(err, ErrInput) {
			t.Errorf("sibling on another back end: %v, want ErrInput", err)
		}
		for r := range P {
			if st := sibs[r].Stats(); st.Batches != 2 {
				t.Errorf("P=%d rank %d: sibling stats %+v, want 2 batches", P, r, st)
			}
			if err := sibs[r].Close(); err != nil {
				t.Fatal(err)
			}
		}
		seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
		for r := range P {
			seeds[r], keys[r] = ownedSeeds(uint64(r), off, r, 20), sample.Key{Seed: 9, Batch: r}
		}
		if _, errs := sampleAll(ctx, ss, seeds, keys); errors.Join(errs...) != nil {
			t.Fatalf("P=%d: after closing the siblings: %v", P, errors.Join(errs...))
		}
		ss[0].Close()
		if _, err := ss[0].Sibling(bs[0], nil); !errors.Is(err, ErrInput) {
			t.Errorf("sibling of a closed sampler: %v, want ErrInput", err)
		}
	}
}

// TestClosedAndDirectErrors: every sampler refuses work once closed
// (ErrInput; Close again is a no-op), and a single rank sampling
// directly reports bad seeds as ErrInput at hop 0.
func TestClosedAndDirectErrors(t *testing.T) {
	g := randomGraph(3, 300, 4)
	off := []int64{0, g.NumRows}
	ctx := context.Background()
	open := func(f func(be *cpu.Backend, p *layout.Patch) (interface{ Close() error }, error)) any {
		return openCPUGroup(t, g, off, nil, func(be *cpu.Backend, p *layout.Patch, _ comm.Comm) (interface{ Close() error }, error) {
			return f(be, p)
		})[0]
	}
	s := open(func(be *cpu.Backend, p *layout.Patch) (interface{ Close() error }, error) {
		return New(be, p, off, nil, Config{Fanouts: []int{3, -1}})
	}).(*Sampler)
	if _, err := s.Sample(ctx, []graph.NodeID{1, 1}, sample.Key{}); !errors.Is(err, ErrInput) {
		t.Errorf("direct sampling of repeated seeds: %v, want ErrInput", err)
	}
	if st := s.Stats(); st.Waits != 2 || st.Batches != 0 {
		t.Errorf("stats after a failed direct batch: %+v, want 2 waits (a fanout -1 hop) and no batch", st)
	}
	ls := open(func(be *cpu.Backend, p *layout.Patch) (interface{ Close() error }, error) {
		return NewLayer(be, p, off, nil, Config{Fanouts: []int{30}})
	}).(*LayerSampler)
	w := open(func(be *cpu.Backend, p *layout.Patch) (interface{ Close() error }, error) {
		return NewWalker(be, p, off, nil, 4, 0)
	}).(*Walker)
	if ls.NumHops() != 1 || w.Length() != 4 {
		t.Errorf("%d hops, walks of %d", ls.NumHops(), w.Length())
	}
	for _, c := range []interface{ Close() error }{s, ls, w} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
	seeds := []graph.NodeID{1, 2}
	_, err1 := s.Sample(ctx, seeds, sample.Key{})
	_, err2 := ls.Sample(ctx, seeds, sample.Key{})
	_, err3 := w.Walk(ctx, seeds, sample.Key{})
	for i, err := range []error{err1, err2, err3} {
		if !errors.Is(err, ErrInput) {
			t.Errorf("sampler %d after Close: %v, want ErrInput", i, err)
		}
	}
}

// TestCPUMachineContract: the CPU machine refuses calls that break its
// methods' contracts (errContract) instead of indexing out of range.
func TestCPUMachineContract(t *testing.T) {
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := randomGraph(3, 100, 4)
	owner, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: []int{3, -1}})
	if err != nil {
		t.Fatal(err)
	}
	m := &cpuMachine{be: be, P: 2, off: []int64{0, 50, 100}, g: g, owner: owner, fan: []int{3, -1}}
	lm := &cpuLayerMachine{cpuMachine: m, hi: 50, n: 100}
	wm := &cpuWalkMachine{cpuMachine: m, idOff: []int64{0, 1, 2}, hi: 50, n: 100, length: 2}
	i32 := func(n int) backend.Buffer { return cpu.WrapI32(make([]int32, n)) }
	i64 := func(v ...int64) backend.Buffer { return cpu.WrapI64(slices.Clone(v)) }
	for name, f := range map[string]func() error{
		"alloc of float32":    func() error { _, err := m.Alloc(backend.Float32, 3); return err },
		"upload too long":     func() error { return m.Upload(i32(1), []int32{1, 2}) },
		"upload int64 to i32": func() error { return m.Upload(i32(2), []int64{1}) },
		"upload float32":      func() error { return m.Upload(i32(2), []float32{1}) },
		"read of int32":       func() error { return m.Read(make([]int64, 1), []backend.Buffer{i32(1)}, []int64{1}) },
		"read short":          func() error { return m.Read(make([]int64, 3), []backend.Buffer{i64(1)}, []int64{1}) },
		"route beyond fcap": func() error {
			return m.Route(i64(make([]int64, 2*HeaderWords)...), i32(1), i32(1), i32(1), i64(2), nil, 1, 0, 0, 3, 2)
		},
		"drawStrided, exact":  func() error { return m.DrawStrided(1, i32(1), 1, []int64{0, 1}, []uint64{0}, i32(1), i64(0)) },
		"unpackStrided short": func() error { return m.UnpackStrided(i64(0), i32(0), i64(0), i32(1), nil, i32(1), 2, 3) },
		"countExact, strided": func() error { _, _, err := m.CountExact(0, i32(1), 1, []int64{0, 1, 1}); return err },
		"drawExact, qptr": func() error {
			return m.DrawExact(1, i32(1), i64(0, 5), 1, []int64{0, 1, 1}, []uint64{0, 0}, i32(1), i64(0), 0)
		},
		"unpackExact, bptr": func() error {
			return m.UnpackExact(i64(0), i32(0), i64(0), i32(0), nil, i32(0), []int64{0, 1}, nil, 1, 0)
		},
		"relabel beyond bound": func() error { _, _, _, err := m.Relabel(i32(1), 1, i32(1), i64(0, 2), 1); return err },
		"shrink beyond":        func() error { _, err := m.Shrink(i32(1), 2); return err },
		"info short":           func() error { return lm.Info(i32(2), 2, i64(0), i64(0)) },
		"frontierInfo, bptr":   func() error { return lm.FrontierInfo(i64(0), i64(0), i32(0), []int64{0}, 1) },
		"packAlloc, hdr":       func() error { return lm.PackAlloc(i64(0, 0), i64(0), i64(0), i32(1), []int64{0, 1, 1}, nil, 1) },
		"drawLayer, roff": func() error {
			return lm.DrawLayer(i32(1), i64(0), i64(0), 1, []int64{0, 0, 0}, nil, nil, i32(0), i64(), 0, i64(0))
		},
		"unpackLayer, counts": func() error {
			return lm.UnpackLayer(i32(1), i64(0), i32(1), nil, i64(0, 1), i64(0, 0), i32(1), 1, 1, i64(0))
		},
		"initWalks short":   func() error { return wm.InitWalks(i32(2), i32(1), 1, 2) },
		"pack short":        func() error { return wm.Pack(i64(0), i64(0, 0), i32(1), 1, 2) },
		"step short":        func() error { return wm.Step(0, i64(0), 1, i64(), i32(1), i32(1), i64(), i64(0)) },
		"concat of int64":   func() error { return wm.Concat(i32(2), []backend.Buffer{i64(1)}, []int64{1}) },
		"sibling elsewhere": func() error { _, err := m.Sibling(otherBackend{}); return err },
	} {
		if err := f(); !errors.Is(err, errContract) {
			t.Errorf("%s: %v, want errContract", name, err)
		}
	}
}

// TestDeviceRegistry: the test binary links internal/cudadsp's machines
// (device_test.go); a second registration panics, and without a
// registered device a back end other than the CPU's is refused, naming
// the package that registers the CUDA machines.
func TestDeviceRegistry(t *testing.T) {
	if device == nil {
		t.Fatal("no device registered although device_test.go imports internal/cudadsp")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a second RegisterDevice did not panic")
			}
		}()
		RegisterDevice(device)
	}()
	if device.Accepts(otherBackend{}) {
		t.Error("the CUDA machines accept a back end without kernels")
	}
	saved := device
	device = nil
	defer func() { device = saved }()
	g := randomGraph(2, 100, 4)
	b, _ := book.New([]int64{0, 100})
	p, err := layout.Build(g, b, 0, layout.Options{DeviceBytes: layout.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(otherBackend{}, p, b.Offsets(), nil, Config{Fanouts: []int{2}})
	if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "no device machines are linked in (package internal/cudadsp") {
		t.Errorf("New on another back end without a device: %v", err)
	}
}

// TestNewMachineErrors: a failure building the CPU machine (weighted
// sampling over a graph without weights) is the constructor's *Error,
// of kind ErrInput and wrapping package sample's error.
func TestNewMachineErrors(t *testing.T) {
	g := randomGraph(2, 100, 4)
	g.Weights = nil
	b, _ := book.New([]int64{0, 100})
	p, err := layout.Build(g, b, 0, layout.Options{DeviceBytes: layout.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(be, p, b.Offsets(), nil, Config{Fanouts: []int{2}, Weighted: true})
	var ge *Error
	if !errors.Is(err, ErrInput) || !errors.Is(err, sample.ErrGraph) || !errors.As(err, &ge) || ge.Op != "csp.New" || ge.Hop != -1 || ge.Rank != 0 {
		t.Errorf("weighted sampling without weights: %v, want csp.New's ErrInput wrapping sample.ErrGraph", err)
	}
}
