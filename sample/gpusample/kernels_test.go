package gpusample

import (
	"testing"

	"github.com/strata-gnn/strata/internal/testkit"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// TestKernelsCompile compiles the sampler's CUDA C with NVRTC when the
// library is available (no GPU needed).
func TestKernelsCompile(t *testing.T) {
	testkit.CompileCUDA(t, cuda.CommonSource()+kernelSrc, "gpusample.cu")
}
