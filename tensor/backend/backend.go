package backend

import "fmt"

// DType is the element type of a Buffer.
type DType uint8

const (
	Float32 DType = iota + 1
	Int32
	Int64
	// BFloat16 is a storage type: the top 16 bits of a float32 (host
	// form []uint16, encoded by BF16Bits). Besides the memory methods
	// and Convert, the primitives of a training step's activations
	// accept it where their docs say (Gemm, Axpby, SumRows, GatherRows,
	// SpMM, Fused): they widen it on read, compute in float32 and round
	// to nearest even on store (see the package doc, # Precision).
	BFloat16
)

// Size returns the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Float32, Int32:
		return 4
	case Int64:
		return 8
	case BFloat16:
		return 2
	}
	return 0
}

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Int32:
		return "int32"
	case Int64:
		return "int64"
	case BFloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Buffer is a flat array of Len() elements of one DType living in a back
// end's memory (host RAM for the CPU back end, device memory for CUDA).
// Buffers are created by Backend.Alloc and returned with Backend.Free;
// freeing is explicit because device memory is not seen by Go's GC.
type Buffer interface {
	Len() int
	DType() DType
}

// Sparse is a back-end resident CSR matrix of NumRows x NumCols: row i holds
// the column indices Indices[Indptr[i]:Indptr[i+1]]. In a message-flow block
// rows are destination nodes and columns are source nodes, so SpMM computes
// out[dst] = sum over incoming edges of w_e * x[src]. Back ends may build and
// cache the transpose lazily (the CPU back end does, for deterministic
// backward passes without atomics).
type Sparse interface {
	NumRows() int
	NumCols() int
	NNZ() int
}

// UnaryOp is an elementwise activation. Alpha parameterizes ELU and LeakyReLU.
type UnaryOp uint8

const (
	ReLU UnaryOp = iota + 1
	LeakyReLU
	ELU
	Exp
	Identity
)

func (o UnaryOp) String() string {
	switch o {
	case ReLU:
		return "relu"
	case LeakyReLU:
		return "leaky_relu"
	case ELU:
		return "elu"
	case Exp:
		return "exp"
	case Identity:
		return "identity"
	}
	return fmt.Sprintf("unary(%d)", uint8(o))
}

// SDDMMOp selects the per-edge combination of SDDMM.
type SDDMMOp uint8

const (
	// SDDMMDot: out[e,h] = sum_d u[i, h*D+d] * v[j, h*D+d].
	SDDMMDot SDDMMOp = iota + 1
	// SDDMMAdd: out[e,h] = u[i,h] + v[j,h] (D must be 1), GAT's attention logits.
	SDDMMAdd
)

