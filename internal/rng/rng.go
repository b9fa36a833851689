package rng

const (
	golden = 0x9E3779B97F4A7C15
	mix1   = 0xBF58476D1CE4E5B9
	mix2   = 0x94D049BB133111EB
)

// Hash returns 64 well-mixed bits for (seed, counter).
func Hash(seed, counter uint64) uint64 {
	z := seed ^ (counter * golden)
	z = (z ^ (z >> 30)) * mix1
	z = (z ^ (z >> 27)) * mix2
	return z ^ (z >> 31)
}

// Uniform01 returns a float32 in [0, 1): the top 24 bits of Hash divided by
// 2^24 (exact in float32).
func Uniform01(seed, counter uint64) float32 {
	return float32(Hash(seed, counter)>>40) * (1.0 / (1 << 24))
}

// DropUniform is element i's dropout draw, a float32 in [0, 1): the
// quarter i%4 of Hash(seed, i/4) (16 bits, the lowest for i%4 == 0) over
// 2^16 (exact in float32). Element i is kept iff DropUniform(seed, i) >=
// p. Four consecutive elements share one hash, so a GPU kernel writing 4
// or 8 values a thread hashes once or twice (a hash an element bounds a
// bfloat16 dropout kernel by its integer arithmetic).
func DropUniform(seed, i uint64) float32 {
	return float32(uint16(Hash(seed, i>>2)>>(16*(i&3)))) * (1.0 / (1 << 16))
}
