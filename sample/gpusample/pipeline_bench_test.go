package gpusample

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/feature"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// epochVariant is one way of running the all-GPU training epoch.
type epochVariant struct {
	name string
	// hostBlocks builds nn Blocks through a host copy of the structure
	// (nn.NewBlock); otherwise the blocks go to nn on the device
	// (Batch.NNBlocks).
	hostBlocks bool
	// loss: "sync" uses Tape.NLLLoss (waits twice a step), "step" uses
	// nn.NLLLoss and reads the value after each step (one wait), "epoch"
	// copies each step's loss into a device log read at the epoch's end.
	loss string
	// prefetch queues the next batch's sampling ahead of the step.
	prefetch bool
}

var epochVariants = []epochVariant{
	{"hostblocks-syncloss", true, "sync", false},
	{"devblocks-syncloss", false, "sync", false},
	{"devblocks-steploss", false, "step", false},
	{"pipelined-steploss", false, "step", true},
	{"pipelined-epochloss", false, "epoch", true},
}

// BenchmarkTrainEpochGPU trains one epoch of 3-layer GraphSAGE (hidden
// 256, batch 1024, fanouts [15, 10, 5] with 15 for the seeds, dropout
// 0.5, Adam) per iteration with every stage on the GPU: sampling
// (gpusample), feature gathering (feature store, every row hot), forward,
// backward and the optimizer step, in each epochVariant. One untimed
// epoch warms the allocator and the kernel cache first. Metrics: ms per
// epoch, cuMemAlloc calls per timed epoch (0 in steady state) and the
// allocator's peak device memory (graph, features and cache included).
// With -test.v a per-op device profile of one more epoch of the variants
// named in $STRATA_BENCH_PROFILE (comma-separated) is logged.
func BenchmarkTrainEpochGPU(b *testing.B) {
	for _, v := range epochVariants {
		b.Run(v.name, func(b *testing.B) { benchEpoch(b, v) })
	}
}

