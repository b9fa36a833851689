package backendtest

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Tolerances of bfloat16 activations (backend.BF16Activations): a
// bfloat16 output is a float32 result rounded once (relative error up to
// 2^-8 an element), so bf16OutTol; a float32 output computed from
// bfloat16 operands (exact products, float32 sums) is within f32OutTol of
// the float64 value of the same rounded operands.
const (
	bf16OutTol = 1e-2
	f32OutTol  = 1e-4
)

// rounded returns n normal values already rounded to bfloat16, and their
// encodings.
func (s *suite) rounded(n int) ([]float32, []uint16) {
	v := s.randn(n)
	h := make([]uint16, n)
	backend.ToBF16(h, v)
	backend.FromBF16(v, h)
	return v, h
}

// getBF16 downloads a bfloat16 buffer widened to float32.
func (s *suite) getBF16(buf backend.Buffer) []float32 {
	s.t.Helper()
	v := make([]float32, buf.Len())
	backend.FromBF16(v, s.getU16(buf))
	return v
}

// floatOut allocates an output of dt (contents undefined for the op).
func (s *suite) floatOut(dt backend.DType, n int) backend.Buffer {
	if dt == backend.BFloat16 {
		return s.u16(make([]uint16, n))
	}
	return s.out(n)
}

// getFloat downloads a float32 or bfloat16 buffer as float32.
func (s *suite) getFloat(buf backend.Buffer) []float32 {
	if buf.DType() == backend.BFloat16 {
		return s.getBF16(buf)
	}
	return s.get(buf)
}

// upFloat uploads v (already bfloat16 values when dt is BFloat16) as dt.
func (s *suite) upFloat(dt backend.DType, v []float32) backend.Buffer {
	if dt == backend.BFloat16 {
		h := make([]uint16, len(v))
		backend.ToBF16(h, v)
		return s.u16(h)
	}
	return s.f32(v)
}

func tolFor(dt backend.DType) float64 {
	if dt == backend.BFloat16 {
		return bf16OutTol
	}
	return f32OutTol
}

var floatTypes = []backend.DType{backend.Float32, backend.BFloat16}

// shifted returns v as dt in a view that starts one element into a
// larger buffer: not 16-byte aligned, so back ends with wide forms of
// their bfloat16 kernels (8 values a thread) take the one-value ones.
// Nil when the back end has no views.
func (s *suite) shifted(dt backend.DType, v []float32) backend.Buffer {
	s.t.Helper()
	full := make([]float32, len(v)+1)
	copy(full[1:], v)
	view, err := backend.View(s.upFloat(dt, full), 1, len(v))
	if err != nil {
		return nil
	}
	return view
}

