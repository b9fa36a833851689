// Package backendtest is the conformance suite every compute back end must
// pass, in the manner of gonum's testblas: Run(t, b) checks each primitive
// of backend.Backend through the interface alone (upload inputs, call,
// download outputs), so the CPU and CUDA back ends run the very same tests.
//
// What is checked, per primitive:
//   - values against a float64 reference written here as plain loops, on
//     fresh random inputs (never zeros) of several shapes: 0 rows, 1 row, odd
//     sizes, sizes large enough to run in parallel, several heads, sparse
//     matrices with empty rows and repeated edges, duplicate scatter indices;
//   - outputs are poisoned (NaN) before each call, so an element the back
//     end forgets to write, or an output it reads when it should overwrite
//     (Gemm with beta = 0), shows up;
//   - backward identities: UnaryBackward, LogSoftmaxBackward and
//     EdgeSoftmaxBackward against central finite differences of the float64
//     forward (which is itself checked against the back end), NLLLossBackward
//     against the exact linear change, and the adjoint pairs used by autograd:
//     <Ax, y> = <x, A^T y> for SpMM, Gather/ScatterAdd, ExpandRowsToEdges /
//     EdgeSum, and SDDMM against weighted SpMM;
//   - error paths: wrong lengths, wrong dtypes, nil buffers, bad parameters
//     return a *backend.ShapeError; out-of-range indices return a
//     *backend.IndexError (from the call or from the next Synchronize); no
//     call may panic, and the back end stays usable afterwards;
//   - determinism: the same call twice gives identical bits; with
//     Options.VaryGOMAXPROCS also under several GOMAXPROCS values.
//
// # Tolerance
//
// Results are compared by relative norm, ||out - ref||_2 / ||ref||_2 <= Tol
// (absolute when ref is all zeros), plus an element-wise sanity bound of
// 100*Tol times max(|ref_i|, rms(ref)). The default Tol is 1e-5: float32 has
// a unit round-off of 6e-8, and the longest sums here (k = 256 in Gemm,
// rows of a few dozen edges) accumulate typical relative errors near 1e-6.
// Gemm has its own Options.GemmTol for back ends that use reduced-precision
// tensor cores (TF32 has a 2^-11 round-off: use about 2e-3). Index copies,
// Fill, Copy, Dropout masks and RowDegreeInv must be exact.
//
// Bench* helpers measure dense-product GFLOP/s and SpMM throughput through
// the same interface.
package backendtest
