// Package rng provides a counter-based random number generator: the value
// for (seed, counter) is a pure function of both, so a random mask over n
// elements can be drawn in any order, by any number of threads or on any
// device, and always comes out the same.
//
// The mixing function is the splitmix64 finalizer applied to
// seed ^ counter*0x9E3779B97F4A7C15. It is small enough to be written again,
// bit for bit, in a CUDA kernel:
//
//	z = seed ^ (counter * 0x9E3779B97F4A7C15)
//	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//	return z ^ (z >> 31)
//
// Uniform01 keeps the top 24 bits, so every value is an exact float32 in
// [0, 1) on a grid of 2^-24.
//
// Derive folds several integers (seed, epoch, batch, layer, node) into one
// key by chaining Hash, and a Stream draws Hash(key, 0), Hash(key, 1), ...
// from it; Below maps a word to [0, n) by a multiply-high. These are the
// pieces the CPU samplers use; this is not a cryptographic generator.
package rng
