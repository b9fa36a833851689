package rng

import "math/bits"

// Derive folds a list of integers into one key by chaining Hash:
// Derive(k, a, b) == Hash(Hash(k+Golden, a)+Golden, b). Samplers use it to
// name a stream by (seed, epoch, batch, layer, node), so each stream is a
// pure function of those integers. Adding Golden keeps all-zero inputs away
// from Hash's fixed point Hash(0, 0) == 0.
func Derive(key uint64, parts ...uint64) uint64 {
	for _, p := range parts {
		key = Hash(key+Golden, p)
	}
	return key
}

// Golden is the splitmix64 increment, 2^64 / phi rounded to odd.
const Golden uint64 = golden

// Below maps a random word h to [0, n) by the multiply-high method
// (Lemire 2019) without rejection: floor(h*n / 2^64). Its bias is below
// n / 2^64, i.e. under 2^-32 for any n < 2^32. n must be > 0. In CUDA C this
// is __umul64hi(h, n).
func Below(h, n uint64) uint64 {
	hi, _ := bits.Mul64(h, n)
	return hi
}

// Stream draws Hash(Key, Ctr), Hash(Key, Ctr+1), ... . It is a plain value:
// copy it to fork, and do not share one between goroutines.
type Stream struct {
	Key uint64
	Ctr uint64
}

// NewStream returns the stream of key, starting at counter 0.
func NewStream(key uint64) Stream { return Stream{Key: key} }

// Uint64 returns the next random word.
func (s *Stream) Uint64() uint64 {
	h := Hash(s.Key, s.Ctr)
	s.Ctr++
	return h
}

// Below returns a uniform integer in [0, n) (see the function Below); n
// must be > 0.
func (s *Stream) Below(n uint64) uint64 { return Below(s.Uint64(), n) }

// Uniform01 returns the next float32 uniform on [0, 1).
func (s *Stream) Uniform01() float32 {
	return float32(s.Uint64()>>40) * (1.0 / (1 << 24))
}

// OpenFloat64 returns the next float64 uniform on (0, 1]: 53 random bits,
// never 0, so -log of it is finite (exponential variates).
func (s *Stream) OpenFloat64() float64 {
	return float64(s.Uint64()>>11+1) * (1.0 / (1 << 53))
}
