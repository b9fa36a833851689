package gradcheck

import (
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Run checks the gradient of every autograd op and every nn layer and
// model on back end b, one subtest each, on small random inputs and blocks
// that include destinations without in-edges. It also checks that
// Tape.Release returns every buffer the tape allocated.
func Run(t *testing.T, b backend.Backend) {
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			e := &env{t: t, b: b}
			defer e.free()
			tensors, f := c.build(e)
			if t.Failed() {
				return
			}
			h := float32(Step)
			if c.model {
				h = ModelStep
			}
			res, err := CheckStep(b, tensors, f, rng.Derive(77, uint64(len(c.name))), h)
			if err != nil {
				t.Fatal(err)
			}
			if res.Elements == 0 {
				t.Fatal("no elements compared")
			}
			t.Logf("%d elements, max |num-ana| %.2g, %d one-sided", res.Elements, res.MaxAbs, res.OneSided)
		})
	}
	t.Run("release_frees_everything", func(t *testing.T) { checkRelease(t, b) })
}

type gcase struct {
	name  string
	build func(e *env) ([]Tensor, Func)
	model bool // use ModelStep
}

// env allocates test inputs and frees them at the end of a subtest.
type env struct {
	t      *testing.T
	b      backend.Backend
	bufs   []backend.Buffer
	blocks []*nn.Block
	params []*nn.Param
	sparse []*autograd.SparseInput
	seed   uint64
}

func (e *env) free() {
	for _, x := range e.bufs {
		e.b.Free(x)
	}
	for _, k := range e.blocks {
		k.Free()
	}
	nn.FreeParams(e.b, e.params)
	for _, s := range e.sparse {
		s.Free(e.b)
	}
}

func (e *env) must(err error) {
	if err != nil {
		e.t.Helper()
		e.t.Fatal(err)
	}
}

func (e *env) buf(dt backend.DType, data any, n int) backend.Buffer {
	x, err := e.b.Alloc(dt, n)
	e.must(err)
	e.bufs = append(e.bufs, x)
	if data != nil {
		e.must(e.b.Upload(x, data))
	}
	return x
}

// values draws n uniforms in [-1, 1); with gap > 0 their magnitudes are in
// [gap, 1) so activations are not probed at their kink.
func (e *env) values(n int, gap float32) []float32 {
	e.seed++
	s := rng.NewStream(rng.Derive(1234, e.seed))
	v := make([]float32, n)
	for i := range v {
		u := s.Uniform01()
		mag := gap + (1-gap)*u
		if s.Uniform01() < 0.5 {
			mag = -mag
		}
		v[i] = mag
	}
	return v
}

// tensor makes a rows x cols differentiated input.
func (e *env) tensor(name string, rows, cols int, gap float32) Tensor {
	return Tensor{Name: name, Value: e.buf(backend.Float32, e.values(rows*cols, gap), rows*cols),
		Grad: e.buf(backend.Float32, nil, rows*cols), Rows: rows, Cols: cols}
}

func (e *env) int32s(v []int32) backend.Buffer { return e.buf(backend.Int32, v, len(v)) }

func leaf(t *autograd.Tape, x Tensor) (*autograd.Var, error) {
	return t.Leaf(x.Value, x.Grad, x.Rows, x.Cols)
}

// randomCSR returns a numDst x numSrc structure where every third row is
// empty and the others have 1..3 distinct random sources.
func randomCSR(numDst, numSrc int, seed uint64) ([]int64, []int32) {
	s := rng.NewStream(seed)
	indptr := []int64{0}
	var indices []int32
	for i := 0; i < numDst; i++ {
		if i%3 != 1 {
			deg := 1 + int(s.Below(3))
			seen := map[int32]bool{}
			for len(seen) < min(deg, numSrc) {
				j := int32(s.Below(uint64(numSrc)))
				if !seen[j] {
					seen[j] = true
					indices = append(indices, j)
				}
			}
		}
		indptr = append(indptr, int64(len(indices)))
	}
	return indptr, indices
}

func (e *env) block(numDst, numSrc int) *nn.Block {
	e.seed++
	ip, ix := randomCSR(numDst, numSrc, rng.Derive(99, e.seed))
	k, err := nn.NewBlock(e.b, numDst, numSrc, ip, ix)
	e.must(err)
	e.blocks = append(e.blocks, k)
	return k
}

