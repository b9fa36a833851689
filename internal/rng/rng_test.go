package rng

import (
	"math"
	"testing"
)

// splitmix64 is the textbook generator; its k-th output for state s equals
// the finalizer of s + k*golden. With seed 0, Hash(0, k) must equal the
// finalizer of k*golden, i.e. the k-th splitmix64 output from state 0
// (first output is for k = 1).
func splitmix64(state *uint64) uint64 {
	*state += golden
	z := *state
	z = (z ^ (z >> 30)) * mix1
	z = (z ^ (z >> 27)) * mix2
	return z ^ (z >> 31)
}

func TestHashMatchesSplitmix64(t *testing.T) {
	var s uint64
	for k := uint64(1); k <= 1000; k++ {
		want := splitmix64(&s)
		if got := Hash(0, k); got != want {
			t.Fatalf("Hash(0,%d) = %#x, want %#x", k, got, want)
		}
	}
	// Published first output of splitmix64 seeded with 0.
	if got := Hash(0, 1); got != 0xE220A8397B1DCDAF {
		t.Fatalf("Hash(0,1) = %#x, want 0xE220A8397B1DCDAF", got)
	}
}

func TestUniform01RangeAndMean(t *testing.T) {
	const n = 200000
	var sum float64
	for i := uint64(0); i < n; i++ {
		u := Uniform01(42, i)
		if u < 0 || u >= 1 {
			t.Fatalf("Uniform01(42,%d) = %v out of [0,1)", i, u)
		}
		if u != float32(math.Ldexp(float64(Hash(42, i)>>40), -24)) {
			t.Fatalf("Uniform01(42,%d) = %v is not top 24 bits / 2^24", i, u)
		}
		sum += float64(u)
	}
	mean := sum / n
	// Standard error of the mean is 1/sqrt(12n) ~ 6.5e-4; allow 6 sigma.
	if math.Abs(mean-0.5) > 0.004 {
		t.Fatalf("mean %v too far from 0.5", mean)
	}
	if Uniform01(1, 7) == Uniform01(2, 7) && Uniform01(1, 8) == Uniform01(2, 8) {
		t.Fatalf("different seeds give the same stream")
	}
}

func TestDropUniform(t *testing.T) {
	const n = 200000
	var sum float64
	for i := uint64(0); i < n; i++ {
		u := DropUniform(42, i)
		want := float32(math.Ldexp(float64((Hash(42, i/4)>>(16*(i%4)))&0xffff), -16))
		if u != want {
			t.Fatalf("DropUniform(42,%d) = %v, want quarter %d of Hash(42,%d) / 2^16 = %v", i, u, i%4, i/4, want)
		}
		if u < 0 || u >= 1 {
			t.Fatalf("DropUniform(42,%d) = %v out of [0,1)", i, u)
		}
		sum += float64(u)
	}
	if mean := sum / n; math.Abs(mean-0.5) > 0.004 {
		t.Fatalf("mean %v too far from 0.5", mean)
	}
	// The four quarters of a hash are not copies of each other.
	if DropUniform(3, 0) == DropUniform(3, 1) && DropUniform(3, 1) == DropUniform(3, 2) {
		t.Fatalf("quarters of one hash equal")
	}
	// A keep rate: p = 0.5 keeps about half.
	kept := 0
	for i := uint64(0); i < n; i++ {
		if DropUniform(9, i) >= 0.5 {
			kept++
		}
	}
	if f := float64(kept) / n; math.Abs(f-0.5) > 0.01 {
		t.Fatalf("p 0.5 kept %.4f of the elements", f)
	}
}
