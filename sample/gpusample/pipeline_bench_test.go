package gpusample

import (
	"testing"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/feature"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// BenchmarkTrainEpochGPU trains one epoch of 3-layer GraphSAGE (hidden
// 256, batch 1024, fanouts [15, 10, 5], Adam) per iteration with every
// stage on the GPU: sampling (gpusample), feature gathering (feature,
// everything hot), forward, backward and the optimizer step. The blocks
// go to nn through a host copy of their structure (nn.NewBlock), the one
// stage that leaves the GPU. Reports ms per epoch and the share spent in
// SampleDevice (GPU sampling and block building, synchronized).
func BenchmarkTrainEpochGPU(b *testing.B) {
	d := gpu(b)
	ds, g := benchData(b)
	s, err := New(d, g, Config{Fanouts: []int{15, 10, 5}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	fs, err := feature.New(d, ds.Features, int(ds.NumNodes()), ds.FeatDim, feature.Options{BudgetBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer fs.Close()
	model, err := nn.New(d, nn.Config{Kind: nn.KindSAGE, InDim: ds.FeatDim, Hidden: 256, OutDim: ds.NumClasses, Layers: 3,
		Dropout: 0.5, InputDropout: 0.5, Seed: 7})
	if err != nil {
		b.Fatal(err)
	}
	opt := optim.NewAdam(d, model.Params(), 0.003, 0.9, 0.999, 1e-8, 0)
	batches := epochBatches(ds.Train, 1024, 3)
	rowsHost := make([]int32, 1024)
	for i := range rowsHost {
		rowsHost[i] = int32(i)
	}
	var blockTime time.Duration
	step := func(epoch, bi int, seeds []int32) (float64, time.Duration, error) {
		t0 := time.Now()
		bt, err := s.SampleDevice(seeds, sample.Key{Seed: 1, Epoch: epoch, Batch: bi})
		if err != nil {
			return 0, 0, err
		}
		defer bt.Free()
		tSample := time.Since(t0)
		var blocks []*nn.Block
		defer func() {
			for _, k := range blocks {
				k.Free()
			}
		}()
		for i, k := range bt.Blocks {
			// nn.Block keeps a host copy of the structure: download it.
			ip, ix, err := bt.Structure(i)
			if err != nil {
				return 0, 0, err
			}
			blk, err := nn.NewBlock(d, k.NumDst, k.NumSrc, ip, ix)
			if err != nil {
				return 0, 0, err
			}
			blocks = append(blocks, blk)
		}
		blockTime += time.Since(t0) - tSample
		nin := bt.Blocks[0].NumSrc
		xb, err := d.Alloc(backend.Float32, nin*ds.FeatDim)
		if err != nil {
			return 0, 0, err
		}
		defer d.Free(xb)
		if err := fs.Gather(xb.(*cuda.Buffer), bt.InputNodes()); err != nil {
			return 0, 0, err
		}
		labels := make([]int32, len(seeds))
		for i, v := range seeds {
			labels[i] = ds.Labels[v]
		}
		rb, _ := d.Alloc(backend.Int32, len(seeds))
		lb, _ := d.Alloc(backend.Int32, len(seeds))
		defer d.Free(rb)
		defer d.Free(lb)
		d.Upload(rb, rowsHost[:len(seeds)])
		d.Upload(lb, labels)
		t := autograd.NewTape(d)
		defer t.Release()
		x, err := t.Const(xb, nin, ds.FeatDim)
		if err != nil {
			return 0, 0, err
		}
		logits, err := model.Forward(t, x, blocks, true, rng.Derive(5, uint64(epoch), uint64(bi)))
		if err != nil {
			return 0, 0, err
		}
		logp, err := t.LogSoftmax(logits)
		if err != nil {
			return 0, 0, err
		}
		lv, loss, err := t.NLLLoss(logp, rb, lb)
		if err != nil {
			return 0, 0, err
		}
		if err := opt.ZeroGrad(); err != nil {
			return 0, 0, err
		}
		if err := t.Backward(lv); err != nil {
			return 0, 0, err
		}
		return loss, tSample, opt.Step()
	}
	if _, _, err := step(0, 0, batches[0]); err != nil { // warm-up
		b.Fatal(err)
	}
	var sampleTime time.Duration
	blockTime = 0
	var first, last float64
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for bi, seeds := range batches {
			loss, ts, err := step(it+1, bi, seeds)
			if err != nil {
				b.Fatal(err)
			}
			sampleTime += ts
			if bi == 0 && it == 0 {
				first = loss
			}
			last = loss
		}
	}
	if err := d.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	sec := b.Elapsed().Seconds()
	b.ReportMetric(sec/float64(b.N)*1e3, "ms/epoch")
	b.ReportMetric(sampleTime.Seconds()/sec*100, "%sampling")
	b.ReportMetric(blockTime.Seconds()/sec*100, "%nnblocks")
	b.ReportMetric(float64(len(batches)), "batches")
	b.Logf("loss first batch %.4f, last batch %.4f; device allocator %+v", first, last, d.Stats())
}
