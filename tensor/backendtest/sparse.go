package backendtest

import (
	"fmt"
	"math"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

// sparseShapes are (rows, cols, maxDeg): empty matrices, a single entry,
// wide and tall ones, and one large enough to run in parallel.
var sparseShapes = [][3]int{{0, 0, 0}, {0, 5, 3}, {4, 0, 3}, {1, 1, 1}, {1, 9, 6}, {13, 9, 5}, {9, 13, 5}, {300, 200, 12}, {2500, 1800, 20}}

// headShapes are (heads, dim).
var headShapes = [][2]int{{1, 1}, {1, 5}, {2, 3}, {4, 8}}

func testSpMM(s *suite) {
	for _, sh := range sparseShapes {
		a := s.randCSR(sh[0], sh[1], sh[2])
		sp := s.sparse(a)
		for _, hd := range headShapes {
			heads, dim := hd[0], hd[1]
			width := heads * dim
			if testing.Short() && a.nnz() > 10000 && heads*dim < 8 {
				continue
			}
			for _, transpose := range []bool{false, true} {
				for _, weighted := range []bool{false, true} {
					if !weighted && heads != 1 {
						continue
					}
					inRows, outRows := a.cols, a.rows
					if transpose {
						inRows, outRows = outRows, inRows
					}
					x := s.randn(inRows * width)
					var w []float32
					var wb backend.Buffer
					if weighted {
						w = s.randn(a.nnz() * heads)
						wb = s.f32(w)
					}
					out := s.out(outRows * width)
					name := fmt.Sprintf("SpMM %s nnz=%d heads=%d dim=%d transpose=%v weighted=%v", shape(a.rows, a.cols), a.nnz(), heads, dim, transpose, weighted)
					s.ok(name, func() error { return s.b.SpMM(out, sp, transpose, s.f32(x), wb, heads, width) })
					s.close(name, s.get(out), refSpMM(a, transpose, x, w, heads, width), s.opt.Tol)
				}
			}
		}
	}
}

func testSDDMM(s *suite) {
	for _, sh := range sparseShapes {
		a := s.randCSR(sh[0], sh[1], sh[2])
		sp := s.sparse(a)
		rowOf := a.rowOf()
		for _, hd := range headShapes {
			heads, dim := hd[0], hd[1]
			width := heads * dim
			u, v := s.randn(a.rows*width), s.randn(a.cols*width)
			out := s.out(a.nnz() * heads)
			name := fmt.Sprintf("SDDMMDot %s nnz=%d heads=%d dim=%d", shape(a.rows, a.cols), a.nnz(), heads, dim)
			s.ok(name, func() error { return s.b.SDDMM(backend.SDDMMDot, out, sp, s.f32(u), s.f32(v), heads, dim) })
			want := make([]float64, a.nnz()*heads)
			for e := range a.idx {
				i, j := rowOf[e], int(a.idx[e])
				for h := 0; h < heads; h++ {
					var sum float64
					for d := 0; d < dim; d++ {
						sum += float64(u[i*width+h*dim+d]) * float64(v[j*width+h*dim+d])
					}
					want[e*heads+h] = sum
				}
			}
			s.close(name, s.get(out), want, s.opt.Tol)

			// SDDMMAdd with one value per head.
			ua, va := s.randn(a.rows*heads), s.randn(a.cols*heads)
			out = s.out(a.nnz() * heads)
			name = fmt.Sprintf("SDDMMAdd %s nnz=%d heads=%d", shape(a.rows, a.cols), a.nnz(), heads)
			s.ok(name, func() error { return s.b.SDDMM(backend.SDDMMAdd, out, sp, s.f32(ua), s.f32(va), heads, 1) })
			for e := range a.idx {
				for h := 0; h < heads; h++ {
					want[e*heads+h] = float64(ua[rowOf[e]*heads+h]) + float64(va[int(a.idx[e])*heads+h])
				}
			}
			s.close(name, s.get(out), want, s.opt.Tol)
		}
	}
}

func testEdgeSum(s *suite) {
	for _, sh := range sparseShapes {
		a := s.randCSR(sh[0], sh[1], sh[2])
		sp := s.sparse(a)
		rowOf := a.rowOf()
		for _, heads := range []int{1, 3} {
			e := s.randn(a.nnz() * heads)
			eb := s.f32(e)
			for _, transpose := range []bool{false, true} {
				n := a.rows
				if transpose {
					n = a.cols
				}
				out := s.out(n * heads)
				name := fmt.Sprintf("EdgeSum %s nnz=%d heads=%d transpose=%v", shape(a.rows, a.cols), a.nnz(), heads, transpose)
				s.ok(name, func() error { return s.b.EdgeSum(out, sp, transpose, eb, heads) })
				want := make([]float64, n*heads)
				for k := range a.idx {
					node := rowOf[k]
					if transpose {
						node = int(a.idx[k])
					}
					for h := 0; h < heads; h++ {
						want[node*heads+h] += float64(e[k*heads+h])
					}
				}
				s.close(name, s.get(out), want, s.opt.Tol)
			}
		}
	}
}

func testEdgeSoftmax(s *suite) {
	for _, sh := range sparseShapes {
		a := s.randCSR(sh[0], sh[1], sh[2])
		sp := s.sparse(a)
		for _, heads := range []int{1, 2, 4} {
			n := a.nnz() * heads
			scores := s.randn(n)
			if n > 0 {
				scores[0] = 90 // would overflow exp in float32 without the max
			}
			// Edges of empty rows do not exist, so every element is written.
			y := s.out(n)
			name := fmt.Sprintf("EdgeSoftmax %s nnz=%d heads=%d", shape(a.rows, a.cols), a.nnz(), heads)
			s.ok(name, func() error { return s.b.EdgeSoftmax(y, sp, s.f32(scores), heads) })
			ref := refEdgeSoftmax(a, f64(scores), heads)
			yv := s.get(y)
			s.close(name, yv, ref, s.opt.Tol)

			// In place (out aliases scores).
			sb := s.f32(scores)
			s.ok(name, func() error { return s.b.EdgeSoftmax(sb, sp, sb, heads) })
			s.close(name+" in place", s.get(sb), ref, s.opt.Tol)

			dy := s.randn(n)
			ds := s.out(n)
			s.ok(name, func() error { return s.b.EdgeSoftmaxBackward(ds, sp, y, s.f32(dy), heads) })
			want := make([]float64, n)
			for i := 0; i < a.rows; i++ {
				for h := 0; h < heads; h++ {
					var dot float64
					for e := a.ptr[i]; e < a.ptr[i+1]; e++ {
						k := int(e)*heads + h
						dot += float64(yv[k]) * float64(dy[k])
					}
					for e := a.ptr[i]; e < a.ptr[i+1]; e++ {
						k := int(e)*heads + h
						want[k] = float64(yv[k]) * (float64(dy[k]) - dot)
					}
				}
			}
			dsv := s.get(ds)
			s.close(name+" backward", dsv, want, s.opt.Tol)

			// ds is the gradient of <EdgeSoftmax(scores), dy>.
			if n > 0 && a.rows <= 300 {
				sc := f64(scores)
				f := func() float64 { return dot64(refEdgeSoftmax(a, sc, heads), f64(dy)) }
				const h = 1e-6
				for k := 0; k < min(n, 20); k++ {
					i := s.r.IntN(n)
					old := sc[i]
					sc[i] = old + h
					fp := f()
					sc[i] = old - h
					fm := f()
					sc[i] = old
					fd := (fp - fm) / (2 * h)
					if math.Abs(float64(dsv[i])-fd) > 1e-3*(1+math.Abs(fd)) {
						s.t.Fatalf("%s backward: ds[%d] = %v, finite difference %v", name, i, dsv[i], fd)
					}
				}
			}
		}
	}
}

func testDegreeExpand(s *suite) {
	for _, sh := range sparseShapes {
		a := s.randCSR(sh[0], sh[1], sh[2])
		sp := s.sparse(a)
		rowOf := a.rowOf()
		for _, transpose := range []bool{false, true} {
			n := a.rows
			if transpose {
				n = a.cols
			}
			deg := make([]int, n)
			for e := range a.idx {
				if transpose {
					deg[a.idx[e]]++
				} else {
					deg[rowOf[e]]++
				}
			}
			want := make([]float32, n)
			for i, d := range deg {
				want[i] = 1 / float32(max(d, 1))
			}
			out := s.out(n)
			name := fmt.Sprintf("RowDegreeInv %s transpose=%v", shape(a.rows, a.cols), transpose)
			s.ok(name, func() error { return s.b.RowDegreeInv(out, sp, transpose) })
			s.exact(name, s.get(out), want)
		}
		v := s.randn(a.rows)
		out := s.out(a.nnz())
		name := fmt.Sprintf("ExpandRowsToEdges %s", shape(a.rows, a.cols))
		s.ok(name, func() error { return s.b.ExpandRowsToEdges(out, sp, s.f32(v)) })
		want := make([]float32, a.nnz())
		for e := range want {
			want[e] = v[rowOf[e]]
		}
		s.exact(name, s.get(out), want)
	}
}

// testAdjoints checks the identities autograd relies on: each backward
// primitive is the adjoint (transpose) of its forward.
func testAdjoints(s *suite) {
	inner := func(what string, lhs, rhs []float32, x, y []float32) {
		s.t.Helper()
		l, r := dot64(f64(lhs), f64(y)), dot64(f64(x), f64(rhs))
		scale := math.Sqrt(dot64(f64(lhs), f64(lhs))*dot64(f64(y), f64(y))) + math.Sqrt(dot64(f64(x), f64(x))*dot64(f64(rhs), f64(rhs)))
		if math.Abs(l-r) > 1e-5*(scale+1e-30) {
			s.t.Fatalf("%s: <F x, y> = %v but <x, F' y> = %v", what, l, r)
		}
	}
	for _, sh := range sparseShapes[3:] {
		a := s.randCSR(sh[0], sh[1], sh[2])
		sp := s.sparse(a)
		for _, hd := range headShapes {
			heads, dim := hd[0], hd[1]
			width := heads * dim
			w := s.randn(a.nnz() * heads)
			wb := s.f32(w)
			// <A x, y> = <x, A^T y>
			x, y := s.randn(a.cols*width), s.randn(a.rows*width)
			ax, aty := s.out(a.rows*width), s.out(a.cols*width)
			s.ok("SpMM", func() error { return s.b.SpMM(ax, sp, false, s.f32(x), wb, heads, width) })
			s.ok("SpMM", func() error { return s.b.SpMM(aty, sp, true, s.f32(y), wb, heads, width) })
			inner(fmt.Sprintf("SpMM/SpMM^T %s heads=%d", shape(a.rows, a.cols), heads), s.get(ax), s.get(aty), x, y)

			// SDDMM(u, v) is linear in u: <SDDMM(u, v), g> = <u, SpMM(A, v; w=g)>
			// and in v: = <v, SpMM(A^T, u; w=g)>.
			u, v := s.randn(a.rows*width), s.randn(a.cols*width)
			ub, vb := s.f32(u), s.f32(v)
			sd := s.out(a.nnz() * heads)
			s.ok("SDDMM", func() error { return s.b.SDDMM(backend.SDDMMDot, sd, sp, ub, vb, heads, dim) })
			gu, gv := s.out(a.rows*width), s.out(a.cols*width)
			s.ok("SpMM", func() error { return s.b.SpMM(gu, sp, false, vb, wb, heads, width) })
			s.ok("SpMM", func() error { return s.b.SpMM(gv, sp, true, ub, wb, heads, width) })
			sdv := s.get(sd)
			l := dot64(f64(sdv), f64(w))
			for _, pair := range []struct {
				name string
				a, b []float32
			}{{"du", u, s.get(gu)}, {"dv", v, s.get(gv)}} {
				r := dot64(f64(pair.a), f64(pair.b))
				if math.Abs(l-r) > 1e-5*(math.Abs(l)+math.Sqrt(dot64(f64(pair.a), f64(pair.a))*dot64(f64(pair.b), f64(pair.b)))+1e-30) {
					s.t.Fatalf("SDDMM %s heads=%d %s: <SDDMM(u,v), g> = %v, SpMM gives %v", shape(a.rows, a.cols), heads, pair.name, l, r)
				}
			}
		}
		// EdgeSum is the adjoint of ExpandRowsToEdges.
		e, v := s.randn(a.nnz()), s.randn(a.rows)
		es, ex := s.out(a.rows), s.out(a.nnz())
		s.ok("EdgeSum", func() error { return s.b.EdgeSum(es, sp, false, s.f32(e), 1) })
		s.ok("ExpandRowsToEdges", func() error { return s.b.ExpandRowsToEdges(ex, sp, s.f32(v)) })
		inner("EdgeSum/ExpandRowsToEdges", s.get(es), s.get(ex), e, v)
	}
	// ScatterAddRows is the adjoint of GatherRows.
	for _, sh := range [][3]int{{7, 3, 20}, {300, 16, 1000}} {
		xrows, cols, n := sh[0], sh[1], sh[2]
		idx := make([]int32, n)
		for i := range idx {
			idx[i] = int32(s.r.IntN(xrows))
		}
		ib := s.i32(idx)
		x, y := s.randn(xrows*cols), s.randn(n*cols)
		g := s.out(n * cols)
		s.ok("GatherRows", func() error { return s.b.GatherRows(g, s.f32(x), ib, xrows, cols) })
		sc := s.f32(make([]float32, xrows*cols))
		s.ok("ScatterAddRows", func() error { return s.b.ScatterAddRows(sc, s.f32(y), ib, xrows, cols) })
		inner("GatherRows/ScatterAddRows", s.get(g), s.get(sc), x, y)
	}
}

// testSpMMConcat checks backend.ConcatAggregator where the back end has
// it: [x's first rows | A x] equals x's rows and SpMM's output bit for
// bit, in float32 and (with bfloat16 activations) bfloat16, weighted and
// not, at widths of each vector form (47, 100, 128) and with rows long
// enough to be cut (a hub of 3,000 entries); shape errors are typed.
func testSpMMConcat(s *suite) {
	ca, ok := s.b.(backend.ConcatAggregator)
	if !ok {
		s.t.Skip("no backend.ConcatAggregator")
	}
	types := []backend.DType{backend.Float32}
	if backend.HasBF16Activations(s.b) {
		types = append(types, backend.BFloat16)
	}
	shapes := [][3]int{{0, 5, 3}, {1, 1, 1}, {9, 13, 5}, {200, 300, 12}, {1800, 2500, 20}}
	hub := s.randCSR(40, 4000, 6)
	for i := 0; i < 3000; i++ { // row 39 a hub
		hub.idx = append(hub.idx, int32(s.r.IntN(hub.cols)))
	}
	hub.ptr[40] = int64(len(hub.idx))
	mats := []csrM{hub}
	for _, sh := range shapes {
		mats = append(mats, s.randCSR(sh[0], sh[1], sh[2]))
	}
	for _, a := range mats {
		sp := s.sparse(a)
		for _, dt := range types {
			for _, width := range []int{3, 47, 100, 128} {
				if testing.Short() && a.nnz() > 10000 && width != 100 {
					continue
				}
				for _, weighted := range []bool{false, true} {
					x, _ := s.rounded(a.cols * width)
					xb := s.upFloat(dt, x)
					var wb backend.Buffer
					if weighted {
						wb = s.f32(s.randn(a.nnz()))
					}
					name := fmt.Sprintf("SpMMConcat %s nnz=%d width=%d %s weighted=%v", shape(a.rows, a.cols), a.nnz(), width, dt, weighted)
					agg := s.floatOut(dt, a.rows*width)
					s.ok(name+" (SpMM)", func() error { return s.b.SpMM(agg, sp, false, xb, wb, 1, width) })
					sums := s.getFloat(agg)
					out := s.floatOut(dt, a.rows*2*width)
					s.ok(name, func() error { return ca.SpMMConcat(out, sp, xb, wb, width) })
					want := make([]float32, 0, a.rows*2*width)
					xr := s.getFloat(xb)
					for i := 0; i < a.rows; i++ {
						want = append(want, xr[i*width:(i+1)*width]...)
						want = append(want, sums[i*width:(i+1)*width]...)
					}
					s.sameBits(name, s.getFloat(out), want)
				}
			}
		}
	}
	tall := s.sparse(s.randCSR(5, 3, 2))
	s.expectShapeErr("SpMMConcat with more rows than columns", func() error {
		return ca.SpMMConcat(s.out(5*2*4), tall, s.f32(s.randn(3*4)), nil, 4)
	})
	sq := s.sparse(s.randCSR(4, 4, 2))
	s.expectShapeErr("SpMMConcat with a short output", func() error {
		return ca.SpMMConcat(s.out(4*4), sq, s.f32(s.randn(4*4)), nil, 4)
	})
	s.expectShapeErr("SpMMConcat with width 0", func() error {
		return ca.SpMMConcat(s.out(4), sq, s.f32(s.randn(4)), nil, 0)
	})
}
