package engine

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// counting wraps a CPU back end and counts what costs a separate device
// pass on CUDA (as optim's TestStepPasses does): memsets (Alloc's zero
// fill, Fill, NLLLossBackward's clearing), calls of compute primitives
// (each at least one launch), and among them AdamStep and Dropout.
// AllocRaw hands out unfilled buffers as the CUDA back end does.
type counting struct {
	*cpu.Backend
	memsets, calls, adam, dropout atomic.Int64
}

type stepCounts struct{ memsets, calls, adam, dropout int64 }

func (c *counting) snapshot() stepCounts {
	return stepCounts{c.memsets.Load(), c.calls.Load(), c.adam.Load(), c.dropout.Load()}
}

func (s stepCounts) minus(o stepCounts) stepCounts {
	return stepCounts{s.memsets - o.memsets, s.calls - o.calls, s.adam - o.adam, s.dropout - o.dropout}
}

func (c *counting) AllocRaw(dt backend.DType, n int) (backend.Buffer, error) {
	return c.Backend.Alloc(dt, n)
}

func (c *counting) Alloc(dt backend.DType, n int) (backend.Buffer, error) {
	if n > 0 {
		c.memsets.Add(1)
	}
	return c.Backend.Alloc(dt, n)
}

func (c *counting) Fill(dst backend.Buffer, v float32) error {
	c.memsets.Add(1)
	return c.Backend.Fill(dst, v)
}

func (c *counting) NLLLossBackward(d, rows, labels backend.Buffer, nrows, cols int, scale float32) error {
	c.memsets.Add(1)
	c.calls.Add(1)
	return c.Backend.NLLLossBackward(d, rows, labels, nrows, cols, scale)
}

func (c *counting) Gemm(ta, tb bool, m, n, k int, alpha float32, a, b backend.Buffer, beta float32, cc backend.Buffer) error {
	c.calls.Add(1)
	return c.Backend.Gemm(ta, tb, m, n, k, alpha, a, b, beta, cc)
}

func (c *counting) Axpby(d backend.Buffer, alpha float32, x backend.Buffer, beta float32, y backend.Buffer) error {
	c.calls.Add(1)
	return c.Backend.Axpby(d, alpha, x, beta, y)
}

func (c *counting) Copy(d, s backend.Buffer) error { c.calls.Add(1); return c.Backend.Copy(d, s) }

func (c *counting) Mul(d, x, y backend.Buffer) error { c.calls.Add(1); return c.Backend.Mul(d, x, y) }

func (c *counting) AddRowVector(d, x, v backend.Buffer, rows, cols int) error {
	c.calls.Add(1)
	return c.Backend.AddRowVector(d, x, v, rows, cols)
}

func (c *counting) Unary(op backend.UnaryOp, alpha float32, d, x backend.Buffer) error {
	c.calls.Add(1)
	return c.Backend.Unary(op, alpha, d, x)
}

func (c *counting) UnaryBackward(op backend.UnaryOp, alpha float32, dx, x, y, dy backend.Buffer) error {
	c.calls.Add(1)
	return c.Backend.UnaryBackward(op, alpha, dx, x, y, dy)
}

func (c *counting) Dropout(d, m, x backend.Buffer, p float32, seed uint64) error {
	c.calls.Add(1)
	c.dropout.Add(1)
	return c.Backend.Dropout(d, m, x, p, seed)
}

func (c *counting) SumRows(d, x backend.Buffer, rows, cols int) error {
	c.calls.Add(1)
	return c.Backend.SumRows(d, x, rows, cols)
}

func (c *counting) GatherRows(d, x, idx backend.Buffer, xrows, cols int) error {
	c.calls.Add(1)
	return c.Backend.GatherRows(d, x, idx, xrows, cols)
}

func (c *counting) ScatterAddRows(d, s, idx backend.Buffer, rows, cols int) error {
	c.calls.Add(1)
	return c.Backend.ScatterAddRows(d, s, idx, rows, cols)
}

func (c *counting) SpMM(out backend.Buffer, a backend.Sparse, tr bool, x, w backend.Buffer, heads, width int) error {
	c.calls.Add(1)
	return c.Backend.SpMM(out, a, tr, x, w, heads, width)
}

func (c *counting) LogSoftmax(d, x backend.Buffer, rows, cols int) error {
	c.calls.Add(1)
	return c.Backend.LogSoftmax(d, x, rows, cols)
}

func (c *counting) LogSoftmaxBackward(dx, y, dy backend.Buffer, rows, cols int) error {
	c.calls.Add(1)
	return c.Backend.LogSoftmaxBackward(dx, y, dy, rows, cols)
}

func (c *counting) AdamStep(p, g, m, v backend.Buffer, lr, b1, b2, eps, wd float32, t int) error {
	c.calls.Add(1)
	c.adam.Add(1)
	return c.Backend.AdamStep(p, g, m, v, lr, b1, b2, eps, wd, t)
}

func (c *counting) GatherRowsDropout(d, x, idx backend.Buffer, xrows, cols int, p float32, seed uint64) error {
	c.calls.Add(1)
	return c.Backend.GatherRowsDropout(d, x, idx, xrows, cols, p, seed)
}

