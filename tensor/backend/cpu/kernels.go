package cpu

import "gonum.org/v1/gonum/blas/gonum"

// Inner loops of the sparse and indexing kernels. Rows of width 16 and
// more go through gonum's assembly kernels (SSE on amd64); the result is
// still a pure function of the inputs and the row width, so determinism
// is unaffected.

const asmMin = 16

// addTo computes d += s (len(s) >= len(d)).
func addTo(d, s []float32) {
	if len(d) >= asmMin {
		gonum.Implementation{}.Saxpy(len(d), 1, s, 1, d, 1)
		return
	}
	s = s[:len(d)]
	for c, v := range s {
		d[c] += v
	}
}

// axpy computes d += a*s (len(s) >= len(d)).
func axpy(d []float32, a float32, s []float32) {
	if len(d) >= asmMin {
		gonum.Implementation{}.Saxpy(len(d), a, s, 1, d, 1)
		return
	}
	s = s[:len(d)]
	for i, v := range s {
		d[i] += a * v
	}
}

// dot returns sum_i a[i]*b[i] accumulated in float32 (len(b) >= len(a)).
func dot(a, b []float32) float32 {
	if len(a) >= asmMin {
		return gonum.Implementation{}.Sdot(len(a), a, 1, b, 1)
	}
	b = b[:len(a)]
	var acc float32
	for i, x := range a {
		acc += x * b[i]
	}
	return acc
}
