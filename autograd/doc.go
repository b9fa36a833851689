// Package autograd is a tape-based reverse-mode automatic differentiation
// engine over a backend.Backend.
//
// Each op computes its forward result with back-end primitives and appends
// a backward closure to the Tape. Dense: MatMul, AddBias, Add, Mul
// (elementwise), Scale, Reshape, Activation (ReLU, LeakyReLU, ELU),
// Dropout, GatherRows, LogSoftmax, NLLLoss, BCEWithLogits, and
// BiasActDropout (add, bias, ReLU and dropout as one op: one pass each
// way on back ends with backend.Fused, no mask stored). Graph: SpMM (sum, constant or learned per-edge
// weights, multi-head), SDDMM (dot, add), EdgeSoftmax. Sparse input:
// SparseDropout and SparseMatMul (X*W for a sparse feature matrix X, the
// cheap first layer for bag-of-words features). Constants from bfloat16
// storage (backend.BFloat16 feature tables): Widen, GatherConst.
// Tape.Backward(loss) seeds d(loss)/d(loss) = 1 and runs the
// closures in reverse order; since ops are recorded in execution order, the
// reversed tape is a valid topological order, as in micrograd.
//
// Gradients accumulate: every backward closure adds its contribution into
// the input's Grad buffer (allocated lazily, zero on first use, then
// accumulated with Axpby or a Gemm with beta = 1), so a Var used twice gets
// the sum of both contributions. A Var used by one op only takes over that
// op's gradient buffer where the gradient passes through unchanged (Add,
// AddBias, BiasActDropout): no copy. Leaf Vars made by Tape.Leaf with a gradient
// buffer (model parameters) accumulate into that buffer across steps until
// the optimizer zeroes it.
//
// Device memory is not seen by Go's garbage collector, so the tape owns
// every buffer it allocates (op outputs, gradients, masks, temporaries) and
// Tape.Release frees them all; call it once per training step after the
// optimizer step (or after reading an evaluation's outputs).
//
// No op panics on bad input: shapes are checked and errors name the op.
package autograd
