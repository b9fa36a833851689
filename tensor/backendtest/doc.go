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
// Index copies, Fill, Copy, Dropout masks and RowDegreeInv must be exact.
//
// # Precision
//
// The suite runs at the back end's Precision, with the tolerances stated
// per precision by Tolerances (Options.Tol and GemmTol override them):
//
//	precision  Gemm                  every other primitive
//	fp32       1e-5                  1e-5
//	tf32       4*2^-11 (about 2e-3)  1e-5
//	bf16       4*2^-8 (about 1.6e-2) 1e-5
//
// Only Gemm reduces its precision (it rounds its operands), so only its
// tolerance changes; the Precision subtest also fails a back end whose
// Gemm at tf32 or bf16 is as exact as float32 (the precision ignored),
// and logs the distance from the CPU back end's emulation (operands
// rounded to nearest even). The BFloat16 subtest checks the storage type
// in every precision: memory methods, Convert against package backend's
// rounding bit for bit (ties, subnormals, infinities, NaN), and exact
// widening by GatherRows. The CPU back end runs the suite at all three
// precisions in CI; the CUDA back end on a GPU host
// (TestConformancePrecision).
//
// Bench* helpers measure dense-product GFLOP/s and SpMM throughput through
// the same interface.
package backendtest
