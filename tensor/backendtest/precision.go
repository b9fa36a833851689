package backendtest

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/tensor/backend"
)

// testPrecision checks that Gemm computes in the back end's precision:
// within the precision's tolerance of the exact product (testGemm checks
// that too, on more shapes) and, at TF32 and BF16, measurably off it:
// a back end that ignores its precision computes in float32 and fails.
// How far the result is from the product of the operands rounded as
// package backend rounds them (round to nearest even: the CPU back end's
// emulation) is logged, so a GPU run shows whether its tensor cores round
// as the CPU emulates.
func testPrecision(s *suite) {
	p := s.b.Precision()
	if !p.Valid() {
		s.t.Fatalf("Precision() = %v, not one of %v", p, backend.Precisions)
	}
	type mnk struct{ m, n, k int }
	var worstExact, worstEmul float64
	for _, sz := range []mnk{{33, 17, 65}, {64, 48, 256}, {130, 64, 31}} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				name := fmt.Sprintf("Gemm(%v,%v) %s at %s", ta, tb, shape(sz.m, sz.n, sz.k), p)
				a, b := s.randn(sz.m*sz.k), s.randn(sz.k*sz.n)
				exact := refGemm(ta, tb, sz.m, sz.n, sz.k, 1, a, b, 0, nil)
				ra, rb := append([]float32(nil), a...), append([]float32(nil), b...)
				p.RoundSlice(ra)
				p.RoundSlice(rb)
				emul := refGemm(ta, tb, sz.m, sz.n, sz.k, 1, ra, rb, 0, nil)
				cb := s.out(sz.m * sz.n)
				ab, bb := s.f32(a), s.f32(b)
				s.ok(name, func() error { return s.b.Gemm(ta, tb, sz.m, sz.n, sz.k, 1, ab, bb, 0, cb) })
				got := s.get(cb)
				s.close(name, got, exact, s.opt.GemmTol)
				worstExact = max(worstExact, relErr(got, exact))
				worstEmul = max(worstEmul, relErr(got, emul))
			}
		}
	}
	s.t.Logf("%s Gemm: relative error %.3g from the exact product, %.3g from the product of operands rounded to %s", s.b.Name(), worstExact, worstEmul, p)
	if p != backend.FP32 && worstExact < 1e-5 {
		s.t.Errorf("Gemm at %s: relative error %.3g from the exact product, as float32 products: the precision is not applied", p, worstExact)
	}
}

