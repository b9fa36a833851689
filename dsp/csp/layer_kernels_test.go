package csp

import (
	"testing"

	"github.com/strata-gnn/strata/internal/testkit/gputest"
)

// TestLayerKernelsCompile compiles the layer-wise kernels with the
// node-wise ones they share a module with (no GPU needed).
func TestLayerKernelsCompile(t *testing.T) {
	gputest.CompileKernels(t, kernelSrc+layerSrc, "csp-layer.cu")
}
