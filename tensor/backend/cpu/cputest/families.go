package cputest

import (
	"math/bits"
	"sync"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// FamilyCounting is a CPU back end that counts product families as the
// CUDA back end's pinned products do (internal/cublas Pinned): a key is
// a product's transposes, types and the power-of-two bucket of m, n and
// k; a key no family covers starts one, which covers every key that
// differs from it in one bucket; while warming, every key not a center
// yet starts one too. It implements backend.ProductFamilies. Pointer
// alignments, part of the CUDA key, are not modeled.
type FamilyCounting struct {
	*cpu.Backend
	mu       sync.Mutex
	covered  map[[6]int]bool
	centers  map[[6]int]bool
	families int
	warming  bool
}

// NewFamilyCounting wraps b.
func NewFamilyCounting(b *cpu.Backend) *FamilyCounting {
	return &FamilyCounting{Backend: b, covered: map[[6]int]bool{}, centers: map[[6]int]bool{}}
}

// Gemm counts the product's family, then computes it.
func (f *FamilyCounting) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b backend.Buffer, beta float32, c backend.Buffer) error {
	bucket := func(x int) int { return bits.Len(uint(max(x, 1) - 1)) }
	key := [6]int{btoi(transA)*2 + btoi(transB), int(a.DType()), int(c.DType()), bucket(m), bucket(n), bucket(k)}
	f.mu.Lock()
	if !f.covered[key] || (f.warming && !f.centers[key]) {
		f.families++
		f.centers[key] = true
		for d := 3; d < 6; d++ {
			for e := range 25 {
				x := key
				x[d] = e
				f.covered[x] = true
			}
		}
	}
	f.mu.Unlock()
	return f.Backend.Gemm(transA, transB, m, n, k, alpha, a, b, beta, c)
}

// WarmProducts turns warming on or off (backend.ProductFamilies).
func (f *FamilyCounting) WarmProducts(on bool) {
	f.mu.Lock()
	f.warming = on
	f.mu.Unlock()
}

// ProductFamilies returns the families counted; no fallbacks.
func (f *FamilyCounting) ProductFamilies() (families, fallbacks int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.families, 0, true
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

var _ backend.ProductFamilies = (*FamilyCounting)(nil)
