package infer

import (
	"math/rand/v2"
	"testing"
)

// TestGatherRowsParallel checks the split host gather against row-by-row
// copies, for sizes below, at and above the split threshold.
func TestGatherRowsParallel(t *testing.T) {
	const width, nrows = 5, 3000
	rows := make([]float32, nrows*width)
	for i := range rows {
		rows[i] = float32(i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 4095, 4096, 4097, 20011} {
		for _, workers := range []int{1, 3, 8} {
			src := make([]int32, n)
			for i := range src {
				src[i] = int32(rng.IntN(nrows))
			}
			got := make([]float32, n*width)
			for i := range got {
				got[i] = -1
			}
			gatherRows(got, rows, src, width, workers)
			for i, u := range src {
				for c := range width {
					if want := rows[int(u)*width+c]; got[i*width+c] != want {
						t.Fatalf("n=%d workers=%d: row %d col %d = %v, want %v", n, workers, i, c, got[i*width+c], want)
					}
				}
			}
		}
	}
}
