package metis

import (
	"errors"
	"testing"
)

// ring returns the cycle graph on n vertices in METIS layout.
func ring(n int32) *Graph {
	g := &Graph{Xadj: make([]int32, n+1)}
	for v := int32(0); v < n; v++ {
		g.Adjncy = append(g.Adjncy, (v+n-1)%n, (v+1)%n)
		g.Xadj[v+1] = int32(len(g.Adjncy))
	}
	return g
}

func TestCheck(t *testing.T) {
	good := ring(6)
	if err := Check(good, Options{K: 2}); err != nil {
		t.Fatalf("valid input rejected: %v", err)
	}
	for name, c := range map[string]struct {
		g *Graph
		o Options
	}{
		"nil":         {nil, Options{K: 2}},
		"empty xadj":  {&Graph{}, Options{K: 2}},
		"xadj[0]":     {&Graph{Xadj: []int32{1, 1}, Adjncy: []int32{0}}, Options{K: 2}},
		"decreasing":  {&Graph{Xadj: []int32{0, 2, 1, 2}, Adjncy: []int32{1, 2}}, Options{K: 2}},
		"xadj end":    {&Graph{Xadj: []int32{0, 1, 1}, Adjncy: []int32{1, 0}}, Options{K: 2}},
		"range":       {&Graph{Xadj: []int32{0, 1, 2}, Adjncy: []int32{1, 7}}, Options{K: 2}},
		"self-loop":   {&Graph{Xadj: []int32{0, 1, 2}, Adjncy: []int32{0, 0}}, Options{K: 2}},
		"k=0":         {good, Options{K: 0}},
		"vwgt/ncon":   {&Graph{Xadj: good.Xadj, Adjncy: good.Adjncy, VWgt: make([]int32, 6)}, Options{K: 2}},
		"vwgt length": {&Graph{Xadj: good.Xadj, Adjncy: good.Adjncy, NCon: 2, VWgt: make([]int32, 6)}, Options{K: 2}},
		"vwgt<0":      {&Graph{Xadj: good.Xadj, Adjncy: good.Adjncy, NCon: 1, VWgt: []int32{1, 1, 1, -1, 1, 1}}, Options{K: 2}},
		"adjwgt<=0":   {&Graph{Xadj: good.Xadj, Adjncy: good.Adjncy, AdjWgt: make([]int32, 12)}, Options{K: 2}},
		"ubvec len":   {good, Options{K: 2, UBVec: []float32{1.1, 1.1}}},
		"ubvec<1":     {good, Options{K: 2, UBVec: []float32{0.5}}},
	} {
		if err := Check(c.g, c.o); !errors.Is(err, ErrInput) {
			t.Errorf("%s: err = %v, want ErrInput", name, err)
		}
		if _, err := PartGraphKway(c.g, c.o); !errors.Is(err, ErrInput) {
			t.Errorf("%s: PartGraphKway err = %v, want ErrInput", name, err)
		}
	}
}

func TestTrivialWithoutLibrary(t *testing.T) {
	// k = 1 and empty graphs are answered without calling METIS.
	r, err := PartGraphKway(ring(5), Options{K: 1})
	if err != nil || len(r.Parts) != 5 || r.Cut != 0 {
		t.Fatalf("k=1: %+v %v", r, err)
	}
	r, err = PartGraphKway(&Graph{Xadj: []int32{0}}, Options{K: 3})
	if err != nil || len(r.Parts) != 0 {
		t.Fatalf("empty: %+v %v", r, err)
	}
}

func TestPartGraph(t *testing.T) {
	if err := Load(); err != nil {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Load error does not wrap ErrUnavailable: %v", err)
		}
		t.Skipf("libmetis not available: %v", err)
	}
	g := ring(40)
	for _, f := range []func(*Graph, Options) (*Result, error){PartGraphKway, PartGraphRecursive} {
		r, err := f(g, Options{K: 4, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		// A ring splits into 4 arcs: 4 cut edges.
		if r.Cut != 4 {
			t.Errorf("cut %d, want 4", r.Cut)
		}
		counts := make([]int, 4)
		for _, p := range r.Parts {
			counts[p]++
		}
		for p, c := range counts {
			if c < 9 || c > 11 {
				t.Errorf("part %d has %d vertices", p, c)
			}
		}
	}
	if Path() == "" {
		t.Error("Path empty after a successful Load")
	}
}
