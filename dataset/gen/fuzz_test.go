package gen

import (
	"errors"
	"testing"
)

// FuzzGenerate feeds arbitrary configurations: Validate must reject or
// accept without panicking, and an accepted small one must generate a
// dataset that keeps every promise of the package doc.
func FuzzGenerate(f *testing.F) {
	f.Add(uint64(1), int64(2000), 10.0, 150.0, 2.5, 5, 0.0, 0.75, 16, 3.0, 0.3, 0.2, 0.5)
	f.Add(uint64(9), int64(1), 0.5, 1.0, 1.01, 1, 2.0, 1.0, 1, 0.0, 1.0, 0.0, 0.0)
	f.Add(uint64(3), int64(300), 299.0, 300.0, 10.0, 300, 1.0, 0.0, 3, 1000.0, 0.0, 0.0, 1.0)
	f.Add(uint64(4), int64(-1), -1.0, 0.0, 0.0, 0, -1.0, 2.0, -1, -1.0, -1.0, 2.0, 0.5)
	f.Fuzz(func(t *testing.T, seed uint64, n int64, avg, maxDeg, exp float64, classes int, skew, homo float64,
		dim int, noise, tr, va, te float64) {
		c := Config{Name: "fuzz", Seed: seed, NumNodes: n, AvgDegree: avg, MaxDegree: maxDeg, Exponent: exp,
			NumClasses: classes, ClassSkew: skew, Homophily: homo, FeatDim: dim, Noise: noise,
			TrainFrac: tr, ValFrac: va, TestFrac: te}
		if err := c.Validate(); err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Validate error %v is not a *ConfigError", err)
			}
			return
		}
		if n > 5000 || avg > 50 || dim > 64 {
			return // valid but too slow for a fuzz iteration
		}
		d, err := Generate(c, nil)
		if err != nil {
			t.Fatalf("Generate of a valid config: %v", err)
		}
		checkGraph(t, d)
	})
}
