package gpusample

import (
	"testing"

	"github.com/strata-gnn/strata/internal/nvrtc"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// TestHopKernelsCompile compiles the hop module (sample.cu plus hop.cu)
// with NVRTC when the library is available (no GPU needed).
func TestHopKernelsCompile(t *testing.T) {
	if err := nvrtc.Load(); err != nil {
		t.Skipf("no libnvrtc: %.100s", err.Error())
	}
	kind, arch, err := nvrtc.Target(90)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nvrtc.Compile(cuda.CommonSource()+kernelSrc+hopSrc, "gpusample-hop.cu", kind, arch, "--std=c++17"); err != nil {
		t.Fatal(err)
	}
}

// TestHopKey: the exported hop key is the one the sampler draws with.
func TestHopKey(t *testing.T) {
	k := sample.Key{Seed: 7, Epoch: 2, Batch: 3}
	if HopKey(k, 1) != hopKey(k, 1) || HopKey(k, 0) == HopKey(k, 1) {
		t.Fatal("HopKey differs from hopKey or ignores the hop")
	}
}