// sparseInput makes a rows x cols sparse matrix with about half the
// entries non-zero (and one empty row).
func (e *env) sparseInput(rows, cols int) *autograd.SparseInput {
	e.seed++
	s := rng.NewStream(rng.Derive(5, e.seed))
	dense := make([]float32, rows*cols)
	for i := range dense {
		if i/cols != 1 && s.Uniform01() < 0.5 {
			dense[i] = 2*s.Uniform01() - 1
		}
	}
	x, err := autograd.SparseFromDense(e.b, rows, cols, dense)
	e.must(err)
	e.sparse = append(e.sparse, x)
	return x
}

func (e *env) paramTensors(ps []*nn.Param) []Tensor {
	e.params = append(e.params, ps...)
	out := make([]Tensor, len(ps))
	for i, p := range ps {
		out[i] = Tensor{Name: p.Name, Value: p.Value, Grad: p.Grad, Rows: p.Rows, Cols: p.Cols}
	}
	return out
}

func cases() []gcase {
	cs := []gcase{
		{name: "MatMul", build: func(e *env) ([]Tensor, Func) {
			a, b := e.tensor("a", 4, 3, 0), e.tensor("b", 3, 5, 0)
			return []Tensor{a, b}, func(t *autograd.Tape) (*autograd.Var, error) {
				return binary(t, a, b, t.MatMul)
			}
		}},
		{name: "AddBias", build: func(e *env) ([]Tensor, Func) {
			x, bias := e.tensor("x", 4, 3, 0), e.tensor("bias", 1, 3, 0)
			return []Tensor{x, bias}, func(t *autograd.Tape) (*autograd.Var, error) {
				return binary(t, x, bias, t.AddBias)
			}
		}},
		{name: "Add_and_reuse", build: func(e *env) ([]Tensor, Func) {
			a, b := e.tensor("a", 3, 4, 0), e.tensor("b", 3, 4, 0)
			return []Tensor{a, b}, func(t *autograd.Tape) (*autograd.Var, error) {
				va, err := leaf(t, a)
				if err != nil {
					return nil, err
				}
				vb, err := leaf(t, b)
				if err != nil {
					return nil, err
				}
				s, err := t.Add(va, vb)
				if err != nil {
					return nil, err
				}
				// a is used twice: its gradient must be the sum.
				return t.Add(s, va)
			}
		}},
		{name: "Scale_Reshape", build: func(e *env) ([]Tensor, Func) {
			x := e.tensor("x", 4, 3, 0)
			return []Tensor{x}, func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, x)
				if err != nil {
					return nil, err
				}
				s, err := t.Scale(v, -1.5)
				if err != nil {
					return nil, err
				}
				return t.Reshape(s, 2, 6)
			}
		}},
		{name: "ReLU", build: unaryCase(func(t *autograd.Tape, v *autograd.Var) (*autograd.Var, error) { return t.ReLU(v) })},
		{name: "LeakyReLU", build: unaryCase(func(t *autograd.Tape, v *autograd.Var) (*autograd.Var, error) { return t.LeakyReLU(v, 0.2) })},
		{name: "ELU", build: unaryCase(func(t *autograd.Tape, v *autograd.Var) (*autograd.Var, error) { return t.ELU(v, 1) })},
		{name: "Dropout_fixed_mask", build: func(e *env) ([]Tensor, Func) {
			x := e.tensor("x", 5, 4, 0)
			return []Tensor{x}, func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, x)
				if err != nil {
					return nil, err
				}
				return t.Dropout(v, 0.4, 4242)
			}
		}},
		{name: "BiasActDropout_leaves", build: func(e *env) ([]Tensor, Func) {
			a, b, bias := e.tensor("a", 5, 4, 0.05), e.tensor("b", 5, 4, 0.05), e.tensor("bias", 1, 4, 0.05)
			return []Tensor{a, b, bias}, func(t *autograd.Tape) (*autograd.Var, error) {
				av, err := leaf(t, a)
				if err != nil {
					return nil, err
				}
				bv, err := leaf(t, b)
				if err != nil {
					return nil, err
				}
				cv, err := leaf(t, bias)
				if err != nil {
					return nil, err
				}
				return t.BiasActDropout(av, bv, cv, true, 0.4, 99)
			}
		}},
		{name: "BiasActDropout_products", build: func(e *env) ([]Tensor, Func) {
			// a and b are single-use products (their gradients alias the
			// op's), a second product of x is used twice (no aliasing),
			// and the identity activation regenerates the mask.
			x, w1, w2, bias := e.tensor("x", 6, 3, 0), e.tensor("w1", 3, 4, 0), e.tensor("w2", 3, 4, 0), e.tensor("bias", 1, 4, 0.05)
			return []Tensor{x, w1, w2, bias}, func(t *autograd.Tape) (*autograd.Var, error) {
				xv, err := leaf(t, x)
				if err != nil {
					return nil, err
				}
				w1v, err := leaf(t, w1)
				if err != nil {
					return nil, err
				}
				w2v, err := leaf(t, w2)
				if err != nil {
					return nil, err
				}
				cv, err := leaf(t, bias)
				if err != nil {
					return nil, err
				}
				a, err := t.MatMul(xv, w1v)
				if err != nil {
					return nil, err
				}
				b, err := t.MatMul(xv, w2v)
				if err != nil {
					return nil, err
				}
				h, err := t.BiasActDropout(a, b, cv, true, 0.3, 5)
				if err != nil {
					return nil, err
				}
				c, err := t.MatMul(xv, w2v)
				if err != nil {
					return nil, err
				}
				k, err := t.BiasActDropout(h, c, cv, false, 0.5, 6)
				if err != nil {
					return nil, err
				}
				return t.Add(k, c)
			}
		}},
		{name: "GatherRows_duplicates", build: func(e *env) ([]Tensor, Func) {
			x := e.tensor("x", 4, 3, 0)
			idx := e.int32s([]int32{2, 0, 2, 3, 3, 3})
			return []Tensor{x}, func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, x)
				if err != nil {
					return nil, err
				}
				return t.GatherRows(v, idx)
			}
		}},
		{name: "FirstRows", build: func(e *env) ([]Tensor, Func) {
			x := e.tensor("x", 4, 3, 0)
			return []Tensor{x}, func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, x)
				if err != nil {
					return nil, err
				}
				return t.FirstRows(v, 3)
			}
		}},
		{name: "FirstRows_and_gather", build: func(e *env) ([]Tensor, Func) {
			x := e.tensor("x", 5, 3, 0)
			idx := e.int32s([]int32{1, 4})
			return []Tensor{x}, func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, x)
				if err != nil {
					return nil, err
				}
				a, err := t.FirstRows(v, 2)
				if err != nil {
					return nil, err
				}
				g, err := t.GatherRows(v, idx)
				if err != nil {
					return nil, err
				}
				return t.Mul(a, g)
			}
		}},
		{name: "LogSoftmax", build: func(e *env) ([]Tensor, Func) {
			x := e.tensor("x", 4, 5, 0)
			return []Tensor{x}, func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, x)
				if err != nil {
					return nil, err
				}
				return t.LogSoftmax(v)
			}
		}},
		{name: "LogSoftmax_NLLLoss", build: func(e *env) ([]Tensor, Func) {
			x := e.tensor("x", 4, 5, 0)
			rows := e.int32s([]int32{0, 2, 3, 2})
			labels := e.int32s([]int32{1, 4, 0, 4})
			return []Tensor{x}, func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, x)
				if err != nil {
					return nil, err
				}
				lp, err := t.LogSoftmax(v)
				if err != nil {
					return nil, err
				}
				l, _, err := t.NLLLoss(lp, rows, labels)
				return l, err
			}
		}},
		{name: "Mul_and_reuse", build: func(e *env) ([]Tensor, Func) {
			a, b := e.tensor("a", 3, 4, 0), e.tensor("b", 3, 4, 0)
			return []Tensor{a, b}, func(t *autograd.Tape) (*autograd.Var, error) {
				return binary(t, a, b, func(va, vb *autograd.Var) (*autograd.Var, error) {
					p, err := t.Mul(va, vb)
					if err != nil {
						return nil, err
					}
					// a is used again: its gradient must be the sum.
					return t.Mul(p, va)
				})
			}
		}},
		{name: "BCEWithLogits", build: func(e *env) ([]Tensor, Func) {
			x := e.tensor("x", 6, 1, 0)
			labels := e.int32s([]int32{1, 0, 0, 1, 1, 0})
			return []Tensor{x}, func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, x)
				if err != nil {
					return nil, err
				}
				// Scaled so that the logits reach the flat ends of σ.
				s, err := t.Scale(v, 3)
				if err != nil {
					return nil, err
				}
				l, _, err := t.BCEWithLogits(s, labels)
				return l, err
			}
		}},
		{name: "SpMM_sum", build: func(e *env) ([]Tensor, Func) {
			k := e.block(5, 7)
			x := e.tensor("x", 7, 4, 0)
			return []Tensor{x}, func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, x)
				if err != nil {
					return nil, err
				}
				return t.SpMM(k.A, v, nil)
			}
		}},
		{name: "SpMM_mean_weights", build: func(e *env) ([]Tensor, Func) {
			k := e.block(5, 7)
			x := e.tensor("x", 7, 4, 0)
			return []Tensor{x}, func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, x)
				if err != nil {
					return nil, err
				}
				wb, err := k.MeanWeights()
				if err != nil {
					return nil, err
				}
				w, err := t.Const(wb, k.NNZ(), 1)
				if err != nil {
					return nil, err
				}
				return t.SpMM(k.A, v, w)
			}
		}},
		{name: "StackRows", build: func(e *env) ([]Tensor, Func) {
			a := e.tensor("a", 2, 3, 0)
			b := e.tensor("b", 3, 3, 0)
			c := e.tensor("c", 5, 3, 0)
			return []Tensor{a, b, c}, func(t *autograd.Tape) (*autograd.Var, error) {
				st, err := binary(t, a, b, func(va, vb *autograd.Var) (*autograd.Var, error) { return t.StackRows(va, vb, nil) })
				if err != nil {
					return nil, err
				}
				vc, err := leaf(t, c)
				if err != nil {
					return nil, err
				}
				return t.Mul(st, vc)
			}
		}},
		{name: "AggregateConcat_product", build: func(e *env) ([]Tensor, Func) {
			// SAGE's two products as one: [x_dst | mean] [W_self; W_neigh].
			if _, ok := e.b.(backend.ConcatAggregator); !ok {
				e.t.Skip("no backend.ConcatAggregator")
			}
			k := e.block(5, 7)
			x := e.tensor("x", 7, 4, 0)
			ws := e.tensor("ws", 4, 3, 0)
			wn := e.tensor("wn", 4, 3, 0)
			return []Tensor{ws, wn}, func(t *autograd.Tape) (*autograd.Var, error) {
				vx, err := t.Const(x.Value, x.Rows, x.Cols)
				if err != nil {
					return nil, err
				}
				wb, err := k.MeanWeights()
				if err != nil {
					return nil, err
				}
				mean, err := t.Const(wb, k.NNZ(), 1)
				if err != nil {
					return nil, err
				}
				cat, err := t.AggregateConcat(k.A, vx, mean)
				if err != nil {
					return nil, err
				}
				w, err := binary(t, ws, wn, func(vs, vn *autograd.Var) (*autograd.Var, error) { return t.StackRows(vs, vn, nil) })
				if err != nil {
					return nil, err
				}
				return t.MatMul(cat, w)
			}
		}},
		{name: "SpMM_multihead_weights", build: func(e *env) ([]Tensor, Func) {
			k := e.block(5, 7)
			x := e.tensor("x", 7, 6, 0)
			w := e.tensor("w", k.NNZ(), 2, 0)
			return []Tensor{x, w}, func(t *autograd.Tape) (*autograd.Var, error) {
				return binary(t, x, w, func(vx, vw *autograd.Var) (*autograd.Var, error) { return t.SpMM(k.A, vx, vw) })
			}
		}},
		{name: "SDDMM_dot", build: func(e *env) ([]Tensor, Func) {
			k := e.block(5, 7)
			u, v := e.tensor("u", 5, 6, 0), e.tensor("v", 7, 6, 0)
			return []Tensor{u, v}, func(t *autograd.Tape) (*autograd.Var, error) {
				return binary(t, u, v, func(a, b *autograd.Var) (*autograd.Var, error) {
					return t.SDDMM(backend.SDDMMDot, k.A, a, b, 2)
				})
			}
		}},
		{name: "SDDMM_add", build: func(e *env) ([]Tensor, Func) {
			k := e.block(5, 7)
			u, v := e.tensor("u", 5, 2, 0), e.tensor("v", 7, 2, 0)
			return []Tensor{u, v}, func(t *autograd.Tape) (*autograd.Var, error) {
				return binary(t, u, v, func(a, b *autograd.Var) (*autograd.Var, error) {
					return t.SDDMM(backend.SDDMMAdd, k.A, a, b, 2)
				})
			}
		}},
		{name: "EdgeSoftmax", build: func(e *env) ([]Tensor, Func) {
			k := e.block(6, 6)
			s := e.tensor("scores", k.NNZ(), 2, 0)
			return []Tensor{s}, func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, s)
				if err != nil {
					return nil, err
				}
				return t.EdgeSoftmax(k.A, v)
			}
		}},
		{name: "SparseMatMul_dropout", build: func(e *env) ([]Tensor, Func) {
			x := e.sparseInput(5, 6)
			w := e.tensor("w", 6, 4, 0)
			return []Tensor{w}, func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, w)
				if err != nil {
					return nil, err
				}
				xd, err := t.SparseDropout(x, 0.3, 17)
				if err != nil {
					return nil, err
				}
				return t.SparseMatMul(xd, v)
			}
		}},
		{name: "Linear", build: func(e *env) ([]Tensor, Func) {
			l, err := nn.NewLinear(e.b, "lin", 3, 4, true, 1)
			e.must(err)
			x := e.tensor("x", 5, 3, 0)
			return append(e.paramTensors(l.Params()), x), func(t *autograd.Tape) (*autograd.Var, error) {
				v, err := leaf(t, x)
				if err != nil {
					return nil, err
				}
				return l.Forward(t, v)
			}
		}},
		{name: "Linear_sparse", build: func(e *env) ([]Tensor, Func) {
			l, err := nn.NewLinear(e.b, "lin", 6, 3, true, 2)
			e.must(err)
			x := e.sparseInput(4, 6)
			return e.paramTensors(l.Params()), func(t *autograd.Tape) (*autograd.Var, error) {
				return l.ForwardSparse(t, x)
			}
		}},
	}
	// Graph layers: aggregate-first (in <= out) and project-first (in > out)
	// orders, sampled (rectangular) and full (square) blocks, dense and
	// sparse inputs.
	type shape struct {
		name           string
		dst, src       int
		in, out        int
		sparse         bool
		heads          int
		concat, dropit bool
	}
	for _, s := range []shape{
		{name: "block_agg_first", dst: 5, src: 8, in: 3, out: 4},
		{name: "block_proj_first", dst: 5, src: 8, in: 6, out: 2},
		{name: "full_graph", dst: 6, src: 6, in: 3, out: 3},
		{name: "sparse_input", dst: 5, src: 8, in: 6, out: 3, sparse: true},
	} {
		cs = append(cs,
			gcase{name: "SAGEConv_" + s.name, build: layerCase(s.dst, s.src, s.in, s.sparse, func(e *env) ([]*nn.Param, layerFwd) {
				c, err := nn.NewSAGEConv(e.b, "sage", s.in, s.out, 3)
				e.must(err)
				return c.Params(), func(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, k *nn.Block) (*autograd.Var, error) {
					if xs != nil {
						return c.ForwardSparse(t, xs, k)
					}
					return c.Forward(t, x, k)
				}
			})},
			gcase{name: "GCNConv_" + s.name, build: layerCase(s.dst, s.src, s.in, s.sparse, func(e *env) ([]*nn.Param, layerFwd) {
				c, err := nn.NewGCNConv(e.b, "gcn", s.in, s.out, 4)
				e.must(err)
				return c.Params(), func(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, k *nn.Block) (*autograd.Var, error) {
					if xs != nil {
						return c.ForwardSparse(t, xs, k)
					}
					return c.Forward(t, x, k)
				}
			})},
		)
	}
	for _, s := range []shape{
		{name: "concat_3heads_attn_dropout", dst: 5, src: 8, in: 4, out: 2, heads: 3, concat: true, dropit: true},
		{name: "mean_2heads", dst: 5, src: 8, in: 3, out: 3, heads: 2},
		{name: "full_graph_1head", dst: 6, src: 6, in: 3, out: 2, heads: 1},
		{name: "sparse_input_2heads", dst: 5, src: 8, in: 6, out: 2, heads: 2, concat: true, sparse: true},
	} {
		cs = append(cs, gcase{name: "GATConv_" + s.name, build: layerCase(s.dst, s.src, s.in, s.sparse, func(e *env) ([]*nn.Param, layerFwd) {
			c, err := nn.NewGATConv(e.b, "gat", s.in, s.out, s.heads, s.concat, 0.2, 0.3, 5)
			e.must(err)
			return c.Params(), func(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, k *nn.Block) (*autograd.Var, error) {
				if xs != nil {
					return c.ForwardSparse(t, xs, k, s.dropit, 31)
				}
				return c.Forward(t, x, k, s.dropit, 31)
			}
		})})
	}
	for _, kind := range []string{nn.KindGCN, nn.KindSAGE, nn.KindGAT} {
		for _, sparse := range []bool{false, true} {
			name := "Model_" + kind
			if sparse {
				name += "_sparse"
			}
			cs = append(cs, gcase{name: name, build: modelCase(kind, sparse), model: true})
		}
	}
	return append(cs, heteroCases()...) // typed models (hetero.go)
}

