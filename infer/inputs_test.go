package infer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// TestInputsOnDevice: layer 1's input passed on the device
// (Options.Inputs) is read there: the features are not uploaded, the
// chunks gather on the device (their source IDs go up), the logits are a
// Run's without Inputs bit for bit, and neither Run nor Keep frees the
// caller's buffer, which still holds the features afterwards. A device
// without an entry uploads the features as before.
func TestInputsOnDevice(t *testing.T) {
	ds, in := cora(t)
	x := inputs(t, ds, false)
	n, f := int(ds.NumNodes()), ds.FeatDim
	var nodes []int32
	for _, s := range [][]int32{ds.Train, ds.Val, ds.Test} {
		nodes = append(nodes, s...)
	}
	for k, kind := range []string{nn.KindSAGE, nn.KindGCN} {
		for kp, keep := range []bool{false, true} {
			// The race detector's runs (-short) take SAGE without a Keep
			// and GCN with one: each model and each setting once.
			if testing.Short() && k != kp {
				continue
			}
			t.Run(fmt.Sprintf("%s/keep=%v", kind, keep), func(t *testing.T) {
				ref := newCPU(t)
				cfg := model(t, ref, kind, ds).Config()
				params, err := nn.SaveParams(ref, model(t, ref, kind, ds).Params())
				if err != nil {
					t.Fatal(err)
				}
				plain := []backend.Backend{newCPU(t), newCPU(t)}
				pm, freePlain, err := NewModels(plain, cfg, params)
				if err != nil {
					t.Fatal(err)
				}
				defer freePlain()
				want, err := Run(context.Background(), in, x, Request{Nodes: nodes}, Options{Backends: plain, Models: pm, Budget: MinBudget})
				if err != nil {
					t.Fatal(err)
				}

				cs := []*counting{{Backend: newCPU(t), floats: map[int]int{}}, {Backend: newCPU(t), floats: map[int]int{}}}
				bs := []backend.Backend{cs[0], cs[1]}
				models, freeModels, err := NewModels(bs, cfg, params)
				if err != nil {
					t.Fatal(err)
				}
				defer freeModels()
				table, err := bs[0].Alloc(backend.Float32, n*f)
				if err != nil {
					t.Fatal(err)
				}
				defer cs[0].Backend.Free(table)
				if err := bs[0].Upload(table, x.Dense); err != nil {
					t.Fatal(err)
				}
				opts := Options{Backends: bs, Models: models, Budget: MinBudget, Placement: PlaceDevice, Inputs: []backend.Buffer{table, nil}}
				var k *Keep
				if keep {
					k = &Keep{Budget: 64 << 20}
					opts.Keep = k
				}
				for run := range 2 {
					for _, c := range cs {
						c.reset()
						c.freed = map[backend.Buffer]int{}
					}
					got, err := Run(context.Background(), in, x, Request{Nodes: nodes}, opts)
					if err != nil {
						t.Fatal(err)
					}
					if run == 1 && keep {
						k.Free()
					}
					for i := range want.Data {
						if math.Float32bits(got.Data[i]) != math.Float32bits(want.Data[i]) {
							t.Fatalf("run %d: logit %d is %v, %v without Inputs", run+1, i, got.Data[i], want.Data[i])
						}
					}
					if c := cs[0].floats[n*f]; c != 0 {
						t.Errorf("run %d: device 0 uploaded the features %d times, want none", run+1, c)
					}
					if run == 0 && cs[0].ints == 0 {
						t.Errorf("run %d: device 0 uploaded no source IDs: it did not gather on the device", run+1)
					}
					// Device 1 has no entry: it uploads them (once with
					// a Keep that holds them).
					wantUp := 1
					if keep && run == 1 {
						wantUp = 0
					}
					if c := cs[1].floats[n*f]; c != wantUp {
						t.Errorf("run %d: device 1 uploaded the features %d times, want %d", run+1, c, wantUp)
					}
					if c := cs[0].freed[table]; c != 0 {
						t.Errorf("run %d: the caller's table was freed %d times", run+1, c)
					}
				}
				back := make([]float32, n*f)
				if err := bs[0].Download(back, table); err != nil {
					t.Fatal(err)
				}
				for i := range back {
					if math.Float32bits(back[i]) != math.Float32bits(x.Dense[i]) {
						t.Fatalf("the caller's table changed at %d: %v, was %v", i, back[i], x.Dense[i])
					}
				}
			})
		}
	}
}

// TestBadInputs: Options.Inputs of the wrong count, type or size, or
// given with sparse features, are refused before anything runs.
func TestBadInputs(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	dense, sparse := inputs(t, ds, false), inputs(t, ds, true)
	m := model(t, b, nn.KindSAGE, ds)
	n, f := dense.Rows, dense.Cols
	for _, tc := range []struct {
		name   string
		x      *Input
		inputs []backend.Buffer
		want   string
	}{
		{"count", dense, []backend.Buffer{nil, nil}, "2 device inputs for 1 back ends"},
		{"short", dense, []backend.Buffer{cpu.WrapF32(make([]float32, n*f-1))}, fmt.Sprintf("is %d float32 values, want %d x %d float32", n*f-1, n, f)},
		{"type", dense, []backend.Buffer{cpu.WrapI32(make([]int32, n*f))}, "int32 values"},
		{"sparse", sparse, []backend.Buffer{cpu.WrapF32(make([]float32, n*f))}, "given for sparse features"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), in, tc.x, Request{}, Options{Backends: []backend.Backend{b}, Models: []nn.Model{m}, Inputs: tc.inputs})
			var ie *Error
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want an *infer.Error containing %q", err, tc.want)
			}
		})
	}
}
