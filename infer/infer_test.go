package infer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

func cora(t *testing.T) (*dataset.Dataset, *graph.CSR) {
	t.Helper()
	ds, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	return ds, ds.InGraph()
}

// newCPU is a CPU back end on gonum's products, whose rows do not depend
// on the row count: the tests compare chunked and one-pass results bit
// for bit, which OpenBLAS's size-dependent blocking (where it loads, as
// on the GPU hosts) does not promise.
func newCPU(t *testing.T) backend.Backend {
	t.Helper()
	b, err := cpu.New(cpu.Options{Gemm: cpu.GemmGo})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// inputs returns Cora's row-normalized features, sparse or dense.
func inputs(t *testing.T, ds *dataset.Dataset, sparse bool) *Input {
	t.Helper()
	n := int(ds.NumNodes())
	x := &Input{Rows: n, Cols: ds.FeatDim, Dense: dataset.RowNormalize(ds.Features, ds.FeatDim)}
	if sparse {
		h, err := autograd.HostSparseFromDense(n, ds.FeatDim, x.Dense)
		if err != nil {
			t.Fatal(err)
		}
		x.Sparse, x.Dense = h, nil
	}
	return x
}

// reference runs the nn model over the whole graph in one pass, as
// training's one-pass evaluation did.
func reference(t *testing.T, b backend.Backend, m nn.Model, in *graph.CSR, x *Input) []float32 {
	t.Helper()
	blk, err := nn.UploadGraph(b, in)
	if err != nil {
		t.Fatal(err)
	}
	defer blk.Free()
	tp := autograd.NewTape(b)
	defer tp.Release()
	blocks := make([]*nn.Block, m.Config().Layers)
	for i := range blocks {
		blocks[i] = blk
	}
	var out *autograd.Var
	if x.Sparse != nil {
		xs, err := autograd.NewSparseInput(b, x.Rows, x.Cols, x.Sparse.Indptr, x.Sparse.Indices, x.Sparse.Values)
		if err != nil {
			t.Fatal(err)
		}
		defer xs.Free(b)
		out, err = m.ForwardSparse(tp, xs, blocks, false, 0)
		if err != nil {
			t.Fatal(err)
		}
	} else {
		buf, err := b.Alloc(backend.Float32, len(x.Dense))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(buf)
		if err := b.Upload(buf, x.Dense); err != nil {
			t.Fatal(err)
		}
		xv, err := tp.Const(buf, x.Rows, x.Cols)
		if err != nil {
			t.Fatal(err)
		}
		if out, err = m.Forward(tp, xv, blocks, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	host := make([]float32, out.Len())
	if err := b.Download(host, out.Value); err != nil {
		t.Fatal(err)
	}
	return host
}

func model(t *testing.T, b backend.Backend, kind string, ds *dataset.Dataset) nn.Model {
	t.Helper()
	cfg := nn.Config{Kind: kind, InDim: ds.FeatDim, OutDim: ds.NumClasses, Hidden: 16, Layers: 2, NoDropout: true, Seed: 7}
	if kind == nn.KindGAT {
		cfg.Hidden, cfg.Heads, cfg.OutHeads = 4, 3, 2
	}
	m, err := nn.New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nn.FreeParams(b, m.Params()) })
	return m
}

// TestMatchesOnePass: layer-wise inference gives the one-pass forward's
// logits bit for bit on the CPU back end, for every model, sparse and
// dense features, any budget and any number of devices.
func TestMatchesOnePass(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	for _, kind := range []string{nn.KindSAGE, nn.KindGCN, nn.KindGAT} {
		for _, sparse := range []bool{true, false} {
			if testing.Short() && !sparse && kind != nn.KindSAGE {
				continue // -short: dense features with SAGE only
			}
			x := inputs(t, ds, sparse)
			m := model(t, b, kind, ds)
			want := reference(t, b, m, in, x)
			params, err := nn.SaveParams(b, m.Params())
			if err != nil {
				t.Fatal(err)
			}
			for _, devices := range []int{1, 3} {
				for _, budget := range []int64{MinBudget, 0} {
					place := PlaceHost
					if budget == 0 {
						place = PlaceDevice // the GPUs' path, on CPU back ends
					}
					t.Run(fmt.Sprintf("%s/sparse=%v/devices=%d/budget=%d", kind, sparse, devices, budget), func(t *testing.T) {
						bs := make([]backend.Backend, devices)
						for i := range bs {
							bs[i] = newCPU(t)
						}
						if devices == 3 && budget == 0 {
							bs[2] = bs[1] // virtual devices sharing a back end
						}
						models, free, err := NewModels(bs, m.Config(), params)
						if err != nil {
							t.Fatal(err)
						}
						defer free()
						res, err := Run(context.Background(), in, x, Request{}, Options{Backends: bs, Models: models, Budget: budget, Placement: place})
						if err != nil {
							t.Fatal(err)
						}
						if res.Rows != int(ds.NumNodes()) || res.Cols != ds.NumClasses {
							t.Fatalf("result %d x %d, want %d x %d", res.Rows, res.Cols, ds.NumNodes(), ds.NumClasses)
						}
						chunks := 0
						for _, l := range res.Layers {
							chunks += l.Chunks
						}
						if budget == MinBudget && chunks < 2*devices+2 {
							t.Errorf("%d chunks with the minimum budget: the test does not split the layers", chunks)
						}
						for i := range want {
							if math.Float32bits(res.Data[i]) != math.Float32bits(want[i]) {
								t.Fatalf("logit %d (node %d) is %v, the one-pass forward's %v", i, i/res.Cols, res.Data[i], want[i])
							}
						}
					})
				}
			}
		}
	}
}

// TestNodesAndLayers: a node list gives those rows in order (repeats
// included) and computes only what they need; a hidden layer's output
// is the activation the next layer reads.
func TestNodesAndLayers(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	x := inputs(t, ds, true)
	m := model(t, b, nn.KindSAGE, ds)
	opts := Options{Backends: []backend.Backend{b}, Models: []nn.Model{m}}
	all, err := Run(context.Background(), in, x, Request{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	nodes := []int32{5, 2707, 0, 5, 1000}
	some, err := Run(context.Background(), in, x, Request{Nodes: nodes}, opts)
	if err != nil {
		t.Fatal(err)
	}
	c := all.Cols
	for i, v := range nodes {
		for j := range c {
			if some.Data[i*c+j] != all.Data[int(v)*c+j] {
				t.Fatalf("row %d (node %d) differs from the whole run's", i, v)
			}
		}
	}
	if got := some.Layers[1].Nodes; got != 4 {
		t.Errorf("last layer computed %d nodes, want the 4 distinct ones", got)
	}
	if got := some.Layers[0].Nodes; got >= ds.NumNodes() || got <= 4 {
		t.Errorf("first layer computed %d nodes, want the 4 and their neighbors only", got)
	}
	hid, err := Run(context.Background(), in, x, Request{Layer: 1, Nodes: []int32{3}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if hid.Rows != 1 || hid.Cols != 16 {
		t.Fatalf("layer 1 gives %d x %d, want 1 x 16", hid.Rows, hid.Cols)
	}
	neg := 0
	for _, v := range hid.Data {
		if v < 0 {
			neg++
		}
	}
	if neg > 0 {
		t.Errorf("hidden output has %d negative values after ReLU", neg)
	}
}

func TestBadRequests(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	x := inputs(t, ds, true)
	m := model(t, b, nn.KindGCN, ds)
	opts := Options{Backends: []backend.Backend{b}, Models: []nn.Model{m}}
	for _, tc := range []struct {
		name string
		req  Request
		opts func(o *Options)
		x    *Input
		want string
	}{
		{name: "layer", req: Request{Layer: 3}, want: "layer 3 of a 2-layer model"},
		{name: "node", req: Request{Nodes: []int32{1, 2708}}, want: "node 2708 (position 1) out of range"},
		{name: "negative node", req: Request{Nodes: []int32{-1}}, want: "node -1 (position 0)"},
		{name: "budget", opts: func(o *Options) { o.Budget = 10 }, want: "below the minimum"},
		{name: "models", opts: func(o *Options) { o.Models = nil }, want: "0 models for 1 back ends"},
		{name: "offsets", opts: func(o *Options) { o.Offsets = []int64{0, 5} }, want: "want 0 to 2708"},
		{name: "offset count", opts: func(o *Options) { o.Offsets = []int64{} }, want: "0 offsets for 1 devices"},
		{name: "features", x: &Input{Rows: x.Rows, Cols: 10, Dense: make([]float32, x.Rows*10)}, want: "reads 1433 features, the graph has 10"},
		{name: "rows", x: &Input{Rows: 3, Cols: 1, Dense: make([]float32, 3)}, want: "3 feature rows for 2708 nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := opts
			if tc.opts != nil {
				tc.opts(&o)
			}
			xx := x
			if tc.x != nil {
				xx = tc.x
			}
			_, err := Run(context.Background(), in, xx, tc.req, o)
			var ie *Error
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want an *infer.Error containing %q", err, tc.want)
			}
		})
	}
}

func TestCancelled(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	m := model(t, b, nn.KindSAGE, ds)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, in, inputs(t, ds, true), Request{}, Options{Backends: []backend.Backend{b}, Models: []nn.Model{m}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

// stuck is a back end whose NewSparse blocks until release is closed: a
// device that stops making progress.
type stuck struct {
	backend.Backend
	release chan struct{}
}

func (s *stuck) NewSparse(rows, cols int, indptr []int64, indices []int32) (backend.Sparse, error) {
	<-s.release
	return s.Backend.NewSparse(rows, cols, indptr, indices)
}

func (s *stuck) Name() string { return "stuck:1" }

// TestStalledDevice: a device that finishes no chunk within the stall
// timeout fails the run with an error naming it, instead of a hang.
func TestStalledDevice(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	m := model(t, b, nn.KindSAGE, ds)
	params, err := nn.SaveParams(b, m.Params())
	if err != nil {
		t.Fatal(err)
	}
	s := &stuck{Backend: newCPU(t), release: make(chan struct{})}
	// Released at the end; the models are left to the garbage collector,
	// as the stalled goroutine may still be using them.
	defer close(s.release)
	bs := []backend.Backend{b, s}
	models, _, err := NewModels(bs, m.Config(), params)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), in, inputs(t, ds, true), Request{}, Options{Backends: bs, Models: models, StallTimeout: 20 * time.Millisecond})
	var ie *Error
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "no chunk finished") || !strings.Contains(err.Error(), "stuck:1 (chunk 1 of") {
		t.Fatalf("error %v, want an *infer.Error naming the stalled device stuck:1", err)
	}
}
