package backendtest

import (
	"fmt"
	"math"
	"testing"

	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
)

// rowShapes are (rows, cols) pairs: empty, single, odd, and large enough for
// a parallel back end to split the work.
var rowShapes = [][2]int{{0, 3}, {1, 1}, {1, 9}, {7, 5}, {33, 17}, {130, 64}, {1500, 41}}

func testMemory(s *suite) {
	for _, dt := range []backend.DType{backend.Float32, backend.Int32, backend.Int64} {
		for _, n := range []int{0, 1, 1000, 70001} {
			buf := s.alloc(dt, n)
			if buf.Len() != n || buf.DType() != dt {
				s.t.Fatalf("Alloc(%v, %d) gave Len %d DType %v", dt, n, buf.Len(), buf.DType())
			}
			switch dt {
			case backend.Float32:
				got := s.get(buf)
				for i, v := range got {
					if v != 0 {
						s.t.Fatalf("Alloc(float32, %d): element %d = %v, want 0", n, i, v)
					}
				}
				src := s.randn(n)
				s.ok("Upload", func() error { return s.b.Upload(buf, src) })
				s.exact("Upload/Download", s.get(buf), src)
				cp := s.out(n)
				s.ok("Copy", func() error { return s.b.Copy(cp, buf) })
				s.exact("Copy", s.get(cp), src)
				s.ok("Fill", func() error { return s.b.Fill(cp, 2.5) })
				for i, v := range s.get(cp) {
					if v != 2.5 {
						s.t.Fatalf("Fill: element %d = %v", i, v)
					}
				}
			case backend.Int32:
				got := s.getI32(buf)
				for i, v := range got {
					if v != 0 {
						s.t.Fatalf("Alloc(int32, %d): element %d = %v, want 0", n, i, v)
					}
				}
				src := make([]int32, n)
				for i := range src {
					src[i] = int32(s.r.Uint32())
				}
				s.ok("Upload", func() error { return s.b.Upload(buf, src) })
				cp := s.alloc(dt, n)
				s.ok("Copy", func() error { return s.b.Copy(cp, buf) })
				got = s.getI32(cp)
				for i := range src {
					if got[i] != src[i] {
						s.t.Fatalf("int32 Upload/Copy/Download: element %d = %d, want %d", i, got[i], src[i])
					}
				}
			case backend.Int64:
				got := make([]int64, n)
				for i := range got {
					got[i] = -1
				}
				s.ok("Download", func() error { return s.b.Download(got, buf) })
				for i, v := range got {
					if v != 0 {
						s.t.Fatalf("Alloc(int64, %d): element %d = %v, want 0", n, i, v)
					}
				}
				src := make([]int64, n)
				for i := range src {
					src[i] = int64(s.r.Uint64())
				}
				s.ok("Upload", func() error { return s.b.Upload(buf, src) })
				s.ok("Download", func() error { return s.b.Download(got, buf) })
				for i := range src {
					if got[i] != src[i] {
						s.t.Fatalf("int64 Upload/Download: element %d = %d, want %d", i, got[i], src[i])
					}
				}
			}
		}
	}
	s.b.Free(nil) // must be a no-op
}

func testGemm(s *suite) {
	type mnk struct{ m, n, k int }
	sizes := []mnk{{0, 3, 4}, {3, 0, 4}, {3, 4, 0}, {1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {130, 64, 31}, {300, 128, 256}}
	for _, sz := range sizes {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for abi, ab := range [][2]float32{{1, 0}, {0.5, 1.5}, {-2, 1}} {
					if testing.Short() && sz.m*sz.n*sz.k > 1e6 && abi != 1 {
						continue // the float64 reference is slow under -race
					}
					name := fmt.Sprintf("Gemm(%v,%v) %s alpha %v beta %v", ta, tb, shape(sz.m, sz.n, sz.k), ab[0], ab[1])
					a, b := s.randn(sz.m*sz.k), s.randn(sz.k*sz.n)
					c0 := s.randn(sz.m * sz.n)
					want := refGemm(ta, tb, sz.m, sz.n, sz.k, float64(ab[0]), a, b, float64(ab[1]), c0)
					var cb backend.Buffer
					if ab[1] == 0 {
						cb = s.out(sz.m * sz.n) // beta = 0: C must not be read
					} else {
						cb = s.f32(c0)
					}
					ab_, bb := s.f32(a), s.f32(b)
					s.ok(name, func() error {
						return s.b.Gemm(ta, tb, sz.m, sz.n, sz.k, ab[0], ab_, bb, ab[1], cb)
					})
					s.close(name, s.get(cb), want, s.opt.GemmTol)
				}
			}
		}
	}
}

