package cublas

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/strata-gnn/strata/internal/cudalib"
)

// cuBLASLt bindings: the few calls Pinned needs. The enum values and
// struct layouts are those of cublasLt.h (CUDA 12.x and 13.x agree on
// every one used here; NVIDIA keeps them stable across releases).

// cublasLtMatmulDescAttributes_t (the value's C type in parentheses).
const (
	ltDescTransA = 3 // CUBLASLT_MATMUL_DESC_TRANSA (int32_t cublasOperation_t)
	ltDescTransB = 4 // CUBLASLT_MATMUL_DESC_TRANSB (int32_t cublasOperation_t)
)

// cublasLtMatrixLayoutAttribute_t.
const (
	ltLayoutRows = 2 // CUBLASLT_MATRIX_LAYOUT_ROWS (uint64_t)
	ltLayoutCols = 3 // CUBLASLT_MATRIX_LAYOUT_COLS (uint64_t)
	ltLayoutLD   = 4 // CUBLASLT_MATRIX_LAYOUT_LD (int64_t)
)

// cublasLtMatmulPreferenceAttributes_t.
const (
	ltPrefMaxWorkspaceBytes = 1 // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES (uint64_t; default 0)
	ltPrefMinAlignA         = 5 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES (uint32_t; default 256)
	ltPrefMinAlignB         = 6 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES (uint32_t)
	ltPrefMinAlignC         = 7 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES (uint32_t)
	ltPrefMinAlignD         = 8 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES (uint32_t)
)

// cublasOperation_t.
const (
	opN = 0 // CUBLAS_OP_N
	opT = 1 // CUBLAS_OP_T
)

// ltAlgo is cublasLtMatmulAlgo_t: { uint64_t data[8]; }, opaque; a copy
// stays valid for the library that made it.
type ltAlgo [8]uint64

// ltHeuristic is cublasLtMatmulHeuristicResult_t (96 bytes on 64-bit
// platforms, the only ones Strata loads CUDA on):
//
//	typedef struct {
//	  cublasLtMatmulAlgo_t algo;   // 64 bytes
//	  size_t workspaceSize;        // offset 64
//	  cublasStatus_t state;        // offset 72
//	  float wavesCount;            // offset 76
//	  int reserved[4];             // offset 80
//	} cublasLtMatmulHeuristicResult_t;
type ltHeuristic struct {
	algo          ltAlgo
	workspaceSize uint64
	state         int32
	wavesCount    float32
	reserved      [4]int32
}

type ltLib struct {
	found                                      *cudalib.Found
	create, destroy                            uintptr
	descCreate, descSetAttribute, descDestroy  uintptr
	layoutCreate, layoutSetAttr, layoutDestroy uintptr
	prefCreate, prefSetAttribute, prefDestroy  uintptr
	getHeuristic, algoCheck, matmul            uintptr
}

var (
	ltOnce sync.Once
	lt     *ltLib
	ltErr  error
)

// LoadLt opens libcublasLt once per process: the file of libcublas's
// major version next to the libcublas that Load opened (the sibling
// cudalib preloads), else that soname through the loader. An error means
// cuBLASLt is not usable here (not found, or lacking a call Pinned
// needs); callers then keep the cublasGemmEx/Sgemm path.
func LoadLt() error {
	ltOnce.Do(func() { lt, ltErr = openLt() })
	return ltErr
}

func openLt() (*ltLib, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	f, err := cudalib.OpenSibling(l.found, cudalib.CUBLAS.Siblings[0])
	if err != nil {
		return nil, fmt.Errorf("cublas: cuBLASLt: %w", err)
	}
	x := &ltLib{found: f}
	for _, s := range []struct {
		dst  *uintptr
		name string
	}{
		{&x.create, "cublasLtCreate"}, {&x.destroy, "cublasLtDestroy"},
		{&x.descCreate, "cublasLtMatmulDescCreate"}, {&x.descSetAttribute, "cublasLtMatmulDescSetAttribute"},
		{&x.descDestroy, "cublasLtMatmulDescDestroy"},
		{&x.layoutCreate, "cublasLtMatrixLayoutCreate"}, {&x.layoutSetAttr, "cublasLtMatrixLayoutSetAttribute"},
		{&x.layoutDestroy, "cublasLtMatrixLayoutDestroy"},
		{&x.prefCreate, "cublasLtMatmulPreferenceCreate"}, {&x.prefSetAttribute, "cublasLtMatmulPreferenceSetAttribute"},
		{&x.prefDestroy, "cublasLtMatmulPreferenceDestroy"},
		{&x.getHeuristic, "cublasLtMatmulAlgoGetHeuristic"}, {&x.algoCheck, "cublasLtMatmulAlgoCheck"},
		{&x.matmul, "cublasLtMatmul"},
	} {
		p, err := cudalib.Sym(f.Handle, s.name)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("cublas: %s (%s) lacks %s", f.Lib, f.Path, s.name)
		}
		*s.dst = p
	}
	return x, nil
}

// ltSetDesc sets attribute attr of a matmul descriptor to the size bytes
// at v.
func ltSetDesc(desc uintptr, attr int, v unsafe.Pointer, size int) error {
	return check("cublasLtMatmulDescSetAttribute", call(lt.descSetAttribute, desc, uintptr(attr), uintptr(v), uintptr(size)))
}

// ltSetLayout sets attribute attr of a matrix layout.
func ltSetLayout(lay uintptr, attr int, v unsafe.Pointer, size int) error {
	return check("cublasLtMatrixLayoutSetAttribute", call(lt.layoutSetAttr, lay, uintptr(attr), uintptr(v), uintptr(size)))
}

// ltSetPref sets attribute attr of a matmul preference.
func ltSetPref(pref uintptr, attr int, v unsafe.Pointer, size int) error {
	return check("cublasLtMatmulPreferenceSetAttribute", call(lt.prefSetAttribute, pref, uintptr(attr), uintptr(v), uintptr(size)))
}
