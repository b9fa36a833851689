package cudadsp

import (
	"testing"

	"github.com/strata-gnn/strata/internal/testkit/gputest"
)

// TestKernelsCompile compiles every module this package loads with NVRTC
// when the library is available (no GPU needed): the collective sampling
// kernels alone and with the layer-wise and walk kernels they share a
// module with, the feature loader's routing kernels and link
// prediction's target exclusion.
func TestKernelsCompile(t *testing.T) {
	for _, m := range []struct{ name, src string }{
		{"csp.cu", cspSrc},
		{"csp-layer.cu", cspSrc + layerSrc},
		{"csp-walk.cu", cspSrc + walkSrc},
		{"cache.cu", routeSrc},
		{"exclude.cu", excludeSrc},
	} {
		t.Run(m.name, func(t *testing.T) { gputest.CompileKernels(t, m.src, m.name) })
	}
}
