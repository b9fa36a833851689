package cudacomm

import (
	"strings"
	"testing"

	"github.com/strata-gnn/strata/internal/testkit"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

func TestMoverNeedsAGPU(t *testing.T) {
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewMover(be, make([]byte, 8), make([]byte, 8), new(uint32), 1, false)
	if err == nil || !strings.Contains(err.Error(), "not a CUDA device") {
		t.Errorf("NewMover on the CPU back end: %v", err)
	}
}

// The device path's kernels compile (with libnvrtc; skipped without).
func TestKernelsCompile(t *testing.T) {
	testkit.CompileCUDA(t, gpushmKernels, "gpushm.cu")
}
