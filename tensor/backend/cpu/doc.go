// Package cpu is the host back end: every backend.Backend primitive on Go
// slices, parallel over rows with plain goroutines. It registers the device
// kind "cpu" (backend.Open("cpu")).
//
// # Determinism
//
// Results are bit-identical for any GOMAXPROCS. Work is split into chunks
// whose boundaries depend only on the problem shape; each output element is
// written by exactly one goroutine, and every sum runs in a fixed order:
//   - reductions (Sum, SumRows) sum fixed-size chunks in float64 and combine
//     the partial sums in chunk order;
//   - ScatterAddRows buckets the indices by destination with a stable
//     counting sort, then sums each destination in the original order;
//   - the transposed sparse product (A^T x, used by backward passes) runs on
//     a transpose of A built once per Sparse (lazily, thread-safe), as a
//     row-parallel gather-sum in the original edge order.
//
// GEMM uses OpenBLAS's cblas_sgemm when internal/openblas finds the library
// and gonum's pure-Go Sgemm otherwise; Options.Gemm forces either. gonum is
// deterministic for a fixed shape. OpenBLAS is deterministic for a fixed
// shape and OpenBLAS thread count (OPENBLAS_NUM_THREADS, default the number
// of cores), independent of GOMAXPROCS; the two implementations differ from
// each other in the last bits, so a machine with OpenBLAS and one without
// do not produce identical runs. Use GemmGo (or pin OPENBLAS_NUM_THREADS)
// where bit-identical results across machines matter.
//
// All methods are safe for concurrent use; a Sparse may be shared by
// concurrent calls. Free and FreeSparse must not race with calls using the
// same buffer.
//
// # Host access
//
// Buffers are host slices; F32, I32 and I64 return them without copying, and
// WrapF32 etc. turn a host slice into a Buffer, so host code never needs
// Upload/Download on this back end. Bytes views a buffer as bytes and
// WrapBytes makes one over bytes (both without copying): the host
// collectives of package comm take CPU buffers through them.
package cpu
