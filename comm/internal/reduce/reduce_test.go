package reduce

import (
	"math"
	"testing"
	"unsafe"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// bytesOf views a typed slice as bytes, as the transports hand them over.
func bytesOf[T float32 | int32 | int64](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

func bytesF(s []float32) []byte { return bytesOf(s) }

func TestAddAndFinish(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 17, 100} {
		a, b := make([]float32, n), make([]float32, n)
		want := make([]float32, n)
		for i := range a {
			a[i], b[i] = float32(i)*0.5, float32(n-i)*0.25
			want[i] = (a[i] + b[i]) / 3
		}
		Into(backend.Float32, comm.Mean, bytesF(a), bytesF(b))
		Finish(backend.Float32, comm.Mean, bytesF(a), 3)
		for i := range a {
			if a[i] != want[i] {
				t.Fatalf("n=%d [%d] = %v, want %v", n, i, a[i], want[i])
			}
		}
	}
	x := []int64{-7, 7, math.MaxInt64}
	y := []int64{0, 0, 1}
	Into(backend.Int64, comm.Mean, bytesOf(x), bytesOf(y))
	Finish(backend.Int64, comm.Mean, bytesOf(x), 2)
	if x[0] != -3 || x[1] != 3 || x[2] != math.MinInt64/2 {
		t.Fatalf("int64 mean = %v, want [-3 3 %d] (truncation, wrap)", x, math.MinInt64/2)
	}
}

func TestMax(t *testing.T) {
	nan := float32(math.NaN())
	a := []float32{1, 5, nan, 2, -3}
	b := []float32{2, 4, 1, nan, -4}
	dst := make([]float32, len(a))
	Into3(backend.Float32, comm.Max, bytesF(dst), bytesF(a), bytesF(b))
	want := []float32{2, 5, nan, nan, -3}
	for i := range want {
		if got := dst[i]; got != want[i] && !(got != got && want[i] != want[i]) {
			t.Fatalf("[%d] = %v, want %v", i, got, want[i])
		}
	}
	ia, ib := []int32{-1, 9, 3}, []int32{-2, 10, 3}
	Into(backend.Int32, comm.Max, bytesOf(ia), bytesOf(ib))
	if ia[0] != -1 || ia[1] != 10 || ia[2] != 3 {
		t.Fatalf("int32 max = %v", ia)
	}
}

func BenchmarkAddF32(b *testing.B) {
	const n = 1 << 18
	x, y := make([]float32, n), make([]float32, n)
	b.SetBytes(n * 4)
	for b.Loop() {
		Into(backend.Float32, comm.Sum, bytesF(x), bytesF(y))
	}
}
