package train

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/infer"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// The splits of a Tally, in the order of Dataset.Train, Val and Test.
const (
	SplitTrain = iota
	SplitVal
	SplitTest
)

// Labeled lists rows of a logits matrix and their labels, in order.
type Labeled struct {
	Rows, Labels []int32
}

// Tally sums an evaluation: per split (SplitTrain, SplitVal, SplitTest)
// the nodes counted and those whose class (the argmax of their logits,
// ties to the lower class) is their label, and the validation nodes'
// cross-entropy (nn.CrossEntropy, summed in their order). The tallies of
// disjoint shards of the nodes add up (Add), so devices that each hold
// some rows score them where they are.
type Tally struct {
	Correct, Count [3]int64
	ValLoss        float64
}

// Add adds o's sums to t's.
func (t *Tally) Add(o Tally) {
	for s := range 3 {
		t.Correct[s] += o.Correct[s]
		t.Count[s] += o.Count[s]
	}
	t.ValLoss += o.ValLoss
}

// add counts one node of split s with class class and label label.
func (t *Tally) add(s, class int, label int32) {
	t.Count[s]++
	if int32(class) == label {
		t.Correct[s]++
	}
}

// Record returns the accuracies (correct over counted; 0 for a split
// with no node) and the mean validation loss as an EpochRecord's.
func (t *Tally) Record() EpochRecord {
	ratio := func(a int64, b int64) float64 {
		if b == 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	rec := EpochRecord{TrainAccuracy: ratio(t.Correct[SplitTrain], t.Count[SplitTrain]),
		ValAccuracy: ratio(t.Correct[SplitVal], t.Count[SplitVal]), TestAccuracy: ratio(t.Correct[SplitTest], t.Count[SplitTest])}
	if n := t.Count[SplitVal]; n > 0 {
		rec.ValLoss = t.ValLoss / float64(n)
	}
	return rec
}

// Score tallies the rows x classes logits on b: the classes come from the
// device (nn.Classify: rows int32s cross to the host, not rows x classes
// logits), and only the validation rows' logits, for their loss.
func Score(b backend.Backend, logits backend.Buffer, rows, classes int, splits *[3]Labeled) (Tally, error) {
	var t Tally
	val := &splits[SplitVal]
	class, vl, err := nn.Classify(b, logits, rows, classes, val.Rows)
	if err != nil {
		return t, err
	}
	for s := range splits {
		sp := &splits[s]
		for i, r := range sp.Rows {
			t.add(s, int(class[r]), sp.Labels[i])
		}
	}
	for i, l := range val.Labels {
		t.ValLoss += nn.CrossEntropy(vl[i*classes:(i+1)*classes], l)
	}
	return t, nil
}

// DatasetSplits lists the train, validation and test nodes of ds (rows of
// a whole-graph logits matrix) with their labels.
func DatasetSplits(ds *dataset.Dataset) *[3]Labeled {
	return labeledSplits(ds.Train, ds.Val, ds.Test, ds.Labels)
}

// labeledSplits lists the nodes of three splits with their labels.
func labeledSplits(train, val, test, labels []int32) *[3]Labeled {
	var out [3]Labeled
	for s, nodes := range [][]int32{train, val, test} {
		out[s].Rows = nodes
		out[s].Labels = make([]int32, len(nodes))
		for i, v := range nodes {
			out[s].Labels[i] = labels[v]
		}
	}
	return &out
}

// Evaluator scores a model on the train, validation and test nodes of a
// dataset without dropout, as Run does after an epoch. With Eval "full"
// every layer aggregates over all neighbors of the whole graph, layer by
// layer in chunks within a memory budget (package infer: the logits of
// the one-pass forward over the whole graph, bit for bit on the CPU,
// without holding every layer of every node on the device); with Eval
// "sampled" the nodes are evaluated in batches of
// EvalBatchSize whose neighborhoods are sampled with EvalFanouts, with a
// key that does not depend on the epoch, so every epoch is scored on the
// same neighborhoods.
type Evaluator struct {
	cfg    Common
	in     *inputs
	own    bool // in is the evaluator's own
	splits *[3]Labeled
	g      *graph.CSR
	smp    sample.Sampler // Eval sampled
	nodes  []int32        // the sorted union of the splits
	// keep holds what the whole-graph evaluation uploaded (blocks,
	// source IDs, features on the device) for the next epoch's, which
	// runs the same request over the same graph: evaluation 2..N redo
	// no upload that fits its budget. Close frees it.
	keep *infer.Keep
	// Log, when set, receives the first whole-graph evaluation's line
	// per layer (infer.Options.Log: where each layer's input and output
	// lived, resident on the devices or in host memory, and the bytes).
	Log    io.Writer
	logged bool
}

// NewEvaluator prepares the evaluation of cfg's models on ds, whose
// in-adjacency is in and whose features f are (NewFeatures), on b. Close
// releases it.
func NewEvaluator(b backend.Backend, ds *dataset.Dataset, in *graph.CSR, f *Features, cfg Common) (*Evaluator, error) {
	if err := cfg.ResolvePrecision(b); err != nil {
		return nil, err
	}
	ev, err := newEvaluator(&inputs{b: b, f: f, hostRows: cfg.Eval == Sampled}, ds, in, cfg)
	if ev != nil {
		ev.own = true
	}
	return ev, err
}

func newEvaluator(x *inputs, ds *dataset.Dataset, in *graph.CSR, cfg Common) (*Evaluator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ev := &Evaluator{cfg: cfg, in: x, splits: DatasetSplits(ds), g: in}
	for _, sp := range ev.splits {
		ev.nodes = append(ev.nodes, sp.Rows...)
	}
	slices.Sort(ev.nodes)
	ev.nodes = slices.Compact(ev.nodes)
	if in == nil || in.NumRows != ds.NumNodes() {
		return nil, &RunError{Op: "evaluator", Err: fmt.Errorf("no in-adjacency of the %d nodes", ds.NumNodes())}
	}
	if cfg.Eval == Sampled {
		var err error
		if ev.smp, err = newSampler(in, cfg.EvalFanouts); err != nil {
			return nil, &RunError{Op: "sampler", Err: err}
		}
	}
	return ev, nil
}

// Close frees the features the evaluator uploaded (its own inputs).
func (ev *Evaluator) Close() {
	if ev == nil {
		return
	}
	ev.keep.Free()
	ev.keep = nil
	if ev.own {
		ev.in.free()
	}
}

// Run evaluates model (built for cfg's model, layers and widths) and
// returns the tally.
func (ev *Evaluator) Run(model nn.Model) (Tally, error) {
	if ev.cfg.Eval == Sampled {
		return ev.sampled(model, 0, 1)
	}
	return ev.RunDevices([]backend.Backend{ev.in.b}, []nn.Model{model})
}

// RunDevices is Run's whole-graph evaluation (Eval "full") spread over
// several devices, each computing a range of node IDs with its replica
// of the model (models[i] on bs[i], all with the same parameters): the
// same tally as Run's, bit for bit (package infer's outputs do not depend
// on the number of devices).
func (ev *Evaluator) RunDevices(bs []backend.Backend, models []nn.Model) (Tally, error) {
	return ev.RunDevicesFrom(bs, models, nil)
}

// RunDevicesFrom is RunDevices with layer 1's input already on the
// devices: inputs[i], when not nil, is a buffer of bs[i] holding the
// evaluator's dense features (its Features' Dense, after the row
// normalization) as float32 rows in node order, which the inference
// reads instead of uploading the features (infer.Options.Inputs: a
// feature cache of every row). The caller owns them. The tally is
// RunDevices', bit for bit on the CPU. nil inputs is RunDevices.
func (ev *Evaluator) RunDevicesFrom(bs []backend.Backend, models []nn.Model, inputs []backend.Buffer) (Tally, error) {
	return ev.runDevices(bs, models, inputs, nil)
}

// RunDevicesShards is RunDevices with layer 1's input held by the
// devices, each some nodes' rows (infer.Options.InputShards: a feature
// cache partitioned over them that caches every row on one device or
// another), read by the inference's exchange between the devices
// instead of a replicated table or a host gather. The rows must be the
// evaluator's dense features' (after the row normalization). The tally
// is RunDevices', bit for bit on the CPU.
func (ev *Evaluator) RunDevicesShards(bs []backend.Backend, models []nn.Model, shards *infer.Shards) (Tally, error) {
	return ev.runDevices(bs, models, nil, shards)
}

func (ev *Evaluator) runDevices(bs []backend.Backend, models []nn.Model, inputs []backend.Buffer, shards *infer.Shards) (Tally, error) {
	if ev.cfg.Eval == Sampled {
		return Tally{}, fmt.Errorf("sampled evaluation is spread over devices with RunShard")
	}
	if len(models) == 0 || len(models) != len(bs) {
		return Tally{}, fmt.Errorf("%d models for %d devices", len(models), len(bs))
	}
	f := ev.in.f
	if ev.keep == nil {
		ev.keep = &infer.Keep{}
	}
	opts := infer.Options{Backends: bs, Models: models, Keep: ev.keep, Inputs: inputs, InputShards: shards}
	if !ev.logged {
		opts.Log, ev.logged = ev.Log, true
	}
	res, err := infer.Run(context.Background(), ev.g, &infer.Input{Rows: f.Rows, Cols: f.Cols, Dense: f.Dense, Sparse: f.Sparse},
		infer.Request{Nodes: ev.nodes}, opts)
	if err != nil {
		return Tally{}, err
	}
	if c := models[0].Config().OutDim; res.Cols != c || res.Rows != len(ev.nodes) {
		return Tally{}, fmt.Errorf("inference produced %dx%d logits, want %dx%d", res.Rows, res.Cols, len(ev.nodes), c)
	}
	return ScoreRows(res.Data, res.Cols, ev.nodes, ev.splits), nil
}

// ScoreRows tallies host logits (one row of classes values per node of
// nodes, which is sorted and holds every node of the splits) as Score
// does on a device: the same argmax (ties to the lower class) and
// cross-entropy.
func ScoreRows(logits []float32, classes int, nodes []int32, splits *[3]Labeled) Tally {
	var t Tally
	for s := range splits {
		sp := &splits[s]
		for i, v := range sp.Rows {
			k, ok := slices.BinarySearch(nodes, v)
			if !ok {
				continue
			}
			row := logits[k*classes : (k+1)*classes]
			t.add(s, nn.Argmax(row), sp.Labels[i])
			if s == SplitVal {
				t.ValLoss += nn.CrossEntropy(row, sp.Labels[i])
			}
		}
	}
	return t
}

// RunShard is Run's sampled evaluation spread over k devices: this one
// (rank) evaluates every k-th batch from batch rank on and returns the
// tally of the nodes of those batches. The k shards' tallies add up
// (Tally.Add) to Run's: the same batches and neighborhoods, so the same
// accuracies; the validation loss may differ in the last bits (the
// summation order). Whole-graph evaluation is spread by RunDevices.
func (ev *Evaluator) RunShard(model nn.Model, rank, k int) (Tally, error) {
	if ev.cfg.Eval != Sampled {
		return Tally{}, fmt.Errorf("whole-graph evaluation cannot be split over devices (use sampled evaluation)")
	}
	if k < 1 || rank < 0 || rank >= k {
		return Tally{}, fmt.Errorf("evaluation shard %d of %d", rank, k)
	}
	return ev.sampled(model, rank, k)
}

// sampled evaluates the nodes of every k-th batch (of EvalBatchSize, with
// EvalFanouts) from batch rank on.
func (ev *Evaluator) sampled(model nn.Model, rank, k int) (Tally, error) {
	c := model.Config().OutDim
	logits := make(map[int32][]float32, len(ev.nodes)/k+1)
	key := rng.Derive(ev.cfg.Seed, tagEval)
	bs := ev.cfg.EvalBatchSize
	for b := rank; b*bs < len(ev.nodes); b += k {
		seeds := ev.nodes[b*bs : min((b+1)*bs, len(ev.nodes))]
		mb, err := ev.smp.Sample(seeds, sample.Key{Seed: key, Batch: b})
		if err != nil {
			return Tally{}, fmt.Errorf("sampling: %w", err)
		}
		if err := ev.batch(model, mb, seeds, c, logits); err != nil {
			return Tally{}, err
		}
	}
	return tallyRows(ev.splits, logits), nil
}

// tallyRows tallies the logits of the split nodes found in logits (one
// row per node; nodes another shard scored are absent).
func tallyRows(splits *[3]Labeled, logits map[int32][]float32) Tally {
	var t Tally
	for s, sp := range splits {
		for i, v := range sp.Rows {
			row := logits[v]
			if row == nil { // another shard's
				continue
			}
			t.add(s, nn.Argmax(row), sp.Labels[i])
			if s == SplitVal {
				t.ValLoss += nn.CrossEntropy(row, sp.Labels[i])
			}
		}
	}
	return t
}

func (ev *Evaluator) batch(model nn.Model, mb *sample.MiniBatch, seeds []int32, c int, out map[int32][]float32) error {
	t := autograd.NewTape(ev.in.b)
	defer t.Release()
	logits, cleanup, err := ev.in.forwardBatch(t, model, mb, false, 0)
	defer cleanup()
	if err != nil {
		return err
	}
	if logits.Rows != len(seeds) || logits.Cols != c {
		return fmt.Errorf("model produced %dx%d logits for %d seeds, want %dx%d", logits.Rows, logits.Cols, len(seeds), len(seeds), c)
	}
	host := make([]float32, logits.Len())
	if err := ev.in.b.Download(host, logits.Value); err != nil {
		return err
	}
	for i, v := range seeds {
		out[v] = host[i*c : (i+1)*c]
	}
	return nil
}
