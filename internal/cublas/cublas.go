package cublas

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/strata-gnn/strata/internal/cudalib"
)

// Error is a failed cuBLAS call.
type Error struct {
	Call   string
	Status int
	Name   string
}

func (e *Error) Error() string {
	return fmt.Sprintf("cublas: %s: %s (%d)", e.Call, e.Name, e.Status)
}

var statusNames = map[int]string{
	0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
	7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func check(call string, r uintptr) error {
	if r == 0 {
		return nil
	}
	name, ok := statusNames[int(r)]
	if !ok {
		name = "cublasStatus_t"
	}
	return &Error{Call: call, Status: int(r), Name: name}
}

type lib struct {
	found                                        *cudalib.Found
	create, destroy, setStream, setMath, version uintptr
	sgemm, getProperty, gemmEx                   uintptr
	setWorkspace                                 uintptr // optional: 0 before cuBLAS 11.2
}

var (
	loadOnce sync.Once
	l        *lib
	loadErr  error
)

// Load opens libcublas once per process.
func Load() error {
	loadOnce.Do(func() { l, loadErr = open() })
	return loadErr
}

func open() (*lib, error) {
	if !cudalib.Supported {
		return nil, fmt.Errorf("cublas: run-time loading is not supported on this platform")
	}
	f, err := cudalib.Open(cudalib.CUBLAS)
	if err != nil {
		return nil, err
	}
	x := &lib{found: f}
	for _, s := range []struct {
		dst  *uintptr
		name string
	}{
		{&x.create, "cublasCreate_v2"}, {&x.destroy, "cublasDestroy_v2"},
		{&x.setStream, "cublasSetStream_v2"}, {&x.setMath, "cublasSetMathMode"},
		{&x.version, "cublasGetVersion_v2"}, {&x.sgemm, "cublasSgemm_v2"},
		{&x.getProperty, "cublasGetProperty"}, {&x.gemmEx, "cublasGemmEx"},
	} {
		p, err := cudalib.Sym(f.Handle, s.name)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("cublas: %s (%s) lacks %s", f.Lib, f.Path, s.name)
		}
		*s.dst = p
	}
	x.setWorkspace, _ = cudalib.Sym(f.Handle, "cublasSetWorkspace_v2")
	return x, nil
}

// LibPath returns the file libcublas was loaded from.
func LibPath() string {
	if l == nil {
		return ""
	}
	return l.found.Path
}

// LibVersion returns the loaded library's version without a handle (no
// context is needed).
func LibVersion() (major, minor, patch int, err error) {
	if err := Load(); err != nil {
		return 0, 0, 0, err
	}
	var v [3]int32
	for i := range v { // MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
		if err := check("cublasGetProperty", call(l.getProperty, uintptr(i), uintptr(unsafe.Pointer(&v[i])))); err != nil {
			return 0, 0, 0, err
		}
	}
	return int(v[0]), int(v[1]), int(v[2]), nil
}

// Handle is a cuBLAS handle bound to the context current at Create. It is
// not safe for concurrent use.
type Handle struct {
	h       uintptr
	scalars unsafe.Pointer // 2 floats outside the Go heap: alpha, beta
	version int
}

// Create makes a handle in the current context (call on a thread where the
// context is current). scalars must point to at least 8 bytes of memory
// that outlives the handle and is not moved by Go (for example pinned host
// memory); alpha and beta are staged there for each Sgemm.
func Create(scalars unsafe.Pointer) (*Handle, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if scalars == nil {
		return nil, fmt.Errorf("cublas: Create: nil scalar area")
	}
	var h uintptr
	if err := check("cublasCreate_v2", call(l.create, uintptr(unsafe.Pointer(&h)))); err != nil {
		return nil, err
	}
	hd := &Handle{h: h, scalars: scalars}
	var v int32
	if err := check("cublasGetVersion_v2", call(l.version, h, uintptr(unsafe.Pointer(&v)))); err != nil {
		call(l.destroy, h)
		return nil, err
	}
	hd.version = int(v)
	return hd, nil
}

// Version returns cuBLAS's version number (e.g. 130100 for 13.1.0).
func (h *Handle) Version() int { return h.version }

// Destroy releases the handle.
func (h *Handle) Destroy() error {
	if h == nil || h.h == 0 {
		return nil
	}
	err := check("cublasDestroy_v2", call(l.destroy, h.h))
	h.h = 0
	return err
}

// SetStream makes later calls run on stream s (a CUstream).
func (h *Handle) SetStream(s uintptr) error {
	return check("cublasSetStream_v2", call(l.setStream, h.h, s))
}

// WorkspaceBytes is the workspace Strata gives each handle: NVIDIA's
// recommendation for Hopper (32 MiB; 4 MiB suffices before it).
const WorkspaceBytes = 32 << 20

// SetWorkspace makes the handle use the size bytes of device memory at ptr
// as its workspace, so that no product allocates or frees device memory
// itself (a cudaFree waits for all the device's work, collectives on
// other streams included), as PyTorch gives cuBLAS its workspace. Call it
// after every SetStream, which resets the workspace to cuBLAS's own. It
// reports false when the library lacks cublasSetWorkspace (before 11.2).
func (h *Handle) SetWorkspace(ptr uintptr, size int) (bool, error) {
	if l.setWorkspace == 0 {
		return false, nil
	}
	if size < 0 {
		return false, fmt.Errorf("cublas: SetWorkspace: size %d", size)
	}
	return true, check("cublasSetWorkspace_v2", call(l.setWorkspace, h.h, ptr, uintptr(size)))
}

