//go:build linux && (amd64 || arm64)

package cudalib

import "github.com/ebitengine/purego"

func dlopen(name string) (uintptr, error) {
	return purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// Sym resolves a symbol in an opened library.
func Sym(handle uintptr, name string) (uintptr, error) {
	return purego.Dlsym(handle, name)
}

// Supported reports whether run-time loading works on this platform.
const Supported = true
