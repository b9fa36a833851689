package engine

import (
	"sync/atomic"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// gemmCounting is a CPU back end that counts its products.
type gemmCounting struct {
	*cpu.Backend
	n *atomic.Int64
}

func (g *gemmCounting) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b backend.Buffer, beta float32, c backend.Buffer) error {
	g.n.Add(1)
	return g.Backend.Gemm(transA, transB, m, n, k, alpha, a, b, beta, c)
}

func gemmCountingCPUs(t *testing.T, k int, precision string) ([]backend.Backend, *atomic.Int64) {
	t.Helper()
	n := new(atomic.Int64)
	var bs []backend.Backend
	for _, b := range cpusAt(t, k, precision) {
		bs = append(bs, &gemmCounting{Backend: b.(*cpu.Backend), n: n})
	}
	return bs, n
}

// TestWarmChangesNothing: the products' warm-up before the pipeline
// (device.warm) runs the model's products on every device, and the
// losses and evaluations are those of a run without it, bit for bit, in
// fp32 and in bf16 (bfloat16 activations, the weights' shadow), on one
// device and on two (the whole-graph sampler: the collective one needs
// the CPU back end itself).
func TestWarmChangesNothing(t *testing.T) {
	for _, prec := range []string{"fp32", "bf16"} {
		for _, k := range []int{1, 2} {
			cfg := small(k, 2)
			cfg.Train.Precision = prec
			cfg.Sampler = SamplerFull // a wrapped back end: no collective sampler
			devs, warmed := gemmCountingCPUs(t, k, prec)
			got := run(t, cfg, Options{Backends: devs})
			devs, plain := gemmCountingCPUs(t, k, prec)
			want := run(t, cfg, Options{Backends: devs, noWarm: true})
			sameEpochs(t, &got.Report, &want.Report)
			extra := warmed.Load() - plain.Load()
			if extra <= 0 || extra%int64(k) != 0 {
				t.Errorf("%s k=%d: %d products with the warm-up, %d without: want the same number more on each device", prec, k, warmed.Load(), plain.Load())
			}
		}
	}
}
