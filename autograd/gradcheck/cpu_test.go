package gradcheck_test

import (
	"testing"

	"github.com/strata-gnn/strata/autograd/gradcheck"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

func TestGradCheckCPU(t *testing.T) {
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gradcheck.Run(t, b)
}