func (c *counting) BiasActDropout(d, a, b, bias backend.Buffer, rows, cols int, relu bool, p float32, seed uint64) error {
	c.calls.Add(1)
	return c.Backend.BiasActDropout(d, a, b, bias, rows, cols, relu, p, seed)
}

func (c *counting) BiasActDropoutBackward(dx, db, y, dy backend.Buffer, rows, cols int, relu bool, p float32, seed uint64, acc bool) error {
	c.calls.Add(1)
	if db != nil {
		c.calls.Add(1) // the bias sums' second pass
	}
	return c.Backend.BiasActDropoutBackward(dx, db, y, dy, rows, cols, relu, p, seed, acc)
}

// countedRun trains cfg on k counting CPU devices and returns the
// losses and, per rank, what one steady step took: the counts between
// the ends of epoch 1's batches 1 and 2 (with the pipeline off, that is
// the next batch's sampling and loading and its step, nothing else).
func countedRun(t *testing.T, cfg Config, unfused bool) ([]float64, []stepCounts, int) {
	t.Helper()
	k := cfg.Devices
	cs := make([]*counting, k)
	bs := make([]backend.Backend, k)
	for i := range cs {
		b, err := cpu.New(cpu.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = &counting{Backend: b}
		bs[i] = cs[i]
	}
	var mu sync.Mutex
	at := make([]map[int]stepCounts, k)
	for i := range at {
		at[i] = map[int]stepCounts{}
	}
	rep := runOn(t, tiny(t), cfg, Options{Backends: bs, unfused: unfused, OnBatch: func(rank, epoch, batch int, _ float64) {
		if epoch == 0 && batch <= 2 {
			mu.Lock()
			at[rank][batch] = cs[rank].snapshot()
			mu.Unlock()
		}
	}})
	per := make([]stepCounts, k)
	for r := range k {
		b1, ok1 := at[r][1]
		b2, ok2 := at[r][2]
		if !ok1 || !ok2 {
			t.Fatalf("rank %d: fewer than 3 batches in epoch 1", r)
		}
		per[r] = b2.minus(b1)
	}
	return losses(rep), per, len(rep.Report.Epochs)
}

// TestEngineStepPasses: the engine's step with the loader's input
// dropout and the model's flat gradients as the all-reduce buffer gives
// the losses of the unfused step (the model's own input dropout, a
// gradient per parameter repointed into the engine's buffer) bit for bit
// on 2 and 4 CPU devices, in one Adam launch (not one per parameter),
// with no Dropout call (the model's hidden dropouts are fused, its input
// one is in the gather) and 9 calls fewer; the memsets are bounded.
func TestEngineStepPasses(t *testing.T) {
	ks := []int{2, 4}
	for _, k := range ks {
		for _, cache := range []int64{0, 30 * 16 * 4} {
			t.Run(fmt.Sprintf("cpu:%d cache %d", k, cache), func(t *testing.T) {
				cfg := small(k, 2)
				cfg.NoPipeline, cfg.Sampler, cfg.Train.Optimizer = true, SamplerFull, "adam"
				cfg.Train.BatchSize = 16
				cfg.Train.Layers, cfg.Train.Fanouts, cfg.Train.EvalFanouts = 3, []int{5, 4, 3}, []int{5, 4, 3}
				cfg.CacheBytes = cache
				if cache > 0 {
					cfg.CachePolicy = "partition"
				}
				want, before, _ := countedRun(t, cfg, true)
				got, after, _ := countedRun(t, cfg, false)
				if len(got) == 0 || !slices.EqualFunc(got, want, func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }) {
					t.Fatalf("losses %v, want the unfused step's %v", got, want)
				}
				nparams := 3 * 3 // SAGE: self and neighbor weights and a bias per layer
				for r := range k {
					t.Logf("rank %d per step: unfused %+v, fused %+v", r, before[r], after[r])
					a, b := after[r], before[r]
					if b.adam != int64(nparams) || b.dropout != 1 {
						t.Fatalf("rank %d: the unfused step made %d Adam launches and %d Dropout calls, want %d and 1", r, b.adam, b.dropout, nparams)
					}
					if a.adam != 1 || a.dropout != 0 {
						t.Fatalf("rank %d: a step makes %d Adam launches and %d Dropout calls, want 1 and 0", r, a.adam, a.dropout)
					}
					// One Adam launch for nparams and no Dropout: 9 calls fewer.
					if a.calls != b.calls-int64(nparams)+1-1 {
						t.Fatalf("rank %d: %d calls a step, want the unfused %d less %d", r, a.calls, b.calls, nparams)
					}
					// The 11: the gradient buffer's fill, the loss seed's,
					// NLLLossBackward's clearing, the two scatter targets of
					// the destination-row gathers, and the host sampler's
					// uploads of the 3 blocks (2 each; GPU batches are on
					// the device already). The loader's rows, its staging
					// buffers and the labels are allocated unfilled.
					if a.memsets > 11 || a.memsets > b.memsets {
						t.Fatalf("rank %d: %d memsets a step (unfused %d), want at most 11", r, a.memsets, b.memsets)
					}
				}
			})
		}
	}
}
