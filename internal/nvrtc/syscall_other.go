//go:build !(linux && (amd64 || arm64))

package nvrtc

func call(fn uintptr, args ...uintptr) uintptr { return 1 }

func callPtr(fn uintptr, args ...uintptr) (*byte, error) { return nil, nil }