// SetTF32 selects TF32 tensor-core math (true) or full FP32 (false).
func (h *Handle) SetTF32(on bool) error {
	const defaultMath, tf32 = 0, 3 // CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH
	mode := uintptr(defaultMath)
	if on {
		mode = tf32
	}
	return check("cublasSetMathMode", call(l.setMath, h.h, mode))
}

// ComputeType is a cublasComputeType_t for GemmEx.
type ComputeType int

const (
	// Compute32F is full float32 (CUBLAS_COMPUTE_32F).
	Compute32F ComputeType = 68
	// Compute32FFast16BF lets the tensor cores read float32 operands
	// converted to bfloat16, accumulating in float32
	// (CUBLAS_COMPUTE_32F_FAST_16BF).
	Compute32FFast16BF ComputeType = 75
	// Compute32FFastTF32 is the same with TF32 operands
	// (CUBLAS_COMPUTE_32F_FAST_TF32).
	Compute32FFastTF32 ComputeType = 77
)

// gemmArgs checks the dimensions of a row-major Gemm and returns the
// column-major operations and leading dimensions of A and B.
func gemmArgs(call string, transA, transB bool, m, n, k int) (opA, opB uintptr, lda, ldb int, err error) {
	const maxI32 = 1<<31 - 1
	if m < 1 || n < 1 || k < 1 || m > maxI32 || n > maxI32 || k > maxI32 {
		return 0, 0, 0, 0, fmt.Errorf("cublas: %s: dimensions m=%d n=%d k=%d must be in [1, 2^31)", call, m, n, k)
	}
	opA, lda = 0, k // CUBLAS_OP_N
	if transA {
		opA, lda = 1, m // CUBLAS_OP_T
	}
	opB, ldb = 0, n
	if transB {
		opB, ldb = 1, k
	}
	return opA, opB, lda, ldb, nil
}

// GemmEx is Gemm on float32 matrices (CUDA_R_32F A, B and C) with the
// compute type ct, through cublasGemmEx with the default algorithm.
func (h *Handle) GemmEx(ct ComputeType, transA, transB bool, m, n, k int, alpha float32, a uintptr, b uintptr, beta float32, c uintptr) error {
	return h.GemmExTyped(ct, R32F, R32F, transA, transB, m, n, k, alpha, a, b, beta, c)
}

// DataType is a cudaDataType_t: the element type of a GemmEx matrix.
type DataType uintptr

const (
	// R32F is CUDA_R_32F (float32).
	R32F DataType = 0
	// R16BF is CUDA_R_16BF (bfloat16).
	R16BF DataType = 14
)

// GemmExTyped is GemmEx with A and B of type ab and C of type c (float32
// scalars alpha and beta): R16BF A and B with Compute32F multiply
// bfloat16 operands on the tensor cores and accumulate in float32, and
// an R16BF C receives the result rounded.
func (h *Handle) GemmExTyped(ct ComputeType, ab, c DataType, transA, transB bool, m, n, k int, alpha float32, a uintptr, b uintptr, beta float32, cp uintptr) error {
	opA, opB, lda, ldb, err := gemmArgs("GemmEx", transA, transB, m, n, k)
	if err != nil {
		return err
	}
	const algoDefault = ^uintptr(0) // CUBLAS_GEMM_DEFAULT (-1)
	s := (*[2]float32)(h.scalars)
	s[0], s[1] = alpha, beta
	// Column-major view as in Gemm: C^T = op(B)^T op(A)^T.
	r := call(l.gemmEx, h.h, opB, opA, uintptr(n), uintptr(m), uintptr(k),
		uintptr(h.scalars), b, uintptr(ab), uintptr(ldb), a, uintptr(ab), uintptr(lda),
		uintptr(unsafe.Add(h.scalars, 4)), cp, uintptr(c), uintptr(n), uintptr(ct), algoDefault)
	return check("cublasGemmEx", r)
}

// Gemm computes C = alpha*op(A)*op(B) + beta*C for row-major device
// matrices: C is m x n, op(A) m x k, op(B) k x n; A is stored m x k (k x m
// when transA), B k x n (n x k when transB). All dimensions must be >= 1
// and fit in int32; callers handle empty cases.
func (h *Handle) Gemm(transA, transB bool, m, n, k int, alpha float32, a uintptr, b uintptr, beta float32, c uintptr) error {
	opA, opB, lda, ldb, err := gemmArgs("Gemm", transA, transB, m, n, k)
	if err != nil {
		return err
	}
	s := (*[2]float32)(h.scalars)
	s[0], s[1] = alpha, beta
	// Column-major view: C^T (n x m) = op(B)^T (n x k) * op(A)^T (k x m).
	r := call(l.sgemm, h.h, opB, opA, uintptr(n), uintptr(m), uintptr(k),
		uintptr(h.scalars), b, uintptr(ldb), a, uintptr(lda),
		uintptr(unsafe.Add(h.scalars, 4)), c, uintptr(n))
	return check("cublasSgemm_v2", r)
}
