package csp

import (
	"testing"

	"github.com/strata-gnn/strata/internal/testkit/gputest"
)

// TestKernelsCompile compiles the collective sampling kernels with NVRTC
// when the library is available (no GPU needed).
func TestKernelsCompile(t *testing.T) {
	gputest.CompileKernels(t, kernelSrc, "csp.cu")
}
