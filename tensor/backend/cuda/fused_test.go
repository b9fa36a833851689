package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func sameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] == 0 && want[i] == 0) {
			t.Fatalf("%s: element %d: %v, want %v", name, i, got[i], want[i])
		}
	}
}

// TestBiasAct compares the fused kernel with a host computation in the
// same order (exact: only additions) and with the unfused back-end ops,
// with and without b and ReLU, and with dst aliasing a or b.
func TestBiasAct(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, shape := range [][2]int{{1, 1}, {7, 47}, {1000, 100}, {333, 256}} {
		rows, cols := shape[0], shape[1]
		n := rows * cols
		av, bv, biasv := randF32(r, n), randF32(r, n), randF32(r, cols)
		for _, withB := range []bool{false, true} {
			for _, relu := range []bool{false, true} {
				for _, alias := range []string{"none", "a", "b"} {
					if alias == "b" && !withB {
						continue
					}
					want := make([]float32, n)
					for i := range want {
						v := av[i]
						if withB {
							v = v + bv[i]
						}
						v = v + biasv[i%cols]
						if relu {
							v = max(v, 0)
						}
						want[i] = v
					}
					a, bias := upload(t, d, backend.Float32, av), upload(t, d, backend.Float32, biasv)
					var b backend.Buffer
					if withB {
						b = upload(t, d, backend.Float32, bv)
					}
					dst := backend.Buffer(nil)
					switch alias {
					case "a":
						dst = a
					case "b":
						dst = b
					default:
						dst, _ = d.AllocRaw(backend.Float32, n)
					}
					must(t, d.BiasAct(dst, a, b, bias, rows, cols, relu))
					sameBits(t, "BiasAct", download[float32](t, d, dst), want)

					// The unfused sequence gives the same bits.
					a2 := upload(t, d, backend.Float32, av)
					if withB {
						b2 := upload(t, d, backend.Float32, bv)
						must(t, d.Axpby(a2, 1, a2, 1, b2))
						d.Free(b2)
					}
					must(t, d.AddRowVector(a2, a2, bias, rows, cols))
					if relu {
						must(t, d.Unary(backend.ReLU, 0, a2, a2))
					}
					sameBits(t, "unfused", download[float32](t, d, a2), want)
					for _, x := range []backend.Buffer{a, b, bias, a2} {
						d.Free(x)
					}
					if alias == "none" {
						d.Free(dst)
					}
				}
			}
		}
	}
	x, _ := d.Alloc(backend.Float32, 6)
	defer d.Free(x)
	var se *backend.ShapeError
	if err := d.BiasAct(x, x, nil, x, 2, 3, true); !errors.As(err, &se) {
		t.Errorf("bias of 6 for 3 columns: %v", err)
	}
	if err := d.BiasAct(x, x, nil, x.(*Buffer).View(0, 3), 3, 3, true); !errors.As(err, &se) {
		t.Errorf("3 x 3 of 6: %v", err)
	}
}

// TestReLUMaskScale compares with the host and with UnaryBackward(ReLU)
// followed by Axpby scaling, dst aliasing dy or y.
func TestReLUMaskScale(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(5, 6))
	const n = 100003
	dyv, yv := randF32(r, n), randF32(r, n)
	for i := 0; i < n; i += 7 {
		yv[i] = 0 // the derivative at 0 is 0
	}
	for _, scale := range []float32{1, 2, 1 / 0.9} {
		want := make([]float32, n)
		for i := range want {
			if yv[i] > 0 {
				want[i] = dyv[i] * scale
			}
		}
		for _, alias := range []string{"none", "dy", "y"} {
			dy, y := upload(t, d, backend.Float32, dyv), upload(t, d, backend.Float32, yv)
			dst := backend.Buffer(nil)
			switch alias {
			case "dy":
				dst = dy
			case "y":
				dst = y
			default:
				dst, _ = d.AllocRaw(backend.Float32, n)
			}
			must(t, d.ReLUMaskScale(dst, dy, y, scale))
			sameBits(t, "ReLUMaskScale", download[float32](t, d, dst), want)
			d.Free(dy)
			d.Free(y)
			if alias == "none" {
				d.Free(dst)
			}
		}
		dy, y := upload(t, d, backend.Float32, dyv), upload(t, d, backend.Float32, yv)
		must(t, d.UnaryBackward(backend.ReLU, 0, dy, y, y, dy))
		must(t, d.Axpby(dy, scale, dy, 0, dy))
		sameBits(t, "unfused", download[float32](t, d, dy), want)
		d.Free(dy)
		d.Free(y)
	}
	x, _ := d.Alloc(backend.Float32, 6)
	defer d.Free(x)
	var se *backend.ShapeError
	if err := d.ReLUMaskScale(x, x.(*Buffer).View(0, 5), x, 1); !errors.As(err, &se) {
		t.Errorf("dy of 5 for 6: %v", err)
	}
}
