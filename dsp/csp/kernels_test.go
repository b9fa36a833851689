package csp

import (
	"testing"

	"github.com/strata-gnn/strata/internal/testkit"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// TestKernelsCompile compiles the collective sampling kernels with NVRTC
// when the library is available (no GPU needed).
func TestKernelsCompile(t *testing.T) {
	testkit.CompileCUDA(t, cuda.CommonSource()+kernelSrc, "csp.cu")
}