func testElementwise(s *suite) {
	for _, n := range []int{0, 1, 17, 40000} {
		x, y := s.randn(n), s.randn(n)
		xb, yb := s.f32(x), s.f32(y)
		d := s.out(n)
		s.ok("Axpby", func() error { return s.b.Axpby(d, 1.5, xb, -0.25, yb) })
		want := make([]float64, n)
		for i := range want {
			want[i] = 1.5*float64(x[i]) - 0.25*float64(y[i])
		}
		s.close("Axpby", s.get(d), want, s.opt.Tol)
		// Aliased: y = 2*x + 3*y in place.
		yy := s.f32(y)
		s.ok("Axpby aliased", func() error { return s.b.Axpby(yy, 2, xb, 3, yy) })
		for i := range want {
			want[i] = 2*float64(x[i]) + 3*float64(y[i])
		}
		s.close("Axpby aliased", s.get(yy), want, s.opt.Tol)

		s.ok("Mul", func() error { return s.b.Mul(d, xb, yb) })
		for i := range want {
			want[i] = float64(x[i]) * float64(y[i])
		}
		s.close("Mul", s.get(d), want, s.opt.Tol)
		xx := s.f32(x)
		s.ok("Mul aliased", func() error { return s.b.Mul(xx, xx, yb) })
		s.close("Mul aliased", s.get(xx), want, s.opt.Tol)
	}
	for _, sh := range rowShapes {
		rows, cols := sh[0], sh[1]
		x, v := s.randn(rows*cols), s.randn(cols)
		d := s.out(rows * cols)
		s.ok("AddRowVector", func() error { return s.b.AddRowVector(d, s.f32(x), s.f32(v), rows, cols) })
		want := make([]float64, rows*cols)
		for r := 0; r < rows; r++ {
			for c := 0; c < cols; c++ {
				want[r*cols+c] = float64(x[r*cols+c]) + float64(v[c])
			}
		}
		s.close("AddRowVector "+shape(rows, cols), s.get(d), want, s.opt.Tol)
	}
}

var unaryOps = []struct {
	op    backend.UnaryOp
	alpha float32
}{{backend.ReLU, 0}, {backend.LeakyReLU, 0.2}, {backend.ELU, 1}, {backend.ELU, 0.7}, {backend.Exp, 0}, {backend.Identity, 0}}

func testUnary(s *suite) {
	for _, u := range unaryOps {
		for _, n := range []int{0, 1, 33, 40000} {
			name := fmt.Sprintf("%v(alpha %v) n=%d", u.op, u.alpha, n)
			x := s.uniform(n, -3, 3)
			if n >= 4 {
				x[0], x[1] = 0, float32(math.Copysign(0, -1)) // the kink, both zeros
			}
			xb := s.f32(x)
			y := s.out(n)
			s.ok(name, func() error { return s.b.Unary(u.op, u.alpha, y, xb) })
			want := make([]float64, n)
			for i, v := range x {
				want[i] = refUnary(u.op, float64(u.alpha), float64(v))
			}
			yv := s.get(y)
			s.close("Unary "+name, yv, want, s.opt.Tol)

			dy := s.randn(n)
			dx := s.out(n)
			s.ok(name, func() error { return s.b.UnaryBackward(u.op, u.alpha, dx, xb, y, s.f32(dy)) })
			for i, v := range x {
				want[i] = float64(dy[i]) * refUnaryGrad(u.op, float64(u.alpha), float64(v))
			}
			s.close("UnaryBackward "+name, s.get(dx), want, s.opt.Tol)
			// dx may alias dy.
			dyb := s.f32(dy)
			s.ok(name, func() error { return s.b.UnaryBackward(u.op, u.alpha, dyb, xb, y, dyb) })
			s.close("UnaryBackward aliased "+name, s.get(dyb), want, s.opt.Tol)

			// The derivative is the derivative of the forward: central
			// differences of refUnary (checked above) away from the kink.
			const h = 1e-5
			for _, v := range x {
				xv := float64(v)
				if math.Abs(xv) < 10*h {
					continue
				}
				fd := (refUnary(u.op, float64(u.alpha), xv+h) - refUnary(u.op, float64(u.alpha), xv-h)) / (2 * h)
				if g := refUnaryGrad(u.op, float64(u.alpha), xv); math.Abs(fd-g) > 1e-5*(1+math.Abs(g)) {
					s.t.Fatalf("%s: derivative at %v is %v, finite difference %v", name, xv, g, fd)
				}
			}
		}
	}
}

