//go:build !(linux && (amd64 || arm64))

package cuda

// syscall is never reached on platforms where Load fails.
func syscall(fn uintptr, args ...uintptr) uintptr { return uintptr(ErrNotInitialized) }
