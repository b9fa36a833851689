package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/internal/devbuf"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// evaluator runs inference on one device as the single-device trainer
// does: over the whole graph with all neighbors (Eval "full", on device
// 0), or on sampled mini-batches of the train, validation and test nodes
// with EvalFanouts (Eval "sampled", for graphs too large for one pass;
// the batches are drawn on the host from the whole graph, and several
// devices share them: runShard).
type evaluator struct {
	b    backend.Backend
	cfg  *train.Config
	ds   *dataset.Dataset // the partitioned dataset
	in   *graph.CSR
	x    []float32 // the features as trained on (dense)
	full *nn.Block
	xd   backend.Buffer

	sampler *sample.NeighborSampler // sampled evaluation
	nodes   []int32                 // sorted union of the splits
}

// newEvaluator evaluates on b the dataset ds (in-adjacency in, features
// x) under cfg's Eval settings. Full evaluation uploads the graph and
// the features now.
func newEvaluator(b backend.Backend, ds *dataset.Dataset, in *graph.CSR, x []float32, cfg *train.Config) (*evaluator, error) {
	if int64(len(x)) != ds.NumNodes()*int64(ds.FeatDim) || in.NumRows != ds.NumNodes() {
		return nil, fmt.Errorf("dsp: evaluator: %d feature values and %d graph rows for %d nodes x %d", len(x), in.NumRows, ds.NumNodes(), ds.FeatDim)
	}
	ev := &evaluator{b: b, cfg: cfg, ds: ds, in: in, x: x}
	var err error
	if cfg.Eval == train.Sampled {
		if ev.sampler, err = sample.NewNeighborSampler(in, sample.Config{Fanouts: cfg.EvalFanouts}); err != nil {
			return nil, err
		}
		seen := make([]bool, ds.NumNodes())
		for _, split := range [][]int32{ds.Train, ds.Val, ds.Test} {
			for _, v := range split {
				if !seen[v] {
					seen[v] = true
					ev.nodes = append(ev.nodes, v)
				}
			}
		}
		slices.Sort(ev.nodes)
		return ev, nil
	}
	if ev.full, err = nn.UploadGraph(b, in); err != nil {
		return nil, err
	}
	if ev.xd, err = devbuf.Upload(b, x); err != nil {
		ev.free()
		return nil, err
	}
	return ev, nil
}

func (ev *evaluator) free() {
	if ev == nil {
		return
	}
	if ev.full != nil {
		ev.full.Free()
	}
	if ev.xd != nil {
		ev.b.Free(ev.xd)
	}
	ev.full, ev.xd = nil, nil
}

// shardable reports whether the evaluation can be spread over devices
// (sampled evaluation; the whole-graph pass cannot).
func (ev *evaluator) shardable() bool { return ev.sampler != nil }

// run evaluates model on the train, validation and test nodes.
func (ev *evaluator) run(model nn.Model) (train.EpochRecord, error) {
	if ev.sampler != nil {
		out, err := ev.logitsSampled(model, 0, 1)
		if err != nil {
			return train.EpochRecord{}, err
		}
		return ev.scoreLogits(func(v int32) []float32 { return out[v] }).record(), nil
	}
	rec, _, _, err := ev.runFull(model)
	return rec, err
}

// runShard is run spread over k devices: this one (rank) evaluates every
// k-th evaluation batch from batch rank on, and sum must add the k
// devices' sums in place (sumOver; every device calls runShard). The
// batches and their neighborhoods are run's, so the accuracies equal
// run's exactly; the validation loss may differ in the last bits
// (summation order).
func (ev *evaluator) runShard(model nn.Model, rank, k int, sum func([]float64) error) (train.EpochRecord, error) {
	if !ev.shardable() {
		return train.EpochRecord{}, fmt.Errorf("dsp: whole-graph evaluation cannot be split over devices (use sampled evaluation)")
	}
	if k < 1 || rank < 0 || rank >= k || sum == nil {
		return train.EpochRecord{}, fmt.Errorf("dsp: evaluation shard %d of %d", rank, k)
	}
	out, err := ev.logitsSampled(model, rank, k)
	if err != nil {
		return train.EpochRecord{}, err
	}
	t := ev.scoreLogits(func(v int32) []float32 { return out[v] })
	if err := sum(t[:]); err != nil {
		return train.EpochRecord{}, err
	}
	return t.record(), nil
}

// sumOver returns a runShard sum over c: it all-gathers every rank's
// values (as bits) and adds them in rank order, so every rank gets the
// same float64 result whatever the back end's reduction order.
func sumOver(ctx context.Context, c comm.Comm) func([]float64) error {
	return func(v []float64) error {
		k := c.Size()
		mine := make([]int64, len(v))
		for i, x := range v {
			mine[i] = int64(math.Float64bits(x))
		}
		all := make([]int64, k*len(v))
		if err := c.AllGather(ctx, comm.I64(all), comm.I64(mine)); err != nil {
			return err
		}
		for i := range v {
			v[i] = 0
			for r := range k {
				v[i] += math.Float64frombits(uint64(all[r*len(v)+i]))
			}
		}
		return nil
	}
}

