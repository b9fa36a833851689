package cudacomm

import (
	"strings"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// The CPU back end is no GPU: every entry point says so without calling
// CUDA.
func TestNotAGPU(t *testing.T) {
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if IsGPU(be) || IsGPU(nil) {
		t.Error("IsGPU of the CPU back end or nil")
	}
	if _, err := Retain(be); err == nil || !strings.Contains(err.Error(), "cpu is not a CUDA device") {
		t.Errorf("Retain: %v", err)
	}
	if _, err := BusID(be); err == nil {
		t.Error("BusID of the CPU back end")
	}
	if v, ok := CanAccess(be, "0000:01:00.0"); v || ok {
		t.Error("CanAccess of the CPU back end")
	}
	b, err := be.Alloc(backend.Float32, 4)
	if err != nil {
		t.Fatal(err)
	}
	if Addr(b) != 0 {
		t.Error("Addr of a CPU buffer")
	}
}
