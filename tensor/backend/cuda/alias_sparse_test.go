package cuda

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

// TestAliasSparseTranspose builds a matrix's transpose on a sibling
// handle (BuildTranspose on an alias), hands both to a third handle
// (AliasSparse) and requires its transposed product to equal, bit for
// bit, the one of the same matrix whose transpose is built lazily; freeing
// the aliases leaves the original usable.
func TestAliasSparseTranspose(t *testing.T) {
	d := gpu(t)
	loader, err := d.Sibling(backend.SiblingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer loader.Close()
	trainer, err := d.Sibling(backend.SiblingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer trainer.Close()
	const rows, cols, width = 300, 500, 7
	r := rand.New(rand.NewPCG(3, 4))
	indptr := []int64{0}
	var indices []int32
	for range rows {
		for range r.IntN(9) {
			indices = append(indices, int32(r.IntN(cols)))
		}
		indptr = append(indptr, int64(len(indices)))
	}
	x := make([]float32, rows*width)
	for i := range x {
		x[i] = r.Float32() - 0.5
	}
	a, err := d.NewSparse(rows, cols, indptr, indices)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeSparse(a)
	ref, err := d.NewSparse(rows, cols, indptr, indices)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeSparse(ref)
	xb := upload(t, d, backend.Float32, x)
	defer d.Free(xb)
	want, _ := d.Alloc(backend.Float32, cols*width)
	defer d.Free(want)
	if err := d.SpMM(want, ref, true, xb, nil, 1, width); err != nil {
		t.Fatal(err)
	}

	la, err := loader.(*Device).AliasSparse(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := loader.(*Device).BuildTranspose(la); err != nil {
		t.Fatal(err)
	}
	if err := loader.Synchronize(); err != nil {
		t.Fatal(err)
	}
	tr := trainer.(*Device)
	ta, err := tr.AliasSparse(la)
	if err != nil {
		t.Fatal(err)
	}
	if ta.(*Sparse).tptr == nil {
		t.Fatal("the alias lacks the transpose built on the loader")
	}
	xt, _ := tr.Alias(xb)
	got, _ := tr.Alloc(backend.Float32, cols*width)
	defer tr.Free(got)
	if err := tr.SpMM(got, ta, true, xt, nil, 1, width); err != nil {
		t.Fatal(err)
	}
	g, w := download[float32](t, tr, got), download[float32](t, d, want)
	if !slices.Equal(g, w) {
		t.Fatal("transposed product over the aliased, prebuilt transpose differs from the lazily built one")
	}
	tr.FreeSparse(ta)
	loader.FreeSparse(la)
	// The original is intact: its own transposed product still runs.
	if err := d.SpMM(want, a, true, xb, nil, 1, width); err != nil {
		t.Fatal(err)
	}
	if w2 := download[float32](t, d, want); !slices.Equal(w2, w) {
		t.Fatal("the original matrix changed after its aliases were freed")
	}
	// Other inputs are refused.
	if _, err := tr.AliasSparse(nil); err == nil {
		t.Fatal("AliasSparse(nil) succeeded")
	}
}