func testDropout(s *suite) {
	for _, p := range []float32{0, 0.1, 0.5, 0.9} {
		for _, n := range []int{0, 1, 1000, 50001} {
			for _, seed := range []uint64{0, 7, 1 << 40} {
				if testing.Short() && n > 1000 && seed != 7 {
					continue
				}
				name := fmt.Sprintf("Dropout p=%v n=%d seed=%d", p, n, seed)
				x := s.randn(n)
				d, m := s.out(n), s.out(n)
				s.ok(name, func() error { return s.b.Dropout(d, m, s.f32(x), p, seed) })
				keep := 1 / (1 - p)
				wantM := make([]float32, n)
				wantD := make([]float64, n)
				kept := 0
				for i := range wantM {
					if rng.DropUniform(seed, uint64(i)) >= p {
						wantM[i] = keep
						kept++
					}
					wantD[i] = float64(x[i]) * float64(wantM[i])
				}
				s.exact(name+" mask", s.get(m), wantM)
				s.close(name+" dst", s.get(d), wantD, s.opt.Tol)
				if n >= 1000 {
					// Binomial(n, 1-p): allow 6 standard deviations.
					mean := float64(n) * float64(1-p)
					sd := math.Sqrt(float64(n) * float64(p) * float64(1-p))
					if math.Abs(float64(kept)-mean) > 6*sd+1 {
						s.t.Fatalf("%s: kept %d, expected about %.0f", name, kept, mean)
					}
				}
			}
		}
	}
}

func testReductions(s *suite) {
	for _, sh := range append(rowShapes, [2]int{5000, 3}, [2]int{3, 0}) {
		rows, cols := sh[0], sh[1]
		x := s.randn(rows * cols)
		xb := s.f32(x)
		d := s.out(cols)
		s.ok("SumRows", func() error { return s.b.SumRows(d, xb, rows, cols) })
		want := make([]float64, cols)
		var total float64
		for r := 0; r < rows; r++ {
			for c := 0; c < cols; c++ {
				want[c] += float64(x[r*cols+c])
				total += float64(x[r*cols+c])
			}
		}
		s.close("SumRows "+shape(rows, cols), s.get(d), want, s.opt.Tol)

		var got float64
		s.ok("Sum", func() (err error) { got, err = s.b.Sum(xb); return err })
		// Sum returns float64; allow float32-level error relative to the
		// sum of magnitudes (the sum itself may cancel).
		var mag float64
		for _, v := range x {
			mag += math.Abs(float64(v))
		}
		if math.Abs(got-total) > s.opt.Tol*(mag+1e-30) {
			s.t.Fatalf("Sum %s = %v, want %v", shape(rows, cols), got, total)
		}

		if cols == 0 && rows > 0 {
			continue
		}
		if rows > 2 && cols > 2 {
			x[cols+2] = x[cols+1] + 100 // row 1: tie between columns 1 and 2
			x[cols+1] = x[cols+2]
		}
		am := s.outI32(rows)
		s.ok("ArgmaxRows", func() error { return s.b.ArgmaxRows(am, s.f32(x), rows, cols) })
		gotA := s.getI32(am)
		for r := 0; r < rows; r++ {
			best := 0
			for c := 1; c < cols; c++ {
				if x[r*cols+c] > x[r*cols+best] {
					best = c
				}
			}
			if int(gotA[r]) != best {
				s.t.Fatalf("ArgmaxRows %s: row %d = %d, want %d", shape(rows, cols), r, gotA[r], best)
			}
		}
	}
}

