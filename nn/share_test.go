package nn

import (
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// TestShareGrad: after ShareGrad the parameters' gradients are views of
// the front of the caller's buffer (writes through one are seen by the
// other), Flat reports that front as the gradient buffer, the values are
// untouched, and FreeParams leaves the caller's buffer usable; a buffer
// too short, or parameters not laid out by New, are refused unchanged.
func TestShareGrad(t *testing.T) {
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := DefaultConfig(KindSAGE, 6, 3)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ps := m.Params()
	v0, g0, ok := Flat(ps)
	if !ok || g0 == nil {
		t.Fatal("New's parameters are not flat")
	}
	n := g0.Len()
	short, _ := b.Alloc(backend.Float32, n-1)
	if err := ShareGrad(b, ps, short); err == nil {
		t.Fatal("a buffer one value short was taken")
	}
	if _, g, _ := Flat(ps); g != g0 {
		t.Fatal("a refused ShareGrad changed the gradient buffer")
	}
	if err := ShareGrad(b, ps[1:], short); err == nil {
		t.Fatal("a subset of the parameters was taken")
	}
	g, _ := b.Alloc(backend.Float32, n+1)
	if err := ShareGrad(b, ps, g); err != nil {
		t.Fatal(err)
	}
	v1, g1, ok := Flat(ps)
	if !ok || v1 != v0 || g1 == nil || g1.Len() != n || !backend.Overlap(g1, g) {
		t.Fatalf("Flat after ShareGrad: ok %v, same values %v, gradient %v", ok, v1 == v0, g1)
	}
	// Write 1, 2, ... through the caller's buffer: each parameter's
	// gradient is its slice, in order.
	host := make([]float32, n+1)
	for i := range host {
		host[i] = float32(i + 1)
	}
	if err := b.Upload(g, host); err != nil {
		t.Fatal(err)
	}
	off := 0
	for _, p := range ps {
		got := make([]float32, p.Len())
		if err := b.Download(got, p.Grad); err != nil {
			t.Fatal(err)
		}
		for i, x := range got {
			if x != float32(off+i+1) {
				t.Fatalf("%s grad[%d] = %v, want %v", p.Name, i, x, off+i+1)
			}
		}
		off += p.Len()
	}
	FreeParams(b, ps)
	if err := b.Download(host, g); err != nil || host[n] != float32(n+1) {
		t.Fatalf("the caller's buffer after FreeParams: %v, last %v", err, host[n])
	}
	b.Free(g)
	b.Free(short)
}
