package cuda

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestCopyParallel: every byte arrives, for lengths under one piece,
// at the pieces' edges and past the goroutines' count, and nothing
// past the end is written.
func TestCopyParallel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, copyPiece - 1, 2 * copyPiece, 2*copyPiece + 3, copyGoroutines * copyPiece, 9*copyPiece + 7} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		dst := make([]byte, n+16)
		for i := range dst {
			dst[i] = 0xAB
		}
		copyParallel(dst[:n], src)
		if !bytes.Equal(dst[:n], src) {
			t.Fatalf("n %d: copy differs", n)
		}
		for i, b := range dst[n:] {
			if b != 0xAB {
				t.Fatalf("n %d: byte %d past the end written", n, n+i)
			}
		}
	}
}