func binary(t *autograd.Tape, a, b Tensor, op func(a, b *autograd.Var) (*autograd.Var, error)) (*autograd.Var, error) {
	va, err := leaf(t, a)
	if err != nil {
		return nil, err
	}
	vb, err := leaf(t, b)
	if err != nil {
		return nil, err
	}
	return op(va, vb)
}

func unaryCase(op func(t *autograd.Tape, v *autograd.Var) (*autograd.Var, error)) func(e *env) ([]Tensor, Func) {
	return func(e *env) ([]Tensor, Func) {
		// Magnitudes >= 0.2 keep the +-Step probes off the kink at 0.
		x := e.tensor("x", 5, 4, 0.2)
		return []Tensor{x}, func(t *autograd.Tape) (*autograd.Var, error) {
			v, err := leaf(t, x)
			if err != nil {
				return nil, err
			}
			return op(t, v)
		}
	}
}

type layerFwd func(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, k *nn.Block) (*autograd.Var, error)

func layerCase(dst, src, in int, sparse bool, mk func(e *env) ([]*nn.Param, layerFwd)) func(e *env) ([]Tensor, Func) {
	return func(e *env) ([]Tensor, Func) {
		k := e.block(dst, src)
		ps, fwd := mk(e)
		tensors := e.paramTensors(ps)
		if sparse {
			xs := e.sparseInput(src, in)
			return tensors, func(t *autograd.Tape) (*autograd.Var, error) { return fwd(t, nil, xs, k) }
		}
		x := e.tensor("x", src, in, 0)
		return append(tensors, x), func(t *autograd.Tape) (*autograd.Var, error) {
			v, err := leaf(t, x)
			if err != nil {
				return nil, err
			}
			return fwd(t, v, nil, k)
		}
	}
}

