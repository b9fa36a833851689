package csp

import (
	"testing"

	"github.com/strata-gnn/strata/internal/testkit"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// TestLayerKernelsCompile compiles the layer-wise kernels with the
// node-wise ones they share a module with (no GPU needed).
func TestLayerKernelsCompile(t *testing.T) {
	testkit.CompileCUDA(t, cuda.CommonSource()+kernelSrc+layerSrc, "csp-layer.cu")
}
