package gpucsp

import (
	"testing"

	"github.com/strata-gnn/strata/internal/nvrtc"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// TestKernelsCompile compiles the collective sampling kernels with NVRTC
// when the library is available (no GPU needed).
func TestKernelsCompile(t *testing.T) {
	if err := nvrtc.Load(); err != nil {
		t.Skipf("no libnvrtc: %.100s", err.Error())
	}
	kind, arch, err := nvrtc.Target(90)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nvrtc.Compile(cuda.CommonSource()+kernelSrc, "gpucsp.cu", kind, arch, "--std=c++17"); err != nil {
		t.Fatal(err)
	}
}