// modelCase checks a 2-layer model over two sampled blocks (9 -> 6 -> 4
// nodes) in training mode (dropout masks fixed by the seed), through
// LogSoftmax and NLLLoss.
func modelCase(kind string, sparse bool) func(e *env) ([]Tensor, Func) {
	return func(e *env) ([]Tensor, Func) {
		cfg := nn.Config{Kind: kind, InDim: 5, Hidden: 3, OutDim: 3, Layers: 2, Heads: 2, OutHeads: 2,
			Dropout: 0.2, InputDropout: 0.1, AttnDropout: 0.2, Seed: 8}
		m, err := nn.New(e.b, cfg)
		e.must(err)
		blocks := []*nn.Block{e.block(6, 9), e.block(4, 6)}
		rows := e.int32s([]int32{0, 1, 2, 3})
		labels := e.int32s([]int32{2, 0, 1, 2})
		// Zero biases and an all-zero input row would put a ReLU exactly on
		// its kink (where the tape's subgradient 0 is not the central
		// difference); random parameters avoid that.
		for _, p := range m.Params() {
			e.must(e.b.Upload(p.Value, e.values(p.Len(), 0.05)))
		}
		tensors := e.paramTensors(m.Params())
		loss := func(t *autograd.Tape, out *autograd.Var) (*autograd.Var, error) {
			lp, err := t.LogSoftmax(out)
			if err != nil {
				return nil, err
			}
			l, _, err := t.NLLLoss(lp, rows, labels)
			return l, err
		}
		if sparse {
			xs := e.sparseInput(9, 5)
			return tensors, func(t *autograd.Tape) (*autograd.Var, error) {
				out, err := m.ForwardSparse(t, xs, blocks, true, 1234)
				if err != nil {
					return nil, err
				}
				return loss(t, out)
			}
		}
		x := e.tensor("x", 9, 5, 0)
		return append(tensors, x), func(t *autograd.Tape) (*autograd.Var, error) {
			v, err := leaf(t, x)
			if err != nil {
				return nil, err
			}
			out, err := m.Forward(t, v, blocks, true, 1234)
			if err != nil {
				return nil, err
			}
			return loss(t, out)
		}
	}
}

