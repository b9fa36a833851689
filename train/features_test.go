package train

import (
	"math"
	"runtime"
	"testing"
)

// MostlyZero and the sign check scan in parallel chunks and may stop
// early; their answers must be those of a plain count for any number of
// CPUs, at the threshold's edge too.
func TestFeatureScansParallel(t *testing.T) {
	const n = 1 << 20 // 16 blocks: several chunks
	quarter := n / 4
	for _, tc := range []struct {
		name    string
		nonZero int  // the first nonZero values are 1, the rest 0
		want    bool // MostlyZero
	}{
		{"none", 0, true},
		{"a quarter less one", quarter - 1, true},
		{"a quarter", quarter, false},
		{"all", n, false},
	} {
		x := make([]float32, n)
		for i := range tc.nonZero {
			// Spread over the whole slice so that every chunk counts some.
			x[(i*7919)%n] = 1
		}
		for _, procs := range []int{1, 3, 8} {
			old := runtime.GOMAXPROCS(procs)
			got := MostlyZero(x)
			runtime.GOMAXPROCS(old)
			if got != tc.want {
				t.Errorf("%s, GOMAXPROCS %d: MostlyZero = %v, want %v", tc.name, procs, got, tc.want)
			}
		}
	}
	for _, tc := range []struct {
		name string
		at   int
		v    float32
		want bool
	}{
		{"all zero", -1, 0, true},
		{"negative last", n - 1, -1e-30, false},
		{"NaN first", 0, float32(math.NaN()), false},
		{"negative zero", n / 2, float32(math.Copysign(0, -1)), true},
	} {
		x := make([]float32, n)
		if tc.at >= 0 {
			x[tc.at] = tc.v
		}
		for _, procs := range []int{1, 3, 8} {
			old := runtime.GOMAXPROCS(procs)
			got := nonNegative(x)
			runtime.GOMAXPROCS(old)
			if got != tc.want {
				t.Errorf("%s, GOMAXPROCS %d: nonNegative = %v, want %v", tc.name, procs, got, tc.want)
			}
		}
	}
	// No values: not under a quarter of none (the serial count's
	// answer), and none negative.
	if MostlyZero(nil) || !nonNegative(nil) {
		t.Error("empty features: want MostlyZero false and nonNegative true")
	}
}

// TestGatherRowsParts checks the parallel row gather over several
// blocks against the rows themselves, repeats and reverse order included.
func TestGatherRowsParts(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	const n, c = 1000, 3
	x := make([]float32, n*c)
	for i := range x {
		x[i] = float32(i) + 0.5
	}
	rows := make([]int32, 3*scanBlock+11)
	for i := range rows {
		rows[i] = int32((len(rows) - i) * 7 % n)
	}
	got := gatherRows(x, c, rows)
	if len(got) != len(rows)*c {
		t.Fatalf("%d values for %d rows of %d", len(got), len(rows), c)
	}
	for i, v := range rows {
		for j := 0; j < c; j++ {
			if want := float32(int(v)*c+j) + 0.5; got[i*c+j] != want {
				t.Fatalf("row %d (node %d) column %d = %v, want %v", i, v, j, got[i*c+j], want)
			}
		}
	}
}
