package train

import (
	"fmt"
	"math"
	"sort"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/sample"
)

// evaluate runs the model without dropout and returns the accuracies on
// the train, validation and test nodes and the validation loss.
func (r *runner) evaluate() (EpochRecord, error) {
	var logits func(v int32) []float32
	if r.cfg.Eval == Full {
		all, err := r.logitsFull()
		if err != nil {
			return EpochRecord{}, err
		}
		c := r.ds.NumClasses
		logits = func(v int32) []float32 { return all[int(v)*c : int(v+1)*c] }
	} else {
		m, err := r.logitsSampled()
		if err != nil {
			return EpochRecord{}, err
		}
		logits = func(v int32) []float32 { return m[v] }
	}
	var rec EpochRecord
	rec.TrainAccuracy, _ = r.score(r.ds.Train, logits, false)
	rec.ValAccuracy, rec.ValLoss = r.score(r.ds.Val, logits, true)
	rec.TestAccuracy, _ = r.score(r.ds.Test, logits, false)
	return rec, nil
}

// score returns the accuracy and, withLoss, the mean cross-entropy of the
// nodes' logits (the exponentials cost most: a large test set skips them).
// Ties in the argmax go to the lower class, as ArgmaxRows does.
func (r *runner) score(nodes []int32, logits func(int32) []float32, withLoss bool) (acc, loss float64) {
	correct := 0
	for _, v := range nodes {
		row := logits(v)
		best, mx := 0, math.Inf(-1)
		for c, x := range row {
			if float64(x) > mx {
				best, mx = c, float64(x)
			}
		}
		label := r.ds.Labels[v]
		if withLoss {
			var z float64
			for _, x := range row {
				z += math.Exp(float64(x) - mx)
			}
			loss += mx + math.Log(z) - float64(row[label])
		}
		if int32(best) == label {
			correct++
		}
	}
	return float64(correct) / float64(len(nodes)), loss / float64(len(nodes))
}

// logitsFull runs the model over the whole graph and downloads the logits
// (NumNodes x NumClasses).
func (r *runner) logitsFull() ([]float32, error) {
	t := autograd.NewTape(r.b)
	defer t.Release()
	out, err := r.forwardFull(t, r.fullBlocks(), false, 0)
	if err != nil {
		return nil, err
	}
	if out.Rows != int(r.ds.NumNodes()) || out.Cols != r.ds.NumClasses {
		return nil, fmt.Errorf("model produced %dx%d logits, want %dx%d", out.Rows, out.Cols, r.ds.NumNodes(), r.ds.NumClasses)
	}
	host := make([]float32, out.Len())
	if err := r.b.Download(host, out.Value); err != nil {
		return nil, err
	}
	return host, nil
}

// logitsSampled evaluates the train, validation and test nodes in batches
// of EvalBatchSize with EvalFanouts. The sampling key does not depend on
// the epoch, so every epoch is scored on the same neighborhoods.
func (r *runner) logitsSampled() (map[int32][]float32, error) {
	seen := map[int32]bool{}
	var nodes []int32
	for _, s := range [][]int32{r.ds.Train, r.ds.Val, r.ds.Test} {
		for _, v := range s {
			if !seen[v] {
				seen[v] = true
				nodes = append(nodes, v)
			}
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
	out := make(map[int32][]float32, len(nodes))
	key := rng.Derive(r.cfg.Seed, tagEval)
	bs := r.cfg.EvalBatchSize
	for b := 0; b*bs < len(nodes); b++ {
		seeds := nodes[b*bs : min((b+1)*bs, len(nodes))]
		mb, err := r.evalSampler.Sample(seeds, sample.Key{Seed: key, Batch: b})
		if err != nil {
			return nil, fmt.Errorf("sampling: %w", err)
		}
		if err := r.evalBatch(mb, seeds, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *runner) evalBatch(mb *sample.MiniBatch, seeds []int32, out map[int32][]float32) error {
	t := autograd.NewTape(r.b)
	defer t.Release()
	logits, cleanup, err := r.forwardBatch(t, mb, false, 0)
	defer cleanup()
	if err != nil {
		return err
	}
	c := r.ds.NumClasses
	if logits.Rows != len(seeds) || logits.Cols != c {
		return fmt.Errorf("model produced %dx%d logits for %d seeds, want %dx%d", logits.Rows, logits.Cols, len(seeds), len(seeds), c)
	}
	host := make([]float32, logits.Len())
	if err := r.b.Download(host, logits.Value); err != nil {
		return err
	}
	for i, v := range seeds {
		out[v] = host[i*c : (i+1)*c]
	}
	return nil
}
