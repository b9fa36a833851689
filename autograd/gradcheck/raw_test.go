package gradcheck_test

import (
	"math"
	"testing"

	"github.com/strata-gnn/strata/autograd/gradcheck"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// poisoned is the CPU back end with an AllocRaw that fills new buffers
// with NaN, as a device back end's raw buffers may hold anything: the
// tape must only take raw buffers for outputs that are overwritten
// completely, or NaN leaks into the checked gradients.
type poisoned struct {
	backend.Backend
	raw int
}

func (p *poisoned) AllocRaw(dt backend.DType, n int) (backend.Buffer, error) {
	b, err := p.Alloc(dt, n)
	if err != nil || dt != backend.Float32 {
		return b, err
	}
	p.raw++
	return b, p.Fill(b, float32(math.NaN()))
}

// SpMMConcat is the CPU's: its output, a raw buffer, must be written whole.
func (p *poisoned) SpMMConcat(out backend.Buffer, a backend.Sparse, x, w backend.Buffer, width int) error {
	return p.Backend.(backend.ConcatAggregator).SpMMConcat(out, a, x, w, width)
}

func TestGradCheckRawBuffers(t *testing.T) {
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := &poisoned{Backend: b}
	gradcheck.Run(t, p)
	if p.raw == 0 {
		t.Fatal("the tape never asked for a raw buffer")
	}
}
