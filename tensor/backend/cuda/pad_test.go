package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

// TestPaddedBF16Gemm: products of bfloat16 operands whose A rows are not
// 16-byte aligned (a 100-wide feature row; gemmBF16Padded) equal the
// float64 product of the operands within the float32 sums' tolerance,
// padded and unpadded: A not transposed with B either way, A transposed
// (its padded rows through a scratch C, beta 0 and not), float32 and
// bfloat16 C.
func TestPaddedBF16Gemm(t *testing.T) {
	d := pinnedDevice(t, backend.BF16)
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct {
		transA, transB bool
		m, n, k        int
		beta           float32
		out            backend.DType
	}{
		{false, false, 12000, 256, 100, 0, backend.Float32},
		{false, true, 12000, 256, 100, 1, backend.Float32},
		{false, false, 11000, 47, 100, 0, backend.BFloat16},
		{true, false, 100, 256, 12000, 0, backend.Float32},
		{true, false, 100, 256, 12000, 0.5, backend.Float32},
		{true, true, 47, 64, 30000, 1, backend.BFloat16},
	} {
		name := fmt.Sprintf("transA=%t transB=%t m=%d n=%d k=%d beta=%g %s", c.transA, c.transB, c.m, c.n, c.k, c.beta, c.out)
		if !padWorth(c.transA, c.m, c.k) {
			t.Fatalf("%s: not padded", name)
		}
		rnd := func(n int) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = backend.RoundBF16(float32(r.NormFloat64()))
			}
			return v
		}
		a, b, c0 := rnd(c.m*c.k), rnd(c.k*c.n), rnd(c.m*c.n)
		in := func(dt backend.DType, v []float32) backend.Buffer {
			buf, err := d.Alloc(dt, len(v))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Free(buf) })
			if dt == backend.Float32 {
				err = d.Upload(buf, v)
			} else {
				h := make([]uint16, len(v))
				backend.ToBF16(h, v)
				err = d.Upload(buf, h)
			}
			if err != nil {
				t.Fatal(err)
			}
			return buf
		}
		get := func(buf backend.Buffer) []float32 {
			out := make([]float32, buf.Len())
			if buf.DType() == backend.Float32 {
				if err := d.Download(out, buf); err != nil {
					t.Fatal(err)
				}
				return out
			}
			h := make([]uint16, buf.Len())
			if err := d.Download(h, buf); err != nil {
				t.Fatal(err)
			}
			backend.FromBF16(out, h)
			return out
		}
		ab, bb := in(backend.BFloat16, a), in(backend.BFloat16, b)
		const alpha = 0.75
		run := func(pad bool) []float32 {
			cb := in(c.out, c0)
			d.padBF16 = pad
			defer func() { d.padBF16 = true }()
			if err := d.Gemm(c.transA, c.transB, c.m, c.n, c.k, alpha, ab, bb, c.beta, cb); err != nil {
				t.Fatalf("%s (pad %t): %v", name, pad, err)
			}
			return get(cb)
		}
		padded, plain := run(true), run(false)
		tol := max(1e-4, accumTol(c.k))
		if c.out == backend.BFloat16 {
			tol = 1e-2
		}
		rows := []int{0, c.m - 1}
		for range 30 {
			rows = append(rows, r.IntN(c.m))
		}
		var gotP, gotU []float32
		var want []float64
		c0r := c0
		if c.out == backend.BFloat16 {
			c0r = make([]float32, len(c0))
			for i, v := range c0 {
				c0r[i] = backend.RoundBF16(v)
			}
		}
		for _, i := range rows {
			for j := range c.n {
				var s float64
				for p := range c.k {
					av, bv := a[i*c.k+p], b[p*c.n+j]
					if c.transA {
						av = a[p*c.m+i]
					}
					if c.transB {
						bv = b[j*c.k+p]
					}
					s += float64(av) * float64(bv)
				}
				want = append(want, alpha*s+float64(c.beta)*float64(c0r[i*c.n+j]))
				gotP, gotU = append(gotP, padded[i*c.n+j]), append(gotU, plain[i*c.n+j])
			}
		}
		closeEnough(t, name+" padded", gotP, want, tol)
		closeEnough(t, name+" unpadded", gotU, want, tol)
	}
}