func benchEpoch(b *testing.B, v epochVariant) {
	d := gpu(b)
	ds, g := benchData(b)
	s, err := New(d, g, Config{Fanouts: []int{15, 10, 5}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	// At STRATA_TEST_PRECISION=bf16 the features are bfloat16, as strata
	// train --precision bf16 keeps them.
	fs, err := feature.New(d, ds.Features, int(ds.NumNodes()), ds.FeatDim, feature.Options{BudgetBytes: 1 << 40, BFloat16: d.Precision() == backend.BF16})
	if err != nil {
		b.Fatal(err)
	}
	defer fs.Close()
	model, err := nn.New(d, nn.Config{Kind: nn.KindSAGE, InDim: ds.FeatDim, Hidden: 256, OutDim: ds.NumClasses, Layers: 3,
		Dropout: 0.5, InputDropout: 0.5, Seed: 7})
	if err != nil {
		b.Fatal(err)
	}
	defer nn.FreeParams(d, model.Params())
	opt := optim.NewAdam(d, model.Params(), 0.003, 0.9, 0.999, 1e-8, 0)
	defer opt.Free()
	batches := epochBatches(ds.Train, 1024, 3)
	rowsHost := make([]int32, 1024)
	for i := range rowsHost {
		rowsHost[i] = int32(i)
	}
	rb, _ := d.Alloc(backend.Int32, 1024)
	defer d.Free(rb)
	if err := d.Upload(rb, rowsHost); err != nil {
		b.Fatal(err)
	}
	lossLog, _ := d.Alloc(backend.Float32, len(batches))
	defer d.Free(lossLog)
	hostLosses := make([]float32, len(batches))

	// blocksOf hands a batch's blocks to nn.
	blocksOf := func(bt *Batch) ([]*nn.Block, error) {
		if !v.hostBlocks {
			return bt.NNBlocks()
		}
		var out []*nn.Block
		for i, k := range bt.Blocks {
			ip, ix, err := bt.Structure(i)
			if err != nil {
				return nil, err
			}
			blk, err := nn.NewBlock(d, k.NumDst, k.NumSrc, ip, ix)
			if err != nil {
				return nil, err
			}
			out = append(out, blk)
		}
		return out, nil
	}
	step := func(epoch, bi int, seeds []graph.NodeID, bt *Batch) error {
		blocks, err := blocksOf(bt)
		if err != nil {
			return err
		}
		defer func() {
			for _, k := range blocks {
				k.Free()
			}
		}()
		nin := bt.Blocks[0].NumSrc
		var xb backend.Buffer
		if err := d.Enqueue(func(q backend.Queue) error { xb, err = q.AllocRaw(backend.Float32, nin*ds.FeatDim); return err }); err != nil {
			return err
		}
		defer d.Free(xb)
		if err := fs.Gather(xb, bt.InputNodes()); err != nil {
			return err
		}
		labels := make([]int32, len(seeds))
		for i, v := range seeds {
			labels[i] = ds.Labels[v]
		}
		lb, _ := d.Alloc(backend.Int32, len(seeds))
		defer d.Free(lb)
		if err := d.Upload(lb, labels); err != nil {
			return err
		}
		rows, err := backend.View(rb, 0, len(seeds))
		if err != nil {
			return err
		}
		t := autograd.NewTape(d)
		defer t.Release()
		x, err := t.Const(xb, nin, ds.FeatDim)
		if err != nil {
			return err
		}
		logits, err := model.Forward(t, x, blocks, true, rng.Derive(5, uint64(epoch), uint64(bi)))
		if err != nil {
			return err
		}
		logp, err := t.LogSoftmax(logits)
		if err != nil {
			return err
		}
		var lv *autograd.Var
		if v.loss == "sync" {
			var loss float64
			lv, loss, err = t.NLLLoss(logp, rows, lb)
			hostLosses[bi] = float32(loss)
		} else {
			lv, err = nn.NLLLoss(t, logp, rows, lb)
		}
		if err != nil {
			return err
		}
		if err := opt.ZeroGrad(); err != nil {
			return err
		}
		if err := t.Backward(lv); err != nil {
			return err
		}
		if err := opt.Step(); err != nil {
			return err
		}
		switch v.loss {
		case "step":
			return d.Download(hostLosses[bi:bi+1], lv.Value)
		case "epoch":
			slot, err := backend.View(lossLog, bi, 1)
			if err != nil {
				return err
			}
			return d.Copy(slot, lv.Value)
		}
		return nil
	}
	epoch := func(e int) error {
		key := func(bi int) sample.Key { return sample.Key{Seed: 1, Epoch: e, Batch: bi} }
		var next *Pending
		if v.prefetch {
			var err error
			if next, err = s.SampleAsync(batches[0], key(0)); err != nil {
				return err
			}
		}
		for bi, seeds := range batches {
			var bt *Batch
			var err error
			if v.prefetch {
				if bt, err = next.Wait(); err != nil {
					return err
				}
				if bi+1 < len(batches) {
					if next, err = s.SampleAsync(batches[bi+1], key(bi+1)); err != nil {
						bt.Free()
						return err
					}
				}
			} else if bt, err = s.SampleDevice(seeds, key(bi)); err != nil {
				return err
			}
			err = step(e, bi, seeds, bt)
			bt.Free()
			if err != nil {
				return err
			}
		}
		if v.loss == "epoch" {
			if err := d.Download(hostLosses, lossLog); err != nil {
				return err
			}
		}
		for bi, l := range hostLosses {
			if math.IsNaN(float64(l)) || l <= 0 {
				return fmt.Errorf("epoch %d batch %d: loss %v", e, bi, l)
			}
		}
		return d.Synchronize()
	}
	if err := epoch(0); err != nil { // warm-up
		b.Fatal(err)
	}
	first := hostLosses[0]
	m0 := d.Stats().Mallocs
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		if err := epoch(it + 1); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	sec := b.Elapsed().Seconds()
	st := d.Stats()
	b.ReportMetric(sec/float64(b.N)*1e3, "ms/epoch")
	b.ReportMetric(float64(st.Mallocs-m0)/float64(b.N), "mallocs/epoch")
	b.ReportMetric(float64(st.PeakBytes)/(1<<30), "peakGiB")
	b.Logf("%s: %d batches; loss first batch %.4f, last batch of the last epoch %.4f; allocator %+v", v.name, len(batches), first, hostLosses[len(hostLosses)-1], st)
	if want := benchProfile(); testing.Verbose() && strings.Contains(","+want+",", ","+v.name+",") {
		if err := d.StartProfile(); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := epoch(b.N + 1); err != nil {
			b.Fatal(err)
		}
		wall := time.Since(t0).Seconds() * 1e3
		prof, err := d.StopProfile()
		if err != nil {
			b.Fatal(err)
		}
		var busy float64
		for _, p := range prof {
			busy += p.Ms
		}
		var sb strings.Builder
		fmt.Fprintf(&sb, "profile of one epoch (%s): wall %.1f ms with profiling, device busy %.1f ms\n", v.name, wall, busy)
		fmt.Fprintf(&sb, "%-28s %8s %10s %7s\n", "op", "calls", "ms", "%busy")
		for i, p := range prof {
			if i == 25 {
				break
			}
			fmt.Fprintf(&sb, "%-28s %8d %10.2f %6.1f%%\n", p.Name, p.Calls, p.Ms, 100*p.Ms/busy)
		}
		b.Log(sb.String())
	}
}