func testLogSoftmax(s *suite) {
	for _, sh := range append(rowShapes, [2]int{4, 1}) {
		rows, cols := sh[0], sh[1]
		x := s.randn(rows * cols)
		if rows > 0 && cols > 1 {
			x[0], x[1] = 80, -80 // large spread: needs the max subtracted
		}
		y := s.out(rows * cols)
		s.ok("LogSoftmax", func() error { return s.b.LogSoftmax(y, s.f32(x), rows, cols) })
		yv := s.get(y)
		s.close("LogSoftmax "+shape(rows, cols), yv, refLogSoftmax(f64(x), rows, cols), s.opt.Tol)

		dy := s.randn(rows * cols)
		dx := s.out(rows * cols)
		s.ok("LogSoftmaxBackward", func() error { return s.b.LogSoftmaxBackward(dx, y, s.f32(dy), rows, cols) })
		want := make([]float64, rows*cols)
		for r := 0; r < rows; r++ {
			var sum float64
			for c := 0; c < cols; c++ {
				sum += float64(dy[r*cols+c])
			}
			for c := 0; c < cols; c++ {
				want[r*cols+c] = float64(dy[r*cols+c]) - math.Exp(float64(yv[r*cols+c]))*sum
			}
		}
		dxv := s.get(dx)
		s.close("LogSoftmaxBackward "+shape(rows, cols), dxv, want, s.opt.Tol)

		// dx is the gradient of f(x) = <LogSoftmax(x), dy>: compare with
		// central differences of the float64 forward on a few rows.
		if rows*cols > 0 && rows <= 130 {
			xs := f64(x)
			f := func() float64 { return dot64(refLogSoftmax(xs, rows, cols), f64(dy)) }
			const h = 1e-6
			for k := 0; k < min(rows*cols, 20); k++ {
				i := s.r.IntN(rows * cols)
				old := xs[i]
				xs[i] = old + h
				fp := f()
				xs[i] = old - h
				fm := f()
				xs[i] = old
				fd := (fp - fm) / (2 * h)
				if math.Abs(float64(dxv[i])-fd) > 1e-3*(1+math.Abs(fd)) {
					s.t.Fatalf("LogSoftmaxBackward %s: dx[%d] = %v, finite difference %v", shape(rows, cols), i, dxv[i], fd)
				}
			}
		}
	}
}

func testNLLLoss(s *suite) {
	for _, sh := range [][3]int{{1, 1, 1}, {5, 3, 4}, {40, 7, 40}, {40, 7, 100}, {3000, 10, 2500}, {4, 3, 0}} {
		nrows, cols, n := sh[0], sh[1], sh[2]
		logp := s.randn(nrows * cols)
		rows := make([]int32, n)
		labels := make([]int32, n)
		for i := range rows {
			rows[i] = int32(s.r.IntN(nrows))
			labels[i] = int32(s.r.IntN(cols))
		}
		if n >= 3 { // a repeated (row, label) pair
			rows[2], labels[2] = rows[0], labels[0]
		}
		lb, rb, lab := s.f32(logp), s.i32(rows), s.i32(labels)
		name := fmt.Sprintf("NLLLoss %s n=%d", shape(nrows, cols), n)
		var loss float64
		s.ok(name, func() (err error) { loss, err = s.b.NLLLoss(lb, rb, lab, nrows, cols); return err })
		var want, mag float64
		for i := range rows {
			v := float64(logp[int(rows[i])*cols+int(labels[i])])
			want -= v
			mag += math.Abs(v)
		}
		if n > 0 {
			want /= float64(n)
			mag /= float64(n)
		}
		if math.Abs(loss-want) > s.opt.Tol*(mag+1e-30) {
			s.t.Fatalf("%s = %v, want %v", name, loss, want)
		}
		const scale = 1.75
		d := s.out(nrows * cols)
		s.ok(name, func() error { return s.b.NLLLossBackward(d, rb, lab, nrows, cols, scale) })
		wantD := make([]float64, nrows*cols)
		for i := range rows {
			wantD[int(rows[i])*cols+int(labels[i])] -= scale / float64(n)
		}
		dv := s.get(d)
		s.close(name+" backward", dv, wantD, s.opt.Tol)
		// The loss is linear in logp: its change under a perturbation delta
		// is <dlogp, delta>/scale exactly.
		delta := s.randn(nrows * cols)
		var change float64
		for i := range rows {
			change -= float64(delta[int(rows[i])*cols+int(labels[i])])
		}
		if n > 0 {
			change /= float64(n)
		}
		if pred := dot64(f64(dv), f64(delta)) / scale; math.Abs(pred-change) > 1e-5*(1+math.Abs(change)) {
			s.t.Fatalf("%s: gradient predicts change %v, actual %v", name, pred, change)
		}
	}
}

