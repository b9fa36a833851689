package cpu

import (
	"testing"

	"github.com/strata-gnn/strata/internal/openblas"
	"github.com/strata-gnn/strata/tensor/backendtest"
)

func TestConformanceGo(t *testing.T) {
	backendtest.RunWith(t, mustNew(t, GemmGo), backendtest.Options{VaryGOMAXPROCS: true})
}

func TestConformanceOpenBLAS(t *testing.T) {
	if !openblas.Available() {
		t.Skipf("OpenBLAS not available (%v); install libopenblas0 to test that path", openblas.Err())
	}
	b := mustNew(t, GemmOpenBLAS)
	if b.GemmImpl() != "openblas" {
		t.Fatalf("GemmImpl = %q", b.GemmImpl())
	}
	t.Logf("OpenBLAS: %s, %d threads", openblas.Path(), openblas.Threads())
	backendtest.RunWith(t, b, backendtest.Options{VaryGOMAXPROCS: true})
}

func TestCapabilities(t *testing.T) {
	backendtest.Capabilities(t, mustNew(t, GemmGo), "Slicer", "Siblings", "Fences", "PinnedMemory", "SparseBuilder")
}
