package train

import (
	"fmt"
	"sort"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
)

// evaluate runs the model without dropout and returns the accuracies on
// the train, validation and test nodes and the validation loss.
func (r *runner) evaluate() (EpochRecord, error) {
	var class func(v int32) int
	var valLogits func(i int, v int32) []float32 // i: v's position in Val
	if r.cfg.Eval == Full {
		cls, val, err := r.classifyFull()
		if err != nil {
			return EpochRecord{}, err
		}
		c := r.ds.NumClasses
		class = func(v int32) int { return int(cls[v]) }
		valLogits = func(i int, _ int32) []float32 { return val[i*c : (i+1)*c] }
	} else {
		m, err := r.logitsSampled()
		if err != nil {
			return EpochRecord{}, err
		}
		class = func(v int32) int { return nn.Argmax(m[v]) }
		valLogits = func(_ int, v int32) []float32 { return m[v] }
	}
	var rec EpochRecord
	rec.TrainAccuracy = r.accuracy(r.ds.Train, class)
	rec.ValAccuracy = r.accuracy(r.ds.Val, class)
	rec.TestAccuracy = r.accuracy(r.ds.Test, class)
	for i, v := range r.ds.Val {
		rec.ValLoss += nn.CrossEntropy(valLogits(i, v), r.ds.Labels[v])
	}
	rec.ValLoss /= float64(len(r.ds.Val))
	return rec, nil
}

// accuracy is the share of nodes whose class is their label.
func (r *runner) accuracy(nodes []int32, class func(int32) int) float64 {
	correct := 0
	for _, v := range nodes {
		if int32(class(v)) == r.ds.Labels[v] {
			correct++
		}
	}
	return float64(correct) / float64(len(nodes))
}

// classifyFull runs the model over the whole graph and returns every
// node's class and the validation nodes' logits (nn.Classify: the classes
// come from the device, not NumNodes x NumClasses logits).
func (r *runner) classifyFull() ([]int32, []float32, error) {
	t := autograd.NewTape(r.b)
	defer t.Release()
	out, err := r.forwardFull(t, r.fullBlocks(), false, 0)
	if err != nil {
		return nil, nil, err
	}
	if out.Rows != int(r.ds.NumNodes()) || out.Cols != r.ds.NumClasses {
		return nil, nil, fmt.Errorf("model produced %dx%d logits, want %dx%d", out.Rows, out.Cols, r.ds.NumNodes(), r.ds.NumClasses)
	}
	return nn.Classify(r.b, out.Value, out.Rows, out.Cols, r.ds.Val)
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
