package engine

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/tensor/backend/cpu/cputest"
	"github.com/strata-gnn/strata/train"
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

// TestLateFamilies: a run whose every product family is warmed before the
// pipeline logs nothing about late families (fp32 and bf16, training with
// sampled and with whole-graph evaluation, two devices); a family first seen after the
// warm-up is named in the log with its rank.
func TestLateFamilies(t *testing.T) {
	for _, c := range []struct {
		prec string
		eval string
	}{{"fp32", train.Sampled}, {"bf16", train.Sampled}, {"fp32", train.Full}, {"bf16", train.Full}} {
		prec := c.prec + " " + c.eval
		cfg := small(2, 2)
		cfg.Train.Precision, cfg.Train.Eval = c.prec, c.eval
		cfg.Sampler = SamplerFull
		var devs []backend.Backend
		for _, b := range cpusAt(t, 2, c.prec) {
			devs = append(devs, cputest.NewFamilyCounting(b.(*cpu.Backend)))
		}
		var log strings.Builder
		run(t, cfg, Options{Backends: devs, Log: &log})
		if strings.Contains(log.String(), "after the warm-up") {
			t.Errorf("%s: %s", prec, log.String())
		}
		var late []*device
		for r, b := range devs {
			late = append(late, &device{rank: r, b: b, warmed: true})
		}
		var out strings.Builder
		lateFamilies(&out, late)
		if !strings.Contains(out.String(), "rank 1: ") || !strings.Contains(out.String(), "product families and 0 fallbacks first seen after the warm-up") {
			t.Errorf("%s: families counted from 0: %q", prec, out.String())
		}
	}
}