// Backend is the set of primitives every compute back end implements. All
// float tensors are row-major matrices stored in flat Buffers; the caller
// passes the shape. Every method validates lengths against the shape it is
// given and returns a *ShapeError (never panics) when they disagree, and
// an *IndexError when an index argument (idx, rows, labels, sparse indices)
// is out of range. A device back end may report an index error from the
// call or, if it checks on the device, from the next synchronizing call.
//
// Outputs that a method overwrites are never read: NaN or garbage in them
// does not leak into the result (Gemm with beta == 0 included).
//
// Writes are to the first argument (out or dst). Unless a method says it
// accumulates, it overwrites. Methods may run asynchronously on devices;
// host-visible results (Download, Sum) synchronize.
//
// The conformance suite in package tensor/backendtest checks every method
// against a float64 reference; a new back end must pass it unchanged.
type Backend interface {
	// Name is the device name, e.g. "cpu" or "cuda:0".
	Name() string
	// Precision is the back end's arithmetic policy, set when it is
	// opened (see the package doc, # Precision): what Gemm rounds its
	// inputs to. Every other primitive computes in float32.
	Precision() Precision

	// --- memory ---

	// Alloc returns a zero-filled buffer of n elements.
	Alloc(dt DType, n int) (Buffer, error)
	// Free returns a buffer to the back end. Freeing nil is a no-op.
	Free(b Buffer)
	// Upload copies host data into dst; src must be []float32, []int32,
	// []int64 or []uint16 (BFloat16 encodings) matching dst's dtype, with
	// len(src) == dst.Len().
	Upload(dst Buffer, src any) error
	// Download copies src into host memory dst (same rules as Upload).
	Download(dst any, src Buffer) error
	// Copy copies src into dst (same dtype and length).
	Copy(dst, src Buffer) error
	// Fill sets every float32 element of dst to v.
	Fill(dst Buffer, v float32) error
	// Convert copies src into dst of the same length, one Float32 and
	// the other BFloat16 (or both of one of those types: a Copy):
	// float32 to bfloat16 rounds to nearest, ties to even (BF16Bits),
	// bfloat16 to float32 is exact.
	Convert(dst, src Buffer) error

	// --- dense ---

	// Gemm computes C = alpha*op(A)*op(B) + beta*C with C m x n, op(A) m x k,
	// op(B) k x n, all row-major. op(X) is X^T when the trans flag is set
	// (then A is stored k x m, B is stored n x k). With beta == 0, C is
	// not read (BLAS semantics); with k == 0, C = beta*C.
	// A and B are both Float32 or both BFloat16 (bfloat16 operands:
	// products exact, sums in float32); C is Float32, or BFloat16 with
	// bfloat16 A and B (the float32 result rounded on store).
	Gemm(transA, transB bool, m, n, k int, alpha float32, a, b Buffer, beta float32, c Buffer) error

	// --- elementwise (n = Len of the arguments, which must agree) ---

	// Axpby computes dst = alpha*x + beta*y. dst may alias x or y. The
	// three are Float32, or all BFloat16 (activation gradients).
	Axpby(dst Buffer, alpha float32, x Buffer, beta float32, y Buffer) error
	// Mul computes dst = x * y elementwise. dst may alias x or y.
	Mul(dst, x, y Buffer) error
	// AddRowVector computes dst[r,c] = x[r,c] + v[c] for an rows x cols x.
	AddRowVector(dst, x, v Buffer, rows, cols int) error
	// Unary computes dst = op(x) with parameter alpha.
	Unary(op UnaryOp, alpha float32, dst, x Buffer) error
	// UnaryBackward computes dx = dy * op'(x); y = op(x) is passed so
	// back ends may use whichever is cheaper. At x == 0 the derivative of
	// ReLU, LeakyReLU and ELU is taken from the left (0, alpha, alpha), as
	// in PyTorch. Exp: op' = y. dx may alias dy.
	UnaryBackward(op UnaryOp, alpha float32, dx, x, y, dy Buffer) error
	// Dropout draws a mask with keep probability 1-p from a counter-based
	// generator keyed by (seed, element index), so the mask depends only on
	// the seed, never on threads or devices: mask = keep/(1-p) or 0, and
	// dst = x * mask. mask is written for the backward pass (Mul).
	// Precisely: element i (flat index) is kept iff
	// rng.DropUniform(seed, i) >= p (package internal/rng), and then
	// mask[i] = 1/(1-p) computed in float32. p must be in [0, 1).
	Dropout(dst, mask, x Buffer, p float32, seed uint64) error

	// --- reductions ---

	// SumRows computes dst[c] = sum_r x[r,c] (bias gradients). Overwrites.
	// x is Float32 or BFloat16; dst is Float32.
	SumRows(dst, x Buffer, rows, cols int) error
	// Sum returns the sum of all elements of the float32 buffer x as
	// float64 (synchronizes).
	Sum(x Buffer) (float64, error)
	// ArgmaxRows writes, for each row of x (rows x cols), the column of its
	// largest element into the int32 buffer dst. Ties go to the lowest
	// column; cols must be >= 1 unless rows == 0. NaN ordering unspecified.
	ArgmaxRows(dst, x Buffer, rows, cols int) error

	// --- loss ---

	// LogSoftmax computes row-wise log-softmax of x (rows x cols).
	LogSoftmax(dst, x Buffer, rows, cols int) error
	// LogSoftmaxBackward: dx = dy - exp(y) * rowsum(dy), y = LogSoftmax(x).
	LogSoftmaxBackward(dx, y, dy Buffer, rows, cols int) error
	// NLLLoss returns -(1/len(rows)) * sum_i logp[rows[i], labels[i]] where
	// rows and labels are int32 buffers of equal length (rows index logp's
	// rows; labels are classes in [0, cols)). Synchronizes.
	// With len(rows) == 0 the loss is 0.
	NLLLoss(logp, rows, labels Buffer, nrows, cols int) (float64, error)
	// NLLLossBackward writes dlogp: zero everywhere except
	// dlogp[rows[i], labels[i]] = -scale/len(rows). Overwrites dlogp.
	// A (row, label) pair listed twice accumulates (-2*scale/len(rows)),
	// which is the exact gradient of NLLLoss times scale.
	NLLLossBackward(dlogp, rows, labels Buffer, nrows, cols int, scale float32) error

	// --- indexing ---

	// GatherRows: dst[i,:] = x[idx[i],:]; x has xrows rows of width cols,
	// idx is int32 of any length (each in [0, xrows)). dst and x are each
	// float32 or BFloat16 (a bfloat16 x is widened exactly, a float32 one
	// rounded into a bfloat16 dst: features stored in bfloat16 cost half
	// the bytes read, and a bfloat16 batch half the bytes written).
	GatherRows(dst, x, idx Buffer, xrows, cols int) error
	// ScatterAddRows: dst[idx[i],:] += src[i,:] (accumulates). src has
	// len(idx) rows; duplicate indices accumulate, summed in the order of i
	// (deterministic, no atomics).
	ScatterAddRows(dst, src, idx Buffer, dstRows, cols int) error

	// --- sparse (message passing over a Sparse block) ---

	// NewSparse uploads a CSR matrix. indptr has rows+1 int64 entries,
	// indices are int32 in [0, cols). Validated.
	NewSparse(rows, cols int, indptr []int64, indices []int32) (Sparse, error)
	// FreeSparse releases a Sparse.
	FreeSparse(s Sparse)
	// SpMM computes out = A * x (or A^T * x when transpose) with H heads:
	// x is (cols x H*D) (or rows x H*D when transposed), out is rows x H*D
	// (or cols x H*D), and edge weight w[e,h] scales head h of edge e's
	// message. w may be nil (all ones, H taken as 1 and D = width).
	// Overwrites out.
	//
	// width is the full row width H*D of x and out (not the per-head D);
	// it must be a multiple of heads. When w is nil, heads must be 1.
	// With transpose, w is still indexed by the edge ids of a (w is nnz x H
	// in a's CSR order), so the backward pass of SpMM reuses the same w.
	// x and out are both Float32 or, with heads == 1, both BFloat16
	// (activations: sums in float32, rounded on store); w is Float32.
	SpMM(out Buffer, a Sparse, transpose bool, x Buffer, w Buffer, heads, width int) error
	// SDDMM computes per-edge values out[e,h] from the destination row
	// features u (rows x H*D) and source features v (cols x H*D), see SDDMMOp.
	// dim is the per-head D; out is nnz x H in a's CSR edge order. For
	// SDDMMAdd dim must be 1.
	SDDMM(op SDDMMOp, out Buffer, a Sparse, u, v Buffer, heads, dim int) error
	// EdgeSum reduces per-edge values e (nnz x H) to nodes: out[i,h] = sum of
	// e over row i's edges, or over column i's edges when transpose.
	// Overwrites out.
	EdgeSum(out Buffer, a Sparse, transpose bool, e Buffer, heads int) error
	// EdgeSoftmax normalizes scores (nnz x H) over each row's edges
	// (numerically stable: the row maximum is subtracted first). Rows with
	// no edges produce nothing. out may alias scores.
	EdgeSoftmax(out Buffer, a Sparse, scores Buffer, heads int) error
	// EdgeSoftmaxBackward: ds = y * (dy - rowsum(y*dy)) per row and head.
	EdgeSoftmaxBackward(ds Buffer, a Sparse, y, dy Buffer, heads int) error
	// RowDegreeInv writes out[i] = 1/max(deg(i),1) for each row (or column
	// when transpose) of a as float32 (used for mean aggregation and GCN).
	RowDegreeInv(out Buffer, a Sparse, transpose bool) error
	// ExpandRowsToEdges writes out[e] = v[row(e)] for every edge e
	// (turns per-destination scales into per-edge weights).
	ExpandRowsToEdges(out Buffer, a Sparse, v Buffer) error

	// --- optimizer ---

	// AdamStep updates param in place (Adam with L2 weight decay added to the
	// gradient, as torch.optim.Adam): g = grad + wd*param; m = b1*m+(1-b1)*g;
	// v = b2*v+(1-b2)*g^2; param -= lr * mhat / (sqrt(vhat)+eps), with bias
	// corrections for step t (1-based). beta1 and beta2 must be in [0, 1)
	// and t >= 1.
	AdamStep(param, grad, m, v Buffer, lr, beta1, beta2, eps, wd float32, t int) error

	// Synchronize waits for all queued work.
	Synchronize() error
}

// ShapeError reports arguments whose lengths do not match the shape given.
type ShapeError struct {
	Op  string
	Msg string
}

func (e *ShapeError) Error() string { return "backend: " + e.Op + ": " + e.Msg }

// IndexError reports an index argument out of range: Name[Pos] = Value is
// not in [0, Limit).
type IndexError struct {
	Op    string
	Name  string
	Pos   int
	Value int64
	Limit int
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("backend: %s: %s[%d] = %d out of range [0, %d)", e.Op, e.Name, e.Pos, e.Value, e.Limit)
}

// CheckLen returns a *ShapeError when b is nil or b.Len() != want or its
// dtype differs. Back ends use it to validate arguments.
func CheckLen(op, name string, b Buffer, dt DType, want int) error {
	if b == nil {
		return &ShapeError{Op: op, Msg: name + " is nil"}
	}
	if b.DType() != dt {
		return &ShapeError{Op: op, Msg: fmt.Sprintf("%s has dtype %s, want %s", name, b.DType(), dt)}
	}
	if b.Len() != want {
		return &ShapeError{Op: op, Msg: fmt.Sprintf("%s has %d elements, want %d", name, b.Len(), want)}
	}
	return nil
}
