package engine

import (
	"sync/atomic"
	"testing"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// converting is a CPU back end that counts its conversions into
// bfloat16 (backend.Convert), and, with noHalf, reports no bfloat16
// activations (backend.BF16Activations switched off).
type converting struct {
	*cpu.Backend
	toBF16 *atomic.Int64
	noHalf bool
}

func (c *converting) Convert(dst, src backend.Buffer) error {
	if dst != nil && dst.DType() == backend.BFloat16 {
		c.toBF16.Add(1)
	}
	return c.Backend.Convert(dst, src)
}

func (c *converting) BF16Activations() bool { return !c.noHalf && c.Backend.BF16Activations() }

func convertingCPUs(t *testing.T, k int, precision string, noHalf bool) ([]backend.Backend, *atomic.Int64) {
	t.Helper()
	n := new(atomic.Int64)
	var bs []backend.Backend
	for _, b := range cpusAt(t, k, precision) {
		bs = append(bs, &converting{Backend: b.(*cpu.Backend), toBF16: n, noHalf: noHalf})
	}
	return bs, n
}

// TestBF16StepNoConversions: at bf16 with bfloat16 activations (CPU
// virtual devices emulate them), the loader's bfloat16 rows and the
// weights converted in one launch a step give the per-step losses (and
// evaluations) of the first pass's step, which converted the loaded
// float32 rows and each weight on its own, bit for bit: on one device
// (the local gather) and on two with a partitioned cache (rows exchanged,
// rounded in the scatter), with input dropout. The new step converts
// once a step (the weights' shadow); the old one once per weight and
// batch more.
func TestBF16StepNoConversions(t *testing.T) {
	for _, k := range []int{1, 2} {
		cfg := small(k, 2)
		cfg.Train.Precision = "bf16"
		cfg.Sampler, cfg.CachePolicy, cfg.CacheBytes = SamplerFull, cache.Partition, 200*64
		devs, nNew := convertingCPUs(t, k, "bf16", false)
		got := run(t, cfg, Options{Backends: devs})
		devs, nOld := convertingCPUs(t, k, "bf16", false)
		want := run(t, cfg, Options{Backends: devs, halfConvert: true})
		sameEpochs(t, &got.Report, &want.Report)
		steps := int64(len(losses(got)) * k)
		if steps == 0 {
			t.Fatalf("k=%d: no steps", k)
		}
		// Each device's warm-up (device.warm) is one step more.
		if nNew.Load() != steps+int64(k) {
			t.Errorf("k=%d: %d conversions to bfloat16 in %d steps and %d warm-ups, want one a step (the weights' shadow)", k, nNew.Load(), steps, k)
		}
		// The old step: the batch's rows, layer 1's two weights read as
		// one matrix (its one product: nn's concatProduct) and layer 2's
		// two weights (the biases are not products' operands).
		if want := 4 * (steps + int64(k)); nOld.Load() != want {
			t.Errorf("k=%d: the old step converted %d times in %d steps and %d warm-ups, want %d", k, nOld.Load(), steps, k, want)
		}
	}
}

// TestFP32StepUnchangedByBF16Paths: at fp32 nothing is converted to
// bfloat16 and the per-step losses equal, bit for bit, those of devices
// that report no bfloat16 activations at all (two CPU devices, a
// partitioned cache, input dropout): fp32 and tf32 runs do not reach
// the bf16 step's paths.
func TestFP32StepUnchangedByBF16Paths(t *testing.T) {
	cfg := small(2, 2)
	cfg.Sampler, cfg.CachePolicy, cfg.CacheBytes = SamplerFull, cache.Partition, 200*64
	devs, n := convertingCPUs(t, 2, "fp32", false)
	got := run(t, cfg, Options{Backends: devs})
	devs, _ = convertingCPUs(t, 2, "fp32", true)
	want := run(t, cfg, Options{Backends: devs})
	sameEpochs(t, &got.Report, &want.Report)
	if n.Load() != 0 {
		t.Errorf("%d conversions to bfloat16 at fp32", n.Load())
	}
}
