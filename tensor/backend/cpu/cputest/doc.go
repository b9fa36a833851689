// Package cputest holds CPU back ends instrumented for tests of the
// packages above the back ends.
//
// FamilyCounting counts dense-product families as the CUDA back end's
// pinned cuBLASLt products do, so that a CPU test can check that a
// warm-up meets every family a run will use (docs/cuda.md, Pinned GEMM
// algorithms) without a GPU.
package cputest
