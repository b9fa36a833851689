package backendtest

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
)

// same fails unless got and want are equal element by element (== on
// floats: +0 and -0 are one value, which no later sum or product tells
// apart; NaN only where want has NaN).
func (s *suite) same(what string, got, want []float32) {
	s.t.Helper()
	if len(got) != len(want) {
		s.t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i, g := range got {
		w := want[i]
		if g != w && !(g != g && w != w) {
			s.t.Fatalf("%s: element %d is %v, want %v (the unfused sequence's)", what, i, g, w)
		}
	}
}

// testFused checks backend.Fused, where b has it, against a float64
// reference and against the unfused sequence of primitives on b itself
// (equal values: the fused kernels compute the same float32 operations).
func testFused(s *suite) {
	f, ok := s.b.(backend.Fused)
	if !ok {
		s.t.Skipf("%s has no Fused capability", s.b.Name())
	}
	drop := func(p float32, seed uint64, i int) float64 {
		if p == 0 {
			return 1
		}
		if rng.DropUniform(seed, uint64(i)) >= p {
			return float64(1 / (1 - p))
		}
		return 0
	}
	for _, p := range []float32{0, 0.5, 0.9} {
		for _, sh := range [][2]int{{0, 4}, {1, 3}, {37, 8}, {300, 100}, {129, 47}, {40, 256}} {
			rows, cols := sh[0], sh[1]
			n := rows * cols
			seed := uint64(7 + rows)
			name := fmt.Sprintf("p=%v %dx%d", p, rows, cols)

			// GatherRowsDropout, float32 and bfloat16 tables.
			xrows := rows/2 + 3
			x := s.randn(xrows * cols)
			idx := make([]int32, rows)
			for i := range idx {
				idx[i] = int32(s.r.IntN(xrows))
			}
			xb, ib := s.f32(x), s.i32(idx)
			got := s.out(n)
			s.ok("GatherRowsDropout "+name, func() error { return f.GatherRowsDropout(got, xb, ib, xrows, cols, p, seed) })
			want := make([]float64, n)
			for i := 0; i < rows; i++ {
				for c := 0; c < cols; c++ {
					want[i*cols+c] = float64(x[int(idx[i])*cols+c]) * drop(p, seed, i*cols+c)
				}
			}
			s.close("GatherRowsDropout "+name, s.get(got), want, s.opt.Tol)
			un := s.out(n)
			s.ok("GatherRows", func() error { return s.b.GatherRows(un, xb, ib, xrows, cols) })
			if p > 0 {
				s.ok("Dropout", func() error { return s.b.Dropout(un, s.out(n), un, p, seed) })
			}
			s.same("GatherRowsDropout "+name, s.get(got), s.get(un))
			x16 := make([]uint16, len(x))
			for i, v := range x {
				x16[i] = backend.BF16Bits(v)
			}
			xb16 := s.u16(x16)
			s.ok("GatherRowsDropout bf16 "+name, func() error { return f.GatherRowsDropout(got, xb16, ib, xrows, cols, p, seed) })
			s.ok("GatherRows bf16", func() error { return s.b.GatherRows(un, xb16, ib, xrows, cols) })
			if p > 0 {
				s.ok("Dropout", func() error { return s.b.Dropout(un, s.out(n), un, p, seed) })
			}
			s.same("GatherRowsDropout bf16 "+name, s.get(got), s.get(un))

			// BiasActDropout and its backward, with and without b and ReLU.
			a, bv, bias, dy := s.randn(n), s.randn(n), s.randn(cols), s.randn(n)
			ab, bb, biasb, dyb := s.f32(a), s.f32(bv), s.f32(bias), s.f32(dy)
			for _, relu := range []bool{false, true} {
				for _, withB := range []bool{false, true} {
					nm := fmt.Sprintf("%s relu=%v b=%v", name, relu, withB)
					var bArg backend.Buffer
					if withB {
						bArg = bb
					}
					y := s.out(n)
					s.ok("BiasActDropout "+nm, func() error { return f.BiasActDropout(y, ab, bArg, biasb, rows, cols, relu, p, seed) })
					wy := make([]float64, n)
					wdx := make([]float64, n)
					wdb := make([]float64, cols)
					for i := range wy {
						v := float64(a[i]) + float64(bias[i%cols])
						if withB {
							v += float64(bv[i])
						}
						g := float64(dy[i]) * drop(p, seed, i)
						if relu && v <= 0 {
							v, g = 0, 0
						}
						wy[i] = v * drop(p, seed, i)
						wdx[i] = g
						wdb[i%cols] += g
					}
					yh := s.get(y)
					s.close("BiasActDropout "+nm, yh, wy, 4*s.opt.Tol)
					// The unfused forward: Axpby, AddRowVector, Unary, Dropout.
					u := s.out(n)
					src := ab
					if withB {
						s.ok("Axpby", func() error { return s.b.Axpby(u, 1, ab, 1, bb) })
						src = u
					}
					s.ok("AddRowVector", func() error { return s.b.AddRowVector(u, src, biasb, rows, cols) })
					pre := s.get(u)
					if relu {
						s.ok("Unary", func() error { return s.b.Unary(backend.ReLU, 0, u, u) })
					}
					mask := s.out(n)
					if p > 0 {
						s.ok("Dropout", func() error { return s.b.Dropout(u, mask, u, p, seed) })
					}
					s.same("BiasActDropout "+nm, yh, s.get(u))

					// Backward, with dbias overwritten and accumulated.
					dx, db := s.out(n), s.out(cols)
					s.ok("BiasActDropoutBackward "+nm, func() error {
						return f.BiasActDropoutBackward(dx, db, y, dyb, rows, cols, relu, p, seed, false)
					})
					dxh, dbh := s.get(dx), s.get(db)
					s.close("BiasActDropoutBackward dx "+nm, dxh, wdx, s.opt.Tol)
					s.close("BiasActDropoutBackward dbias "+nm, dbh, wdb, 1e-4)
					ud := s.out(n)
					if p > 0 {
						s.ok("Mul", func() error { return s.b.Mul(ud, dyb, mask) })
					} else {
						s.ok("Copy", func() error { return s.b.Copy(ud, dyb) })
					}
					if relu {
						preb := s.f32(pre)
						s.ok("UnaryBackward", func() error { return s.b.UnaryBackward(backend.ReLU, 0, ud, preb, preb, ud) })
					}
					s.same("BiasActDropoutBackward dx "+nm, dxh, s.get(ud))
					udb := s.out(cols)
					s.ok("SumRows", func() error { return s.b.SumRows(udb, ud, rows, cols) })
					s.same("BiasActDropoutBackward dbias "+nm, dbh, s.get(udb))
					// Accumulating adds the sums to what dbias holds; dx
					// aliasing dy is allowed.
					prev := s.randn(cols)
					db2 := s.f32(prev)
					dy2 := s.f32(dy)
					s.ok("BiasActDropoutBackward acc "+nm, func() error {
						return f.BiasActDropoutBackward(dy2, db2, y, dy2, rows, cols, relu, p, seed, true)
					})
					s.same("BiasActDropoutBackward in place "+nm, s.get(dy2), dxh)
					wantAcc := make([]float32, cols)
					for c := range wantAcc {
						wantAcc[c] = dbh[c] + prev[c]
					}
					s.same("BiasActDropoutBackward accumulate "+nm, s.get(db2), wantAcc)
					// No dbias: dx alone.
					dx3 := s.out(n)
					s.ok("BiasActDropoutBackward no bias "+nm, func() error {
						return f.BiasActDropoutBackward(dx3, nil, y, dyb, rows, cols, relu, p, seed, false)
					})
					s.same("BiasActDropoutBackward no bias "+nm, s.get(dx3), dxh)
				}
			}
		}
	}
	// Refusals: a rate outside [0, 1), mismatched lengths.
	y := s.out(4)
	for _, p := range []float32{-0.1, 1, float32(math.NaN())} {
		if err := s.protect("BiasActDropout", func() error { return f.BiasActDropout(y, y, nil, s.out(2), 2, 2, true, p, 1) }); err == nil {
			s.t.Fatalf("BiasActDropout with p = %v: no error", p)
		}
	}
	if err := s.protect("BiasActDropoutBackward", func() error {
		return f.BiasActDropoutBackward(y, s.out(3), y, y, 2, 2, true, 0.5, 1, false)
	}); err == nil {
		s.t.Fatal("BiasActDropoutBackward with a 3-element dbias for 2 columns: no error")
	}
	if err := s.protect("GatherRowsDropout", func() error {
		return f.GatherRowsDropout(y, y, s.i32([]int32{0, 5}), 2, 2, 0.5, 1)
	}); err == nil {
		if err = s.b.Synchronize(); err == nil {
			s.t.Fatal("GatherRowsDropout with an index out of range: no error")
		}
	}
}
