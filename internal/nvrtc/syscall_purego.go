//go:build linux && (amd64 || arm64)

package nvrtc

import (
	"unsafe"

	"github.com/ebitengine/purego"
)

// call invokes an NVRTC function returning nvrtcResult (a 32-bit enum).
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return uintptr(uint32(r))
}

// callPtr invokes a function returning const char*.
func callPtr(fn uintptr, args ...uintptr) (*byte, error) {
	r, _, _ := purego.SyscallN(fn, args...)
	return *(**byte)(unsafe.Pointer(&r)), nil
}
