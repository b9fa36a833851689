package nn_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// plainBackend hides the CPU back end's optional interfaces (SparseAdopter
// among them), as a back end without them would be.
type plainBackend struct{ backend.Backend }

// TestNewBlockOwned: a block made of arrays handed over computes what
// NewBlock's copy does (sum and mean aggregation, GCN weights over the
// self-loop block, by hand), keeps the arrays uncopied where the back end
// adopts them, and copies them where it cannot.
func TestNewBlockOwned(t *testing.T) {
	cpu := newCPU(t)
	// 2 destinations, 4 sources: 0 <- {1, 3, 0}, 1 <- {2}.
	indptr, indices := []int64{0, 3, 4}, []int32{1, 3, 0, 2}
	x := []float32{1, 10, 100, 1000} // one feature per source
	for _, tc := range []struct {
		name  string
		b     backend.Backend
		adopt bool
	}{{"cpu", cpu, true}, {"no adopter", plainBackend{cpu}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b
			ref, err := nn.NewBlock(b, 2, 4, indptr, indices)
			must(t, err)
			defer ref.Free()
			ip, ix := slices.Clone(indptr), slices.Clone(indices)
			k, err := nn.NewBlockOwned(b, 2, 4, ip, ix)
			must(t, err)
			defer k.Free()
			if k.NumDst != 2 || k.NumSrc != 4 || k.NNZ() != 4 {
				t.Fatalf("block %d x %d with %d edges, want 2 x 4 with 4", k.NumDst, k.NumSrc, k.NNZ())
			}
			h, ok := k.A.(interface{ Indices() []int32 })
			if !ok {
				t.Fatalf("%T has no host indices", k.A)
			}
			if shared := &h.Indices()[0] == &ix[0]; shared != tc.adopt {
				t.Errorf("the matrix shares the arrays handed over: %v, want %v", shared, tc.adopt)
			}
			xb, err := b.Alloc(backend.Float32, 4)
			must(t, err)
			defer b.Free(xb)
			must(t, b.Upload(xb, x))
			var means [2][]float32
			for i, blk := range []*nn.Block{ref, k} {
				out, err := b.Alloc(backend.Float32, 2)
				must(t, err)
				must(t, b.SpMM(out, blk.A, false, xb, nil, 1, 1))
				if got := download(t, b, out); !slices.Equal(got, []float32{1011, 100}) {
					t.Errorf("sum aggregation %v, want [1011 100]", got)
				}
				mean, err := blk.MeanWeights()
				must(t, err)
				if w := download(t, b, mean); !slices.Equal(w, []float32{1.0 / 3, 1.0 / 3, 1.0 / 3, 1}) {
					t.Errorf("mean weights %v, want [1/3 1/3 1/3 1]", w)
				}
				must(t, b.SpMM(out, blk.A, false, xb, mean, 1, 1))
				means[i] = download(t, b, out)
				b.Free(out)
			}
			if !slices.Equal(means[0], means[1]) || math.Abs(float64(means[1][0])-337) > 1e-3 || means[1][1] != 100 {
				t.Errorf("mean aggregation %v, NewBlock's %v, want [337 100]", means[1], means[0])
			}
			// The self-loop block, built and handed over inside nn: row 0
			// has its loop, row 1 gains one; weights as NewBlock's.
			lr, err := ref.WithSelfLoops()
			must(t, err)
			lk, err := k.WithSelfLoops()
			must(t, err)
			if lk.NNZ() != 5 || lr.NNZ() != 5 {
				t.Fatalf("self-loop blocks of %d and %d edges, want 5", lk.NNZ(), lr.NNZ())
			}
			wr, err := ref.GCNWeights()
			must(t, err)
			wk, err := k.GCNWeights()
			must(t, err)
			got, want := download(t, b, wk), download(t, b, wr)
			if !slices.Equal(got, want) {
				t.Errorf("GCN weights %v, NewBlock's %v", got, want)
			}
			// Edge 1 -> 0: row 0 has 3 entries, column 1 two (rows 0 and 1).
			if w := float32(1 / math.Sqrt(6)); got[0] != w {
				t.Errorf("GCN weight of edge 0 = %v, want %v", got[0], w)
			}
		})
	}
}

// TestNewBlockOwnedValidation: invalid arrays are rejected, once, with
// the back end's typed error; bad dimensions with a *BlockError.
func TestNewBlockOwnedValidation(t *testing.T) {
	cpu := newCPU(t)
	for _, b := range []backend.Backend{cpu, plainBackend{cpu}} {
		var ie *backend.IndexError
		var se *backend.ShapeError
		var be *nn.BlockError
		for _, tc := range []struct {
			name string
			err  error
			as   any
		}{
			{"bad index", second(nn.NewBlockOwned(b, 1, 2, []int64{0, 1}, []int32{2})), &ie},
			{"neg index", second(nn.NewBlockOwned(b, 1, 2, []int64{0, 1}, []int32{-1})), &ie},
			{"indptr len", second(nn.NewBlockOwned(b, 2, 2, []int64{0, 1}, []int32{0})), &se},
			{"indptr dec", second(nn.NewBlockOwned(b, 2, 2, []int64{0, 2, 1}, []int32{0, 1})), &se},
			{"indptr end", second(nn.NewBlockOwned(b, 1, 2, []int64{0, 2}, []int32{0})), &se},
			{"dst>src", second(nn.NewBlockOwned(b, 3, 2, []int64{0, 0, 0, 0}, nil)), &be},
			{"nil backend", second(nn.NewBlockOwned(nil, 1, 1, []int64{0, 0}, nil)), &be},
		} {
			if !errors.As(tc.err, tc.as) {
				t.Errorf("%s on %T: got %v, want %T", tc.name, b, tc.err, tc.as)
			}
		}
	}
}

func second(_ *nn.Block, err error) error { return err }
