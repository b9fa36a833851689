package gen

import (
	"math"

	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/internal/rng"
)

// gaussPair turns 64 random bits into two independent standard normals by
// Box-Muller on two 24-bit uniforms (u1 in (0, 1], so the log is finite;
// values are bounded by about 5.8 sigma).
func gaussPair(h uint64) (float64, float64) {
	u1 := float64(h>>40+1) * (1.0 / (1 << 24))
	u2 := float64((h>>16)&0xFFFFFF) * (1.0 / (1 << 24))
	r := math.Sqrt(-2 * math.Log(u1))
	s, c := math.Sincos(2 * math.Pi * u2)
	return r * c, r * s
}

// centroids returns NumClasses random unit vectors of FeatDim entries,
// row-major.
func centroids(cfg *Config) []float32 {
	d, C := cfg.FeatDim, cfg.NumClasses
	out := make([]float32, C*d)
	buf := make([]float64, d+1)
	for k := range C {
		ck := key(cfg.Seed, tagCentroid, uint64(k))
		for j := 0; j < d; j += 2 {
			buf[j], buf[j+1] = gaussPair(rng.Hash(ck, uint64(j/2)))
		}
		var norm float64
		for _, x := range buf[:d] {
			norm += x * x
		}
		norm = math.Sqrt(norm)
		if norm == 0 {
			norm = 1
		}
		for j := range d {
			out[k*d+j] = float32(buf[j] / norm)
		}
	}
	return out
}

// features returns NumNodes x FeatDim values: node u's class centroid plus
// isotropic Gaussian noise of per-dimension deviation Noise/sqrt(FeatDim).
func features(cfg *Config, label []int32, bar *progress.Bar) []float32 {
	d := int64(cfg.FeatDim)
	if d == 0 {
		return nil
	}
	cent := centroids(cfg)
	sigma := cfg.Noise / math.Sqrt(float64(d))
	fSeed := key(cfg.Seed, tagFeature, 0)
	x := make([]float32, cfg.NumNodes*d)
	forChunks(cfg.NumNodes, bar, func(lo, hi int64) {
		for u := lo; u < hi; u++ {
			ukey := rng.Hash(fSeed, uint64(u))
			row := x[u*d : (u+1)*d]
			mu := cent[int64(label[u])*d : int64(label[u]+1)*d]
			for j := int64(0); j < d; j += 2 {
				z0, z1 := gaussPair(rng.Hash(ukey, uint64(j/2)))
				// The float32 conversion rounds explicitly, so no
				// compiler may fuse the multiply and add.
				row[j] = mu[j] + float32(sigma*z0)
				if j+1 < d {
					row[j+1] = mu[j+1] + float32(sigma*z1)
				}
			}
		}
	})
	return x
}

// splits assigns each node to train, val, test or none by one uniform
// draw; the ID lists come out ascending.
func splits(cfg *Config) (train, val, test []int32) {
	n := cfg.NumNodes
	sSeed := key(cfg.Seed, tagSplit, 0)
	a := cfg.TrainFrac
	b := a + cfg.ValFrac
	c := b + cfg.TestFrac
	which := func(u int64) int {
		r := unit(rng.Hash(sSeed, uint64(u)))
		switch {
		case r < a:
			return 0
		case r < b:
			return 1
		case r < c:
			return 2
		}
		return 3
	}
	var cnt [4]int64
	for u := range n {
		cnt[which(u)]++
	}
	out := [3][]int32{make([]int32, 0, cnt[0]), make([]int32, 0, cnt[1]), make([]int32, 0, cnt[2])}
	for u := range n {
		if s := which(u); s < 3 {
			out[s] = append(out[s], int32(u))
		}
	}
	return out[0], out[1], out[2]
}
