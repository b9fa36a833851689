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
// Only the 32-bit-integer interface (blasint = int32, Debian's libopenblas0)
// is supported; dimensions above 2^31-1 are rejected.
//
// Determinism: OpenBLAS splits sgemm over its threads by blocks of C's rows
// and columns, never along k, so every element of C is summed in the same
// order for a fixed problem shape and library build; results do not depend
// on Go's GOMAXPROCS. The thread count is left at OpenBLAS's default
// (OPENBLAS_NUM_THREADS or the number of cores); Threads reports it.
package openblas
