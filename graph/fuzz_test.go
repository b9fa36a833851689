package graph

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

// FuzzFromEdges: any byte string becomes (numNodes, src, dst, weights).
// FromEdges must never panic; it errors exactly when an ID is out of range,
// and otherwise returns a valid graph holding the same multiset of edges,
// rows sorted; the transpose of the transpose must give it back.
func FuzzFromEdges(f *testing.F) {
	f.Add(uint8(4), false, []byte{0, 1, 1, 2, 2, 0, 3, 3, 0, 1})
	f.Add(uint8(0), true, []byte{})
	f.Add(uint8(1), true, []byte{0, 0, 0, 0})
	f.Add(uint8(3), false, []byte{5, 1, 255, 0})
	f.Fuzz(func(t *testing.T, n uint8, dedup bool, data []byte) {
		numNodes := int64(n % 64)
		var src, dst []NodeID
		var w []float32
		for i := 0; i+1 < len(data); i += 2 {
			src = append(src, NodeID(int8(data[i])))
			dst = append(dst, NodeID(int8(data[i+1])))
			w = append(w, float32(i))
		}
		inRange := func(x NodeID) bool { return x >= 0 && int64(x) < numNodes }
		valid := true
		for i := range src {
			valid = valid && inRange(src[i]) && inRange(dst[i])
		}
		opts := []Option{WithWeights(w)}
		if dedup {
			opts = append(opts, WithDedup(ReduceSum))
		}
		g, err := FromEdges(numNodes, src, dst, opts...)
		if !valid {
			if !errors.Is(err, ErrIndex) {
				t.Fatalf("out-of-range IDs gave %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid input rejected: %v", err)
		}
		if err := g.Validate(); err != nil {
			t.Fatalf("FromEdges built an invalid graph: %v", err)
		}
		if want := refFromEdges(numNodes, src, dst, w, dedup, ReduceSum); !sameCSR(g, want) {
			t.Fatalf("got %+v, want %+v", g, want)
		}
		tt, err := Transpose(g)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Transpose(tt)
		if err != nil || !sameCSR(back, g) {
			t.Fatalf("transpose twice changed the graph: %v", err)
		}
	})
}

// FuzzValidate: any byte string becomes a CSR with arbitrary fields.
// Validate must never panic, and every operation must either error (when
// Validate does) or succeed and produce a valid graph.
func FuzzValidate(f *testing.F) {
	f.Add(int8(3), int8(3), []byte{0, 2, 3, 5}, []byte{0, 1, 2, 0, 1}, uint8(5))
	f.Add(int8(2), int8(1), []byte{0, 3, 1}, []byte{0, 0, 0}, uint8(0))
	f.Add(int8(-1), int8(0), []byte{}, []byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, rows, cols int8, indptr, indices []byte, nw uint8) {
		g := &CSR{NumRows: int64(rows), NumCols: int64(cols)}
		for i := 0; i+1 < len(indptr); i += 2 {
			g.Indptr = append(g.Indptr, int64(binary.LittleEndian.Uint16(indptr[i:])%32)-1)
		}
		for _, b := range indices {
			g.Indices = append(g.Indices, NodeID(int8(b)))
		}
		if nw > 0 {
			g.Weights = make([]float32, int(nw)%40)
		}
		err := g.Validate()
		ops := map[string]func() (*CSR, error){
			"Transpose":       func() (*CSR, error) { return Transpose(g) },
			"RemoveSelfLoops": func() (*CSR, error) { return RemoveSelfLoops(g) },
			"AddSelfLoops":    func() (*CSR, error) { return AddSelfLoops(g, 1) },
			"Symmetrize":      func() (*CSR, error) { return Symmetrize(g, ReduceMax) },
		}
		for name, op := range ops {
			out, oerr := op()
			square := g.NumRows == g.NumCols
			switch {
			case err != nil && oerr == nil:
				t.Fatalf("%s accepted an invalid graph (%v)", name, err)
			case err == nil && oerr != nil && (square || name == "Transpose" || name == "RemoveSelfLoops"):
				t.Fatalf("%s rejected a valid graph: %v", name, oerr)
			case oerr == nil:
				if verr := out.Validate(); verr != nil {
					t.Fatalf("%s produced an invalid graph: %v", name, verr)
				}
			}
		}
		if err == nil {
			c := Clone(g)
			if SortRows(c) != nil {
				t.Fatal("SortRows rejected a valid graph")
			}
			if ok, _ := RowsSorted(c); !ok {
				t.Fatal("rows not sorted after SortRows")
			}
			in, _ := InDegrees(g)
			var sum int64
			for _, d := range in {
				sum += d
			}
			if sum != g.NumEdges() || len(in) != int(g.NumCols) || !slices.Equal(in, degOfTranspose(t, g)) {
				t.Fatal("InDegrees inconsistent")
			}
		}
	})
}

func degOfTranspose(t *testing.T, g *CSR) []int64 {
	tr, err := Transpose(g)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := OutDegrees(tr)
	return d
}
