package autograd_test

import (
	"errors"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/tensor/backend"
)

// TestWidenAndGatherConst: a bfloat16 table read as float32 constants,
// whole (Widen) and by rows (GatherConst), equals its exact widening;
// the Vars need no gradient, are owned by the tape, and bad input is an
// error.
func TestWidenAndGatherConst(t *testing.T) {
	b := setup(t)
	vals := []float32{1, -2.5, 0.333984375, 3e38, -0.0, 7, 1.0 / 3, 100.1}
	enc := make([]uint16, len(vals))
	backend.ToBF16(enc, vals)
	want := make([]float32, len(vals))
	backend.FromBF16(want, enc)
	table, err := b.Alloc(backend.BFloat16, len(enc))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Upload(table, enc); err != nil {
		t.Fatal(err)
	}
	tp := autograd.NewTape(b)
	w, err := tp.Widen(table, 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	if w.RequiresGrad || w.Rows != 4 || w.Cols != 2 {
		t.Fatalf("Widen: %dx%d, requires grad %v", w.Rows, w.Cols, w.RequiresGrad)
	}
	for i, v := range host(t, b, w.Value) {
		if v != want[i] {
			t.Fatalf("Widen element %d = %v, want %v", i, v, want[i])
		}
	}
	idx, _ := b.Alloc(backend.Int32, 3)
	b.Upload(idx, []int32{3, 0, 3})
	g, err := tp.GatherConst(table, 4, 2, idx)
	if err != nil {
		t.Fatal(err)
	}
	gw := []float32{want[6], want[7], want[0], want[1], want[6], want[7]}
	for i, v := range host(t, b, g.Value) {
		if v != gw[i] {
			t.Fatalf("GatherConst element %d = %v, want %v", i, v, gw[i])
		}
	}
	if _, err := tp.Widen(table, 3, 2); err == nil {
		t.Fatal("Widen of 8 values as 3x2: no error")
	}
	if _, err := tp.GatherConst(table, 4, 2, nil); err == nil {
		t.Fatal("GatherConst without indices: no error")
	}
	bad, _ := b.Alloc(backend.Int32, 1)
	b.Upload(bad, []int32{4})
	var ie *backend.IndexError
	if _, err := tp.GatherConst(table, 4, 2, bad); !errors.As(err, &ie) {
		t.Fatalf("GatherConst of row 4 of 4: %v", err)
	}
	tp.Release()
	if _, err := (*autograd.Tape)(nil).Widen(table, 4, 2); err == nil {
		t.Fatal("Widen on a nil tape: no error")
	}
}