// counting wraps a back end and counts live buffers and sparse matrices.
type counting struct {
	backend.Backend
	live, liveSparse int
}

func (c *counting) Alloc(dt backend.DType, n int) (backend.Buffer, error) {
	x, err := c.Backend.Alloc(dt, n)
	if err == nil {
		c.live++
	}
	return x, err
}

func (c *counting) Free(x backend.Buffer) {
	if x != nil {
		c.live--
	}
	c.Backend.Free(x)
}

func (c *counting) NewSparse(rows, cols int, indptr []int64, indices []int32) (backend.Sparse, error) {
	s, err := c.Backend.NewSparse(rows, cols, indptr, indices)
	if err == nil {
		c.liveSparse++
	}
	return s, err
}

func (c *counting) FreeSparse(s backend.Sparse) {
	if s != nil {
		c.liveSparse--
	}
	c.Backend.FreeSparse(s)
}

// checkRelease trains each model kind for a few steps through a counting
// back end: after the first step (which fills the blocks' caches) every
// step must end with the same number of live buffers, and freeing the
// model and blocks must return to zero.
func checkRelease(t *testing.T, inner backend.Backend) {
	for _, kind := range []string{nn.KindGCN, nn.KindSAGE, nn.KindGAT} {
		b := &counting{Backend: inner}
		cfg := nn.Config{Kind: kind, InDim: 5, Hidden: 4, OutDim: 3, Seed: 1}
		m, err := nn.New(b, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ip, ix := randomCSR(7, 7, 3)
		k, err := nn.NewBlock(b, 7, 7, ip, ix)
		if err != nil {
			t.Fatal(err)
		}
		e := &env{t: t, b: b}
		rows := e.int32s([]int32{0, 1, 2})
		labels := e.int32s([]int32{0, 1, 2})
		xs := e.sparseInput(7, 5)
		tape := autograd.NewTape(b)
		var after []int
		for step := 0; step < 3; step++ {
			x, err := tape.Upload(e.values(35, 0), 7, 5)
			if err != nil {
				t.Fatal(err)
			}
			var out *autograd.Var
			if step == 2 {
				out, err = m.ForwardSparse(tape, xs, []*nn.Block{k, k}, true, uint64(step))
			} else {
				out, err = m.Forward(tape, x, []*nn.Block{k, k}, true, uint64(step))
			}
			if err != nil {
				t.Fatal(err)
			}
			lp, err := tape.LogSoftmax(out)
			if err != nil {
				t.Fatal(err)
			}
			loss, _, err := tape.NLLLoss(lp, rows, labels)
			if err != nil {
				t.Fatal(err)
			}
			if err := tape.Backward(loss); err != nil {
				t.Fatal(err)
			}
			tape.Release()
			after = append(after, b.live)
		}
		if after[0] != after[1] || after[1] != after[2] {
			t.Fatalf("%s: live buffers after each released step: %v (want constant)", kind, after)
		}
		e.free()
		k.Free()
		nn.FreeParams(b, m.Params())
		if b.live != 0 || b.liveSparse != 0 {
			t.Fatalf("%s: %d buffers and %d sparse matrices still live after freeing everything", kind, b.live, b.liveSparse)
		}
	}
}
