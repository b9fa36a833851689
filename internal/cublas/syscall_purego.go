//go:build linux && (amd64 || arm64)

package cublas

import "github.com/ebitengine/purego"

// call invokes a cuBLAS function returning cublasStatus_t (32-bit).
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return uintptr(uint32(r))
}