// sameBits fails unless got and want hold the same float32 (or widened
// bfloat16) values bit for bit.
func (s *suite) sameBits(what string, got, want []float32) {
	s.t.Helper()
	if len(got) != len(want) {
		s.t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			s.t.Fatalf("%s: element %d = %v (%#08x), want %v (%#08x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// testBF16Activations checks, on back ends that report
// backend.BF16Activations, every primitive of a training step's chain
// with bfloat16 operands against a float64 reference computed from the
// bfloat16 values themselves (what the back end reads): Gemm, Axpby,
// SumRows, GatherRows and GatherRowsDropout into bfloat16, SpMM forward
// and transposed, BiasActDropout and its backward.
func testBF16Activations(s *suite) {
	if !backend.HasBF16Activations(s.b) {
		s.t.Skipf("%s does not report bfloat16 activations", s.b.Name())
	}
	if s.b.Precision() != backend.BF16 {
		// Trainers store activations as bfloat16 only at bf16, and these
		// operands read the same bits at any precision: one run is enough.
		s.t.Skipf("bfloat16 activations are checked in the bf16 run (this one is %s)", s.b.Precision())
	}
	bf := backend.BFloat16

	// Gemm: bfloat16 A and B; C float32 or bfloat16, with and without beta.
	for _, sz := range [][3]int{{33, 17, 65}, {64, 48, 256}, {130, 64, 31}, {5, 7, 0}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, cdt := range floatTypes {
					for _, beta := range []float32{0, 1} {
						name := fmt.Sprintf("Gemm bf16 (%v,%v) %s into %s beta %v", ta, tb, shape(m, n, k), cdt, beta)
						a, ah := s.rounded(m * k)
						b, bh := s.rounded(k * n)
						c0, _ := s.rounded(m * n)
						cb := s.upFloat(cdt, c0)
						var prev []float32
						if beta != 0 {
							prev = c0
						}
						want := refGemm(ta, tb, m, n, k, 0.5, a, b, float64(beta), prev)
						s.ok(name, func() error { return s.b.Gemm(ta, tb, m, n, k, 0.5, s.u16(ah), s.u16(bh), beta, cb) })
						s.close(name, s.getFloat(cb), want, tolFor(cdt))
					}
				}
			}
		}
	}
	h4, f4 := s.alloc(bf, 4), s.f32(make([]float32, 4))
	s.expectShapeErr("Gemm with a bfloat16 a and a float32 b", func() error { return s.b.Gemm(false, false, 2, 2, 2, 1, h4, f4, 0, f4) })
	s.expectShapeErr("Gemm of float32 a and b into a bfloat16 c", func() error { return s.b.Gemm(false, false, 2, 2, 2, 1, f4, f4, 0, h4) })

	// Axpby and SumRows. Lengths of 8k values take back ends' wide
	// forms on aligned buffers: equal bit for bit to the one-value
	// form's on unaligned views.
	for _, n := range []int{0, 1, 1000, 70001, 65536} {
		x, xh := s.rounded(n)
		y, yh := s.rounded(n)
		d := s.u16(make([]uint16, n))
		name := fmt.Sprintf("Axpby bf16 of %d", n)
		s.ok(name, func() error { return s.b.Axpby(d, 2, s.u16(xh), -0.5, s.u16(yh)) })
		want := make([]float64, n)
		for i := range want {
			want[i] = 2*float64(x[i]) - 0.5*float64(y[i])
		}
		got := s.getBF16(d)
		s.close(name, got, want, bf16OutTol)
		if d2 := s.shifted(bf, make([]float32, n)); d2 != nil && n > 0 {
			s.ok(name+" unaligned", func() error { return s.b.Axpby(d2, 2, s.shifted(bf, x), -0.5, s.shifted(bf, y)) })
			s.sameBits(name+" unaligned against aligned", s.getBF16(d2), got)
		}
	}
	s.expectShapeErr("Axpby of bfloat16 into float32", func() error { return s.b.Axpby(f4, 1, h4, 1, h4) })
	for _, rc := range [][2]int{{0, 3}, {1, 1}, {300, 100}, {5000, 47}} {
		rows, cols := rc[0], rc[1]
		x, xh := s.rounded(rows * cols)
		want := make([]float64, cols)
		for i, v := range x {
			want[i%cols] += float64(v)
		}
		d := s.out(cols)
		name := fmt.Sprintf("SumRows bf16 %s", shape(rows, cols))
		s.ok(name, func() error { return s.b.SumRows(d, s.u16(xh), rows, cols) })
		s.close(name, s.get(d), want, s.opt.Tol)
	}

	// GatherRows (and GatherRowsDropout) into bfloat16: bfloat16 rows
	// copied, float32 rows rounded, bit for bit; with dropout the
	// float32 product rounded.
	f, fused := s.b.(backend.Fused)
	for _, rc := range [][2]int{{1, 1}, {9, 5}, {40, 8}, {300, 64}, {1500, 41}, {200, 100}} {
		rows, cols := rc[0], rc[1]
		x := s.randn(rows * cols)
		xr, xh := s.rounded(rows * cols)
		idx := make([]int32, 2*rows)
		for i := range idx {
			idx[i] = int32(s.r.IntN(rows))
		}
		ib := s.i32(idx)
		for _, p := range []float32{0, 0.5} {
			for _, src := range []struct {
				name string
				vals []float32
				buf  backend.Buffer
			}{{"f32", x, s.f32(x)}, {"bf16", xr, s.u16(xh)}} {
				want := make([]uint16, len(idx)*cols)
				for i, j := range idx {
					for c := 0; c < cols; c++ {
						v := src.vals[int(j)*cols+c]
						if p > 0 {
							k := i*cols + c
							if rng.DropUniform(7, uint64(k)) >= p {
								v *= 1 / (1 - p)
							} else {
								v *= 0
							}
						}
						want[i*cols+c] = backend.BF16Bits(v)
					}
				}
				d := s.u16(make([]uint16, len(want)))
				name := fmt.Sprintf("GatherRows%s into bf16 from %s %s p=%v", map[bool]string{true: "Dropout"}[p > 0], src.name, shape(rows, cols), p)
				if p == 0 {
					s.ok(name, func() error { return s.b.GatherRows(d, src.buf, ib, rows, cols) })
				} else {
					if !fused {
						continue
					}
					s.ok(name, func() error { return f.GatherRowsDropout(d, src.buf, ib, rows, cols, p, 7) })
				}
				for i, g := range s.getU16(d) {
					if g != want[i] {
						s.t.Fatalf("%s: element %d = %#04x, want %#04x", name, i, g, want[i])
					}
				}
			}
		}
		bad := s.i32([]int32{0, int32(rows)})
		s.expectIndexErr("GatherRows into bf16 with an index out of range", func() error {
			return s.b.GatherRows(s.alloc(bf, 2*cols), s.u16(xh), bad, rows, cols)
		})
	}

	// SpMM: bfloat16 x and out, one head, forward and transposed, with
	// and without edge weights; widths for every vector form.
	for _, width := range []int{1, 5, 8, 12, 47, 100, 256, 300} {
		a := s.randCSR(61, 45, 9)
		sp := s.sparse(a)
		wv := s.uniform(a.nnz(), 0.1, 1)
		for _, transpose := range []bool{false, true} {
			xrows, orows := a.cols, a.rows
			if transpose {
				xrows, orows = a.rows, a.cols
			}
			x, xh := s.rounded(xrows * width)
			for _, weighted := range []bool{false, true} {
				var w []float32
				var wb backend.Buffer
				if weighted {
					w, wb = wv, s.f32(wv)
				}
				name := fmt.Sprintf("SpMM bf16 width %d transpose %v weighted %v", width, transpose, weighted)
				out := s.u16(make([]uint16, orows*width))
				s.ok(name, func() error { return s.b.SpMM(out, sp, transpose, s.u16(xh), wb, 1, width) })
				s.close(name, s.getBF16(out), refSpMM(a, transpose, x, w, 1, width), bf16OutTol)
			}
		}
	}
	sp := s.sparse(s.randCSR(4, 4, 2))
	s.expectShapeErr("SpMM of bfloat16 x into float32", func() error { return s.b.SpMM(s.out(8), sp, false, s.alloc(bf, 8), nil, 1, 2) })

	if !fused {
		return
	}
	// BiasActDropout and its backward over the dtypes a training step
	// uses: bfloat16 in and out, bfloat16 in and float32 out (logits),
	// float32 in and bfloat16 out.
	drop := func(p float32, seed uint64, i int) float64 {
		if p == 0 {
			return 1
		}
		if rng.DropUniform(seed, uint64(i)) >= p {
			return float64(1 / (1 - p))
		}
		return 0
	}
	combos := [][2]backend.DType{{bf, bf}, {bf, backend.Float32}, {backend.Float32, bf}}
	for _, dts := range combos {
		in, outT := dts[0], dts[1]
		// Widths of 8k (the wide forms on aligned buffers, checked bit
		// for bit against unaligned views) and others.
		for _, sh := range [][2]int{{0, 4}, {37, 8}, {300, 100}, {129, 47}, {300, 256}, {61, 24}} {
			rows, cols := sh[0], sh[1]
			n := rows * cols
			for _, relu := range []bool{false, true} {
				for _, p := range []float32{0, 0.5} {
					for _, withB := range []bool{false, true} {
						seed := uint64(11 + rows)
						name := fmt.Sprintf("BiasActDropout %s->%s %s relu %v p %v b %v", in, outT, shape(rows, cols), relu, p, withB)
						a, _ := s.rounded(n)
						bv, _ := s.rounded(n)
						bias := s.randn(cols)
						var bb backend.Buffer
						if withB {
							bb = s.upFloat(in, bv)
						}
						d := s.floatOut(outT, n)
						s.ok(name, func() error {
							return f.BiasActDropout(d, s.upFloat(in, a), bb, s.f32(bias), rows, cols, relu, p, seed)
						})
						want := make([]float64, n)
						for i := range want {
							v := float64(a[i]) + float64(bias[i%cols])
							if withB {
								v += float64(bv[i])
							}
							if relu {
								v = max(v, 0)
							}
							want[i] = v * drop(p, seed, i)
						}
						y := s.getFloat(d)
						s.close(name, y, want, tolFor(outT))
						var b2 backend.Buffer
						if withB {
							b2 = s.shifted(in, bv)
						}
						d2 := s.shifted(outT, make([]float32, n))
						if n > 0 && d2 != nil {
							s.ok(name+" unaligned", func() error {
								return f.BiasActDropout(d2, s.shifted(in, a), b2, s.f32(bias), rows, cols, relu, p, seed)
							})
							s.sameBits(name+" unaligned against aligned", s.getFloat(d2), y)
						}

						// Backward from this output: y and dy of outT,
						// dx of in (the step's pre-activation's dtype).
						dyv, _ := s.rounded(n)
						dy := s.upFloat(outT, dyv)
						yb := s.upFloat(outT, y)
						wantDx := make([]float64, n)
						for i := range wantDx {
							switch {
							case relu && y[i] > 0:
								wantDx[i] = float64(dyv[i]) / float64(1-p)
							case relu:
							default:
								wantDx[i] = float64(dyv[i]) * drop(p, seed, i)
							}
						}
						for _, mode := range []string{"none", "write", "add"} {
							dx := s.floatOut(in, n)
							var dbias backend.Buffer
							init := s.randn(cols)
							if mode != "none" {
								dbias = s.f32(init)
							}
							bname := name + " backward dbias " + mode
							s.ok(bname, func() error {
								return f.BiasActDropoutBackward(dx, dbias, yb, dy, rows, cols, relu, p, seed, mode == "add")
							})
							got := s.getFloat(dx)
							s.close(bname, got, wantDx, tolFor(in))
							var dbias2 backend.Buffer
							if dbias != nil {
								dbias2 = s.f32(init)
							}
							dx2 := s.shifted(in, make([]float32, n))
							if n > 0 && dx2 != nil {
								s.ok(bname+" unaligned", func() error {
									return f.BiasActDropoutBackward(dx2, dbias2, s.shifted(outT, y), s.shifted(outT, dyv), rows, cols, relu, p, seed, mode == "add")
								})
								s.sameBits(bname+" unaligned against aligned", s.getFloat(dx2), got)
								if dbias != nil {
									s.sameBits(bname+" dbias unaligned against aligned", s.get(dbias2), s.get(dbias))
								}
							}
							if dbias == nil {
								continue
							}
							// dbias sums dx as stored.
							want := make([]float64, cols)
							for i, g := range got {
								want[i%cols] += float64(g)
							}
							if mode == "add" {
								for c := range want {
									want[c] += float64(init[c])
								}
							}
							s.close(bname+" dbias", s.get(dbias), want, s.opt.Tol)
						}
					}
				}
			}
		}
	}
	s.expectShapeErr("BiasActDropout with a of bfloat16 and b of float32", func() error {
		return f.BiasActDropout(s.alloc(bf, 4), h4, f4, s.f32([]float32{0, 0}), 2, 2, true, 0, 1)
	})
	s.expectShapeErr("BiasActDropoutBackward with y of bfloat16 and dy of float32", func() error {
		return f.BiasActDropoutBackward(s.alloc(bf, 4), nil, h4, f4, 2, 2, true, 0, 1, false)
	})
}
