package testkit

import (
	"testing"

	"github.com/strata-gnn/strata/internal/nvrtc"
)

// CompileCUDA compiles the CUDA C src (name is used in messages) with
// NVRTC for sm_90, or PTX for the newest architecture below it that NVRTC
// supports, and returns the image. No GPU is needed, so kernel errors
// show up on any machine with libnvrtc; without it t is skipped.
func CompileCUDA(t testing.TB, src, name string) []byte {
	t.Helper()
	if err := nvrtc.Load(); err != nil {
		t.Skipf("no libnvrtc: %.100s", err.Error())
	}
	kind, arch, err := nvrtc.Target(90)
	if err != nil {
		t.Fatal(err)
	}
	img, err := nvrtc.Compile(src, name, kind, arch, "--std=c++17")
	if err != nil {
		t.Fatal(err)
	}
	return img
}
