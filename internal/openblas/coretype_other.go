//go:build !amd64

package openblas

// coreTypeHint: OpenBLAS's own detection is used on other architectures.
func coreTypeHint() string { return "" }