// runFull is the whole-graph evaluation; it also returns the wall time
// of the forward pass with the logits' download (which waits for it) and
// of the scoring on the host.
func (ev *evaluator) runFull(model nn.Model) (_ train.EpochRecord, forward, score time.Duration, _ error) {
	t0 := time.Now()
	t := autograd.NewTape(ev.b)
	defer t.Release()
	blocks := make([]*nn.Block, ev.cfg.Layers)
	for i := range blocks {
		blocks[i] = ev.full
	}
	x, err := t.Const(ev.xd, int(ev.in.NumRows), ev.ds.FeatDim)
	if err != nil {
		return train.EpochRecord{}, 0, 0, err
	}
	out, err := model.Forward(t, x, blocks, false, 0)
	if err != nil {
		return train.EpochRecord{}, 0, 0, err
	}
	ds := ev.ds
	c := ds.NumClasses
	if out.Rows != int(ds.NumNodes()) || out.Cols != c {
		return train.EpochRecord{}, 0, 0, fmt.Errorf("model produced %dx%d logits, want %dx%d", out.Rows, out.Cols, ds.NumNodes(), c)
	}
	// The classes come from the device (n int32s instead of n*c logits
	// over the bus); only the validation rows' logits come back, for
	// the loss.
	pred, valRows, err := nn.Classify(ev.b, out.Value, int(ds.NumNodes()), c, ds.Val)
	if err != nil {
		return train.EpochRecord{}, 0, 0, err
	}
	t1 := time.Now()
	rec := ev.count(func(v int32) (int, bool) { return int(pred[v]), true },
		func(i int, _ int32) []float32 { return valRows[i*c : (i+1)*c] }).record()
	return rec, t1.Sub(t0), time.Since(t1), nil
}

// logitsSampled returns the logits of the nodes of every k-th evaluation
// batch from batch rank on (sharded evaluation; rank 0 of 1: all). The
// sampling key does not depend on the epoch, so every epoch sees the
// same neighborhoods.
func (ev *evaluator) logitsSampled(model nn.Model, rank, k int) (map[int32][]float32, error) {
	c, dim := ev.ds.NumClasses, ev.ds.FeatDim
	out := make(map[int32][]float32, len(ev.nodes)/k+1)
	key := rng.Derive(ev.cfg.Seed, tagEval)
	bs := ev.cfg.EvalBatchSize
	for b := rank; b*bs < len(ev.nodes); b += k {
		seeds := ev.nodes[b*bs : min((b+1)*bs, len(ev.nodes))]
		mb, err := ev.sampler.Sample(seeds, sample.Key{Seed: key, Batch: b})
		if err != nil {
			return nil, err
		}
		inputs := mb.InputNodes()
		feats := make([]float32, len(inputs)*dim)
		for i, v := range inputs {
			copy(feats[i*dim:(i+1)*dim], ev.x[int(v)*dim:(int(v)+1)*dim])
		}
		host, err := ev.forward(model, mb, feats, len(seeds))
		if err != nil {
			return nil, err
		}
		for i, v := range seeds {
			out[v] = host[i*c : (i+1)*c]
		}
	}
	return out, nil
}

// forward uploads a batch's blocks and input features, runs the model
// and downloads the seeds' logits.
func (ev *evaluator) forward(model nn.Model, mb *sample.MiniBatch, feats []float32, seeds int) ([]float32, error) {
	b := ev.b
	blocks, err := nn.UploadBlocks(b, mb)
	defer nn.FreeBlocks(blocks)
	if err != nil {
		return nil, err
	}
	xb, err := devbuf.Upload(b, feats)
	if err != nil {
		return nil, err
	}
	defer b.Free(xb)
	t := autograd.NewTape(b) // released first, before the uploads are freed
	defer t.Release()
	x, err := t.Const(xb, len(feats)/ev.ds.FeatDim, ev.ds.FeatDim)
	if err != nil {
		return nil, err
	}
	logits, err := model.Forward(t, x, blocks, false, 0)
	if err != nil {
		return nil, err
	}
	if logits.Rows != seeds || logits.Cols != ev.ds.NumClasses {
		return nil, fmt.Errorf("model produced %dx%d logits for %d seeds", logits.Rows, logits.Cols, seeds)
	}
	host := make([]float32, logits.Len())
	return host, b.Download(host, logits.Value)
}

// tally holds the evaluation's sums: correct and counted nodes of the
// train, validation and test splits, and the validation loss summed over
// the counted validation nodes. Shards add up.
type tally [7]float64

const (
	tCorrect = 0 // +split
	tCount   = 3 // +split
	tValLoss = 6
)

// count adds the nodes of the splits that pred classifies (false: not
// evaluated here); valLogits gives validation node v's logits (i: its
// position in ds.Val) for the loss.
func (ev *evaluator) count(pred func(v int32) (int, bool), valLogits func(i int, v int32) []float32) tally {
	ds := ev.ds
	var t tally
	for split, nodes := range [][]int32{ds.Train, ds.Val, ds.Test} {
		for i, v := range nodes {
			best, ok := pred(v)
			if !ok {
				continue
			}
			label := ds.Labels[v]
			if split == 1 {
				t[tValLoss] += nn.CrossEntropy(valLogits(i, v), label)
			}
			if int32(best) == label {
				t[tCorrect+split]++
			}
			t[tCount+split]++
		}
	}
	return t
}

// scoreLogits counts the nodes whose logits logitsOf has (nil: not
// evaluated here).
func (ev *evaluator) scoreLogits(logitsOf func(int32) []float32) tally {
	return ev.count(func(v int32) (int, bool) {
		row := logitsOf(v)
		if row == nil {
			return 0, false
		}
		return nn.Argmax(row), true
	}, func(_ int, v int32) []float32 { return logitsOf(v) })
}

// record turns the sums into accuracies and the mean validation loss.
func (t tally) record() train.EpochRecord {
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return math.NaN()
		}
		return a / b
	}
	return train.EpochRecord{TrainAccuracy: ratio(t[tCorrect], t[tCount]), ValAccuracy: ratio(t[tCorrect+1], t[tCount+1]),
		ValLoss: ratio(t[tValLoss], t[tCount+1]), TestAccuracy: ratio(t[tCorrect+2], t[tCount+2])}
}