// relErr is ||got - want|| / ||want||.
func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i, g := range got {
		d := float64(g) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// bf16Specials are float32 values whose bfloat16 rounding is easy to get
// wrong: zeros, infinities, NaN, subnormals, the largest finite values
// (which round to infinity), and ties in both directions.
var bf16Specials = []float32{
	0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
	math.Float32frombits(0x00000001), math.Float32frombits(0x807fffff), math.MaxFloat32, -math.MaxFloat32,
	math.Float32frombits(0x3f808000), // 1 + 2^-8: a tie, rounds down to even 1
	math.Float32frombits(0x3f818000), // 1 + 3*2^-8: a tie, rounds up to even
	math.Float32frombits(0x3f808001), // just above the tie: rounds up
	math.Float32frombits(0x7f7f8000), // ties to infinity
	1, -1, 0.1, 1.0 / 3,
}

func (s *suite) u16(v []uint16) backend.Buffer {
	s.t.Helper()
	buf := s.alloc(backend.BFloat16, len(v))
	s.ok("Upload", func() error { return s.b.Upload(buf, v) })
	return buf
}

func (s *suite) getU16(buf backend.Buffer) []uint16 {
	s.t.Helper()
	v := make([]uint16, buf.Len())
	s.ok("Download", func() error { return s.b.Download(v, buf) })
	return v
}

// testBFloat16 checks the bfloat16 storage type in every precision: its
// memory methods, Convert both ways (bit for bit against package
// backend's rounding), GatherRows from a bfloat16 table (exact widening),
// and the calls that must refuse it.
func testBFloat16(s *suite) {
	if backend.BFloat16.Size() != 2 {
		s.t.Fatalf("BFloat16.Size() = %d", backend.BFloat16.Size())
	}
	for _, n := range []int{0, 1, 7, 70001} {
		buf := s.alloc(backend.BFloat16, n)
		if buf.Len() != n || buf.DType() != backend.BFloat16 {
			s.t.Fatalf("Alloc(bfloat16, %d) gave Len %d DType %v", n, buf.Len(), buf.DType())
		}
		for i, v := range s.getU16(buf) {
			if v != 0 {
				s.t.Fatalf("Alloc(bfloat16, %d): element %d = %#x, want 0", n, i, v)
			}
		}
		src := make([]uint16, n)
		for i := range src {
			src[i] = uint16(s.r.Uint32())
		}
		s.ok("Upload", func() error { return s.b.Upload(buf, src) })
		cp := s.alloc(backend.BFloat16, n)
		s.ok("Copy", func() error { return s.b.Copy(cp, buf) })
		for i, v := range s.getU16(cp) {
			if v != src[i] {
				s.t.Fatalf("bfloat16 Upload/Copy/Download of %d: element %d = %#x, want %#x", n, i, v, src[i])
			}
		}

		// Convert float32 -> bfloat16 -> float32.
		x := s.randn(n)
		if n > len(bf16Specials) {
			copy(x, bf16Specials)
		}
		for i := len(bf16Specials); i+1 < n && i < 2000; i += 2 {
			x[i] = math.Float32frombits(math.Float32bits(x[i])&^0xffff | 0x8000) // ties
		}
		xb := s.f32(x)
		h := s.u16(make([]uint16, n))
		s.ok("Convert f32->bf16", func() error { return s.b.Convert(h, xb) })
		got := s.getU16(h)
		for i, v := range got {
			if want := backend.BF16Bits(x[i]); v != want {
				s.t.Fatalf("Convert f32->bf16 of %d: element %d (%v, %#08x) = %#04x, want %#04x", n, i, x[i], math.Float32bits(x[i]), v, want)
			}
		}
		back := s.out(n)
		s.ok("Convert bf16->f32", func() error { return s.b.Convert(back, h) })
		want := make([]float32, n)
		backend.FromBF16(want, got)
		s.exact(fmt.Sprintf("Convert bf16->f32 of %d", n), s.get(back), want)
		same := s.out(n)
		s.ok("Convert f32->f32", func() error { return s.b.Convert(same, xb) })
		s.exact("Convert f32->f32", s.get(same), x)
	}

	// GatherRows from a bfloat16 table: odd widths and multiples of 4
	// (vector loads), duplicates, empty index lists.
	for _, rc := range [][2]int{{1, 1}, {9, 5}, {40, 8}, {300, 64}, {1500, 41}} {
		rows, cols := rc[0], rc[1]
		table := make([]uint16, rows*cols)
		for i := range table {
			table[i] = backend.BF16Bits(float32(s.r.NormFloat64()))
		}
		tb := s.u16(table)
		for _, m := range []int{0, 1, 3 * rows} {
			idx := make([]int32, m)
			for i := range idx {
				idx[i] = int32(s.r.IntN(rows))
			}
			want := make([]float32, m*cols)
			for i, j := range idx {
				backend.FromBF16(want[i*cols:(i+1)*cols], table[int(j)*cols:(int(j)+1)*cols])
			}
			d := s.out(m * cols)
			ib := s.i32(idx)
			name := fmt.Sprintf("GatherRows bf16 %s from %s", shape(m, cols), shape(rows, cols))
			s.ok(name, func() error { return s.b.GatherRows(d, tb, ib, rows, cols) })
			s.exact(name, s.get(d), want)
		}
		bad := s.i32([]int32{0, int32(rows)})
		s.expectIndexErr("GatherRows bf16 with an index out of range", func() error {
			return s.b.GatherRows(s.out(2*cols), tb, bad, rows, cols)
		})
	}

	// What must refuse bfloat16 buffers or mismatched host slices.
	h4, f4, i4 := s.alloc(backend.BFloat16, 4), s.f32(make([]float32, 4)), s.i32(make([]int32, 4))
	s.expectShapeErr("Fill of a bfloat16 buffer", func() error { return s.b.Fill(h4, 1) })
	s.expectShapeErr("Gemm with a bfloat16 operand", func() error { return s.b.Gemm(false, false, 2, 2, 2, 1, h4, f4, 0, f4) })
	s.expectShapeErr("Axpby into a bfloat16 buffer", func() error { return s.b.Axpby(h4, 1, f4, 1, f4) })
	s.expectShapeErr("Upload of []uint16 into float32", func() error { return s.b.Upload(f4, make([]uint16, 4)) })
	s.expectShapeErr("Upload of []float32 into bfloat16", func() error { return s.b.Upload(h4, make([]float32, 4)) })
	s.expectShapeErr("Download of bfloat16 into []float32", func() error { return s.b.Download(make([]float32, 4), h4) })
	s.expectShapeErr("Convert of int32", func() error { return s.b.Convert(h4, i4) })
	s.expectShapeErr("Convert into int32", func() error { return s.b.Convert(i4, f4) })
	s.expectShapeErr("Convert of another length", func() error { return s.b.Convert(s.alloc(backend.BFloat16, 3), f4) })
	s.expectShapeErr("Convert of nil", func() error { return s.b.Convert(h4, nil) })
	s.expectShapeErr("Copy between bfloat16 and float32", func() error { return s.b.Copy(h4, f4) })
	s.expectShapeErr("GatherRows into int32", func() error {
		return s.b.GatherRows(s.outI32(4), h4, s.i32([]int32{0}), 1, 4)
	})
	s.expectShapeErr("GatherRows from a short bfloat16 table", func() error {
		return s.b.GatherRows(s.out(4), h4, s.i32([]int32{0}), 2, 4)
	})
}
