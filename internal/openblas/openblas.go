package openblas

import (
	"errors"
	"fmt"
	"math"
	"sync"
)

// CBLAS enum values (cblas.h).
const (
	rowMajor = 101
	noTrans  = 111
	trans    = 112
)

var (
	loadOnce sync.Once
	lib      *library
	loadErr  error
)

// library holds the resolved entry points.
type library struct {
	path       string
	sgemm      func(order, transA, transB, m, n, k int32, alpha float32, a *float32, lda int32, b *float32, ldb int32, beta float32, c *float32, ldc int32)
	getThreads func() int32  // nil when the library lacks openblas_get_num_threads
	setThreads func(int32)   // nil when the library lacks openblas_set_num_threads
	coreName   func() string // nil when the library lacks openblas_get_corename
}

func load() {
	loadOnce.Do(func() { lib, loadErr = open() })
}

// Available reports whether OpenBLAS was found and loaded. The first call
// performs the search; later calls are free.
func Available() bool {
	load()
	return lib != nil
}

// Err returns why OpenBLAS is not available (nil when it is).
func Err() error {
	load()
	return loadErr
}

// Path returns the file the library was loaded from, or "" when unavailable.
func Path() string {
	load()
	if lib == nil {
		return ""
	}
	return lib.path
}

// Threads returns OpenBLAS's thread count, or 0 when unavailable or unknown.
func Threads() int {
	load()
	if lib == nil || lib.getThreads == nil {
		return 0
	}
	return int(lib.getThreads())
}

// CoreName returns the CPU kernel family OpenBLAS chose (e.g. "Haswell",
// "SkylakeX"; "Prescott" means generic SSE3 kernels), or "" when unknown.
func CoreName() string {
	load()
	if lib == nil || lib.coreName == nil {
		return ""
	}
	return lib.coreName()
}

// SetThreads sets OpenBLAS's thread count for later calls (process-wide).
// It reports false when the library is unavailable or cannot set it.
func SetThreads(n int) bool {
	load()
	if lib == nil || lib.setThreads == nil || n < 1 || n > 1<<16 {
		return false
	}
	lib.setThreads(int32(n))
	return true
}

// ErrUnavailable is returned by Sgemm when no library is loaded.
var ErrUnavailable = errors.New("openblas: library not loaded")

// Sgemm computes C = alpha*op(A)*op(B) + beta*C on row-major matrices with
// leading dimensions lda, ldb, ldc (cblas_sgemm with CblasRowMajor). It
// checks dimensions and slice lengths first, so the C library never reads
// or writes outside the slices.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) error {
	load()
	if lib == nil {
		return ErrUnavailable
	}
	if err := checkArgs(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc); err != nil {
		return err
	}
	if m == 0 || n == 0 {
		return nil
	}
	ta, tb := int32(noTrans), int32(noTrans)
	if transA {
		ta = trans
	}
	if transB {
		tb = trans
	}
	// With k == 0 the A and B pointers are never read, but slices may be
	// empty: pass a pointer to a local instead of indexing [0].
	var dummy float32
	pa, pb := &dummy, &dummy
	if len(a) > 0 {
		pa = &a[0]
	}
	if len(b) > 0 {
		pb = &b[0]
	}
	lib.sgemm(rowMajor, ta, tb, int32(m), int32(n), int32(k), alpha, pa, int32(lda), pb, int32(ldb), beta, &c[0], int32(ldc))
	return nil
}

// checkArgs mirrors the reference BLAS argument checks for row-major
// storage, plus slice-length checks, plus the int32 range of blasint.
func checkArgs(transA, transB bool, m, n, k, la, lda, lb, ldb, lc, ldc int) error {
	for _, v := range [...]int{m, n, k, lda, ldb, ldc} {
		if v < 0 || v > math.MaxInt32 {
			return fmt.Errorf("openblas: sgemm: dimension %d out of range [0, 2^31)", v)
		}
	}
	// Stored shapes (rows x cols) in row-major order.
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if lda < max(1, ac) || ldb < max(1, bc) || ldc < max(1, n) {
		return fmt.Errorf("openblas: sgemm: leading dimension too small (lda %d, ldb %d, ldc %d)", lda, ldb, ldc)
	}
	need := func(rows, cols, ld int) int {
		if rows == 0 || cols == 0 {
			return 0
		}
		return (rows-1)*ld + cols
	}
	if m > 0 && n > 0 && k > 0 {
		if la < need(ar, ac, lda) {
			return fmt.Errorf("openblas: sgemm: a has %d elements, need %d", la, need(ar, ac, lda))
		}
		if lb < need(br, bc, ldb) {
			return fmt.Errorf("openblas: sgemm: b has %d elements, need %d", lb, need(br, bc, ldb))
		}
	}
	if lc < need(m, n, ldc) {
		return fmt.Errorf("openblas: sgemm: c has %d elements, need %d", lc, need(m, n, ldc))
	}
	return nil
}
