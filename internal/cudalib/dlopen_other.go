//go:build !(linux && (amd64 || arm64))

package cudalib

import "errors"

var errUnsupported = errors.New("cudalib: run-time loading of CUDA libraries is supported on linux/amd64 and linux/arm64 only")

func dlopen(name string) (uintptr, error) { return 0, errUnsupported }

// Sym resolves a symbol in an opened library.
func Sym(handle uintptr, name string) (uintptr, error) { return 0, errUnsupported }

// Supported reports whether run-time loading works on this platform.
const Supported = false
