//go:build linux

package infer

import (
	"context"
	"math"
	"testing"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// TestMappedOutputs: host outputs mapped outside Go's heap (every one,
// with minMapped lowered) give the same logits and hidden rows bit for
// bit as Go memory, on one device and on two; a whole-graph output is
// handed over mapped and Release unmaps it once; a node list's output
// is Go memory.
func TestMappedOutputs(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	x := inputs(t, ds, false)
	m := model(t, b, nn.KindSAGE, ds)
	params, err := nn.SaveParams(b, m.Params())
	if err != nil {
		t.Fatal(err)
	}
	run := func(devices int, req Request) *Result {
		bs := make([]backend.Backend, devices)
		for i := range bs {
			bs[i] = newCPU(t)
		}
		models, free, err := NewModels(bs, m.Config(), params)
		if err != nil {
			t.Fatal(err)
		}
		defer free()
		res, err := Run(context.Background(), in, x, req, Options{Backends: bs, Models: models, Budget: MinBudget, Placement: PlaceHost})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	nodes := []int32{5, 0, 2707, 5}
	for _, req := range []Request{{}, {Layer: 1}, {Nodes: nodes}} {
		want := run(1, req) // Go memory: minMapped is 256 MiB
		if want.unmap != nil {
			t.Fatalf("request %+v: a %d-value output was mapped", req, len(want.Data))
		}
		saved := minMapped
		minMapped = 1
		got1, got2 := run(1, req), run(2, req)
		minMapped = saved
		for _, got := range []*Result{got1, got2} {
			if mapped := got.unmap != nil; mapped != (req.Nodes == nil) {
				t.Errorf("request %+v: output mapped %v, want %v", req, mapped, req.Nodes == nil)
			}
			if got.Rows != want.Rows || got.Cols != want.Cols {
				t.Fatalf("request %+v: %d x %d, want %d x %d", req, got.Rows, got.Cols, want.Rows, want.Cols)
			}
			for i := range want.Data {
				if math.Float32bits(got.Data[i]) != math.Float32bits(want.Data[i]) {
					t.Fatalf("request %+v: value %d is %v, want %v", req, i, got.Data[i], want.Data[i])
				}
			}
			got.Release()
			got.Release() // a second call is a no-op
			if got.Data != nil || got.unmap != nil {
				t.Errorf("request %+v: Release left Data (%d values) or its unmap", req, len(got.Data))
			}
		}
	}
}

// TestHostFloats: below minMapped Go memory, from it a zeroed mapping
// that unmap frees.
func TestHostFloats(t *testing.T) {
	x, unmap := hostFloats(1000)
	if unmap != nil || len(x) != 1000 {
		t.Fatalf("1000 values: len %d, mapped %v", len(x), unmap != nil)
	}
	n := minMapped/4 + 3
	x, unmap = hostFloats(n)
	if unmap == nil || len(x) != n {
		t.Fatalf("%d values: len %d, mapped %v", n, len(x), unmap != nil)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if x[i] != 0 {
			t.Fatalf("value %d of a fresh mapping is %v", i, x[i])
		}
		x[i] = 1
	}
	unmap()
	unmap()
}
