//go:build linux && (amd64 || arm64)

package cuda

import "github.com/ebitengine/purego"

// syscall calls a C function taking only integer and pointer arguments and
// returns its 32-bit result (every driver call returns a CUresult). The go:uintptrescapes rule of purego.SyscallN
// keeps objects whose addresses callers convert to uintptr in the call
// expression alive and in place during the call.
//
//go:uintptrescapes
func syscall(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return uintptr(uint32(r))
}