func testGatherScatter(s *suite) {
	for _, sh := range [][3]int{{1, 1, 1}, {5, 3, 0}, {5, 3, 12}, {40, 17, 100}, {2000, 33, 5000}, {3, 0, 4}} {
		xrows, cols, n := sh[0], sh[1], sh[2]
		x := s.randn(xrows * cols)
		idx := make([]int32, n)
		for i := range idx {
			idx[i] = int32(s.r.IntN(xrows))
		}
		xb, ib := s.f32(x), s.i32(idx)
		d := s.out(n * cols)
		name := fmt.Sprintf("GatherRows %s n=%d", shape(xrows, cols), n)
		s.ok(name, func() error { return s.b.GatherRows(d, xb, ib, xrows, cols) })
		want := make([]float32, n*cols)
		for i, j := range idx {
			copy(want[i*cols:(i+1)*cols], x[int(j)*cols:(int(j)+1)*cols])
		}
		s.exact(name, s.get(d), want)

		// Scatter n rows into xrows destinations (duplicates are certain
		// when n > xrows), on top of existing values.
		src := s.randn(n * cols)
		base := s.randn(xrows * cols)
		db := s.f32(base)
		name = fmt.Sprintf("ScatterAddRows %s n=%d", shape(xrows, cols), n)
		s.ok(name, func() error { return s.b.ScatterAddRows(db, s.f32(src), ib, xrows, cols) })
		wantS := f64(base)
		for i, j := range idx {
			for c := 0; c < cols; c++ {
				wantS[int(j)*cols+c] += float64(src[i*cols+c])
			}
		}
		s.close(name, s.get(db), wantS, s.opt.Tol)
	}
}

func testAdam(s *suite) {
	for _, n := range []int{0, 1, 37, 40000} {
		for _, t := range []int{1, 2, 10} {
			if testing.Short() && n > 1000 && t == 2 {
				continue
			}
			for _, wd := range []float32{0, 0.01} {
				const lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
				p, g := s.randn(n), s.randn(n)
				m := s.randn(n)
				v := s.uniform(n, 0.01, 2)
				for i := 0; i < n; i += 7 {
					// Tiny moments, where eps matters as much as sqrt(v).
					g[i] *= 1e-8
					m[i] *= 1e-8
					v[i] *= 1e-16
				}
				pb, mb, vb := s.f32(p), s.f32(m), s.f32(v)
				name := fmt.Sprintf("AdamStep n=%d t=%d wd=%v", n, t, wd)
				s.ok(name, func() error { return s.b.AdamStep(pb, s.f32(g), mb, vb, lr, b1, b2, eps, wd, t) })
				wp, wm, wv := make([]float64, n), make([]float64, n), make([]float64, n)
				// The back end receives float32 hyperparameters: use
				// exactly those (1-b2 is 1e-3 only to 1.3e-5 in float32).
				fb1, fb2, flr, feps := float64(float32(b1)), float64(float32(b2)), float64(float32(lr)), float64(float32(eps))
				bc1 := 1 - math.Pow(fb1, float64(t))
				bc2 := 1 - math.Pow(fb2, float64(t))
				for i := range wp {
					gi := float64(g[i]) + float64(wd)*float64(p[i])
					wm[i] = fb1*float64(m[i]) + (1-fb1)*gi
					wv[i] = fb2*float64(v[i]) + (1-fb2)*gi*gi
					wp[i] = float64(p[i]) - flr*(wm[i]/bc1)/(math.Sqrt(wv[i]/bc2)+feps)
				}
				s.close(name+" m", s.get(mb), wm, s.opt.Tol)
				s.close(name+" v", s.get(vb), wv, s.opt.Tol)
				s.close(name+" param", s.get(pb), wp, s.opt.Tol)
				// The update itself (param - p) to a relative 1e-3: it is
				// small compared with param, so check it separately.
				gp := s.get(pb)
				upd, wupd := make([]float32, n), make([]float64, n)
				for i := range upd {
					upd[i] = gp[i] - p[i]
					wupd[i] = wp[i] - float64(p[i])
				}
				s.close(name+" update", upd, wupd, 1e-3)
			}
		}
	}
}
