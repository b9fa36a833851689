// Package openblas loads OpenBLAS's cblas_sgemm at run time through purego
// (no cgo). It is optional: when no library loads, Available reports false
// and callers fall back to a pure-Go GEMM (the CPU back end uses gonum).
//
// Search order (first that opens and exports cblas_sgemm wins):
//
//  1. $STRATA_OPENBLAS: a library file or a folder holding libopenblas.so.0;
//     the values "off", "none" or "0" disable OpenBLAS altogether.
//  2. The sonames libopenblas.so.0 and libopenblas.so (the loader path).
//  3. Debian/Ubuntu folders: /usr/lib/<triplet>/{openblas-pthread,
//     openblas-openmp,openblas-serial,}/ and /usr/lib, /usr/lib64,
//     /usr/local/lib, /opt/OpenBLAS/lib.
//
// Kernel choice: OpenBLAS picks its kernels from the CPU's vendor and model
// number, and under hypervisors that hide the model it falls back to slow
// generic ones. Unless OPENBLAS_CORETYPE is already set, the loader sets it
// for the duration of the load from the CPU's feature flags (SkylakeX for
// AVX-512, Haswell for AVX2+FMA, on amd64); CoreName reports the choice.
//
// Only the 32-bit-integer interface (blasint = int32, Debian's libopenblas0)
// is supported; dimensions above 2^31-1 are rejected.
//
// Determinism: for a fixed problem shape, library build and thread count,
// cblas_sgemm returns identical bits on every call (OpenBLAS partitions C
// among its threads and every thread sums its elements in a fixed order).
// Results do not depend on Go's GOMAXPROCS. They may differ in the last bit
// between thread counts, since OpenBLAS adapts its blocking to the number of
// threads: for bit-identical runs across machines set OPENBLAS_NUM_THREADS
// (or call SetThreads), or use the pure-Go GEMM. The thread count is left at
// OpenBLAS's default (OPENBLAS_NUM_THREADS or the number of cores); Threads
// reports it.
package openblas
