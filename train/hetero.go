package train

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Typed model kinds (nn.HeteroModel), trained by RunHetero on typed
// datasets (dataset.Hetero).
const (
	RGCN  = nn.KindRGCN
	HSAGE = nn.KindHSAGE
)

// IsHetero reports whether model is a typed model kind (rgcn, hsage).
func IsHetero(model string) bool { return model == RGCN || model == HSAGE }

// HeteroConfig describes one run of RunHetero: sampled mini-batches of
// seeds of the target type, a fanout per relation and hop.
type HeteroConfig struct {
	// Common's Model is rgcn or hsage; Heads and OutHeads are 1, AttnDrop
	// 0, RowNorm off or auto (typed features are used as stored).
	Common
	BatchSize int `json:"batch_size"`
	// Fanouts applies to every relation, one per hop (seeds' hop first;
	// -1 all neighbors); RelFanouts overrides it for the relations it
	// names (full "src___rel___dst" name or the bare relation name when
	// unique), where 0 leaves a relation out at that hop.
	Fanouts    []int            `json:"fanouts"`
	RelFanouts map[string][]int `json:"rel_fanouts,omitempty"`
	// AddReverse trains on dataset.Hetero.AddReverse of the dataset (PyG's
	// ToUndirected), so that types that are only sources receive messages.
	AddReverse bool `json:"add_reverse,omitempty"`
	// Replace and Weighted are the samplers' (sample.HeteroConfig), for
	// every relation; Weighted needs every relation's weights.
	Replace  bool `json:"replace,omitempty"`
	Weighted bool `json:"weighted,omitempty"`
}

// HeteroDefaults returns the settings of a typed model when a flag is
// not given: 2 layers, 64 hidden, dropout 0.5, Adam lr 0.01, weight decay
// 5e-4, batch 64, fanouts 10,10 for every relation, 20 epochs, full
// evaluation, best-validation selection.
func HeteroDefaults(model string) HeteroConfig {
	return HeteroConfig{
		Common: Common{Model: model, Layers: 2, Hidden: 64, Heads: 1, OutHeads: 1, Dropout: 0.5, RowNorm: RowNormOff,
			Optimizer: "adam", LR: 0.01, WeightDecay: 5e-4, Epochs: 20, EvalEvery: 1, Eval: Full,
			EvalBatchSize: 1024, Select: SelectBest, Seed: 1},
		BatchSize: 64, Fanouts: []int{10, 10},
	}
}

// Validate checks every field and returns a *ConfigError naming the
// first bad one. Relation names in RelFanouts are checked against a
// dataset by RunHetero.
func (c *HeteroConfig) Validate() error {
	if !IsHetero(c.Model) {
		return &ConfigError{Field: "model", Msg: fmt.Sprintf("unknown typed model %q (want rgcn or hsage)", c.Model)}
	}
	if c.RowNorm == RowNormOn {
		return &ConfigError{Field: "row_norm", Msg: "typed models use features as stored (row normalization is off)"}
	}
	com := c.Common
	com.Model = SAGE // the shared checks; typed models have no heads either
	if err := com.Validate(); err != nil {
		return err
	}
	if c.BatchSize < 1 || c.BatchSize > MaxBatch {
		return &ConfigError{Field: "batch_size", Msg: fmt.Sprintf("%d not in [1, %d]", c.BatchSize, MaxBatch)}
	}
	if err := checkFanouts("fanouts", c.Fanouts, c.Layers); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(c.RelFanouts)) {
		f := c.RelFanouts[name]
		if len(f) != c.Layers {
			return &ConfigError{Field: "rel_fanouts", Msg: fmt.Sprintf("%s: %d fanouts for %d layers", name, len(f), c.Layers)}
		}
		for i, v := range f {
			if v < -1 || v > MaxFanout {
				return &ConfigError{Field: "rel_fanouts", Msg: fmt.Sprintf("%s: hop %d: fanout %d not in [0, %d] or -1 (all neighbors)", name, i+1, v, MaxFanout)}
			}
		}
	}
	return nil
}

// RelationFanouts resolves c's fanouts against h's relations: one list per
// relation, RelFanouts where it names the relation, Fanouts elsewhere. A
// name that matches no relation, or a bare name several carry, is a
// *ConfigError.
func (c *HeteroConfig) RelationFanouts(h *dataset.Hetero) ([][]int, error) {
	out := make([][]int, len(h.EdgeTypes))
	for r := range out {
		out[r] = slices.Clone(c.Fanouts)
	}
	for _, name := range slices.Sorted(maps.Keys(c.RelFanouts)) {
		switch r := h.EdgeType(name); r {
		case -1:
			return nil, &ConfigError{Field: "rel_fanouts", Msg: fmt.Sprintf("%s names no relation of %s (has %s)", name, h.Name, relationNames(h))}
		case -2:
			return nil, &ConfigError{Field: "rel_fanouts", Msg: fmt.Sprintf("%s: several relations carry that name; use src___rel___dst", name)}
		default:
			out[r] = slices.Clone(c.RelFanouts[name])
		}
	}
	return out, nil
}

func relationNames(h *dataset.Hetero) string {
	var s []string
	for r := range h.EdgeTypes {
		s = append(s, h.EdgeTypeName(r))
	}
	if len(s) == 0 {
		return "none"
	}
	return fmt.Sprint(s)
}

// CheckHetero returns a *DataError saying why h cannot train a node
// classifier, nil if it can.
func CheckHetero(h *dataset.Hetero) error {
	bad := func(format string, args ...any) error { return &DataError{Msg: fmt.Sprintf(format, args...)} }
	if h == nil {
		return bad("no typed dataset")
	}
	if err := dataset.ValidateHetero(h); err != nil {
		return bad("%s: %v", h.Name, err)
	}
	switch {
	case h.Labels == nil || h.NumClasses <= 0:
		return bad("%s has no labels: cannot train a node classifier on it", h.Name)
	case len(h.EdgeTypes) == 0:
		return bad("%s has no relations", h.Name)
	case len(h.Train) == 0:
		return bad("%s has no training nodes", h.Name)
	case len(h.Val) == 0 || len(h.Test) == 0:
		return bad("%s needs validation and test nodes (has %d and %d)", h.Name, len(h.Val), len(h.Test))
	}
	for _, s := range []struct {
		name string
		ids  []int32
	}{{"train", h.Train}, {"val", h.Val}, {"test", h.Test}} {
		for i, v := range s.ids {
			if l := h.Labels[v]; l < 0 {
				return bad("%s: %s node %d (position %d) is unlabeled", h.Name, s.name, v, i)
			}
		}
	}
	return nil
}

// HeteroReport is a typed run's report: Report's fields (Config holds the
// common settings, batch size and default fanouts) and the types.
type HeteroReport struct {
	*Report
	Hetero HeteroSummary `json:"hetero"`
}

// HeteroSummary describes the types of the dataset a typed model trained on.
type HeteroSummary struct {
	Target     string          `json:"target"`
	NodeTypes  []NodeTypeStats `json:"node_types"`
	EdgeTypes  []EdgeTypeStats `json:"edge_types"`
	AddReverse bool            `json:"add_reverse"`
}

// NodeTypeStats is one node type of a HeteroSummary.
type NodeTypeStats struct {
	Name     string `json:"name"`
	Nodes    int64  `json:"nodes"`
	Features int    `json:"features"`
}

// EdgeTypeStats is one relation of a HeteroSummary, with the fanouts it
// was sampled with.
type EdgeTypeStats struct {
	Name    string `json:"name"`
	Edges   int64  `json:"edges"`
	Fanouts []int  `json:"fanouts"`
}

// WriteJSON writes the report to path (indented JSON), atomically.
func (r *HeteroReport) WriteJSON(path string) error {
	if err := atomicfile.WriteJSON(path, r); err != nil {
		return fmt.Errorf("train: writing %s: %w", path, err)
	}
	return nil
}

// heteroRunner holds one typed run's state.
type heteroRunner struct {
	cfg    HeteroConfig
	opts   Options
	b      backend.Backend
	h      *dataset.Hetero
	rels   []nn.HeteroRel
	fan    [][]int
	model  *nn.HeteroModel
	opt    optim.Optimizer
	smp    *sample.HeteroSampler
	evSmp  *sample.HeteroSampler // sampled evaluation
	full   *nn.HeteroBlock       // full evaluation: the whole graph
	xFull  []backend.Buffer      // full evaluation: every type's inputs
	splits *[3]Labeled
}

// RunHetero trains cfg's typed model (rgcn or hsage) on h with sampled
// mini-batches of target-type seeds and returns the report. Defaults are
// not applied: start from HeteroDefaults. Checkpoints are not supported
// yet (Options.CheckpointDir must be empty) nor is Options.Batches. A
// cancelled ctx stops the run between batches with an error wrapping
// ErrInterrupted.
//
// Every random choice is keyed as in Run: initial weights by the seed,
// the order of the training nodes by (seed, epoch), a batch's
// neighborhoods by sample.Key{seed, epoch, batch} and its dropout by
// DropoutSeed(epoch, batch); so two runs with the same configuration give
// the same losses bit for bit, whatever the number of goroutines.
func RunHetero(ctx context.Context, h *dataset.Hetero, cfg HeteroConfig, opts Options) (*HeteroReport, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Backend == nil {
		return nil, &RunError{Op: "setup", Err: errors.New("no back end")}
	}
	if opts.CheckpointDir != "" || opts.Resume || opts.Batches != nil {
		return nil, &ConfigError{Field: "checkpoint", Msg: "typed models do not support checkpoints or batch sources yet"}
	}
	if err := CheckHetero(h); err != nil {
		return nil, err
	}
	if cfg.AddReverse {
		var err error
		if h, err = h.AddReverse(); err != nil {
			return nil, &RunError{Op: "reverse relations", Err: err}
		}
	}
	if cfg.Weighted {
		for e, et := range h.EdgeTypes {
			if et.In.Weights == nil {
				return nil, &ConfigError{Field: "weighted", Msg: fmt.Sprintf("relation %s of %s has no edge weights", h.EdgeTypeName(e), h.Name)}
			}
		}
	}
	r, err := newHeteroRunner(h, cfg, opts)
	if err != nil {
		return nil, err
	}
	defer r.free()
	rep, err := r.loop(ctx)
	if err != nil {
		return nil, err
	}
	rep.TotalSeconds = time.Since(start).Seconds()
	return rep, nil
}

func newHeteroRunner(h *dataset.Hetero, cfg HeteroConfig, opts Options) (*heteroRunner, error) {
	r := &heteroRunner{cfg: cfg, opts: opts, b: opts.Backend, h: h}
	ok := false
	defer func() {
		if !ok {
			r.free()
		}
	}()
	var err error
	if r.fan, err = cfg.RelationFanouts(h); err != nil {
		return nil, err
	}
	T := len(h.NodeTypes)
	schema := nn.HeteroSchema{NodeTypes: make([]string, T), InDims: make([]int, T), Target: h.Target}
	numNodes := make([]int64, T)
	for t, nt := range h.NodeTypes {
		schema.NodeTypes[t], schema.InDims[t], numNodes[t] = nt.Name, nt.FeatDim, nt.NumNodes
	}
	srels := make([]sample.Relation, len(h.EdgeTypes))
	for e, et := range h.EdgeTypes {
		r.rels = append(r.rels, nn.HeteroRel{Src: et.Src, Dst: et.Dst, Name: h.EdgeTypeName(e)})
		srels[e] = sample.Relation{Src: et.Src, Dst: et.Dst, In: et.In}
	}
	schema.Rels = r.rels
	if r.model, err = nn.NewHetero(r.b, nn.HeteroConfig{Kind: cfg.Model, Schema: schema, Hidden: cfg.Hidden,
		OutDim: h.NumClasses, Layers: cfg.Layers, Dropout: float32(cfg.Dropout), InputDropout: float32(cfg.Dropout),
		Seed: rng.Derive(cfg.Seed, tagInit)}); err != nil {
		return nil, &RunError{Op: "model", Err: err}
	}
	r.opt = cfg.NewOptimizer(r.b, r.model.Params())
	if r.smp, err = sample.NewHeteroSampler(numNodes, srels, sample.HeteroConfig{Fanouts: r.fan, Replace: cfg.Replace, Weighted: cfg.Weighted}); err != nil {
		return nil, &RunError{Op: "sampler", Err: err}
	}
	if cfg.Eval == Sampled {
		ef := make([][]int, len(srels))
		for e := range ef {
			ef[e] = cfg.EvalFanouts
		}
		if r.evSmp, err = sample.NewHeteroSampler(numNodes, srels, sample.HeteroConfig{Fanouts: ef, Replace: cfg.Replace, Weighted: cfg.Weighted}); err != nil {
			return nil, &RunError{Op: "sampler", Err: err}
		}
	}
	var sp [3]Labeled
	for s, nodes := range [][]int32{h.Train, h.Val, h.Test} {
		sp[s].Rows = nodes
		sp[s].Labels = make([]int32, len(nodes))
		for i, v := range nodes {
			sp[s].Labels[i] = h.Labels[v]
		}
	}
	r.splits = &sp
	ok = true
	return r, nil
}

func (r *heteroRunner) free() {
	if r.model != nil {
		nn.FreeParams(r.b, r.model.Params())
		r.model = nil
	}
	if r.opt != nil {
		r.opt.Free()
		r.opt = nil
	}
	r.full.Free()
	r.full = nil
	for _, x := range r.xFull {
		if x != nil {
			r.b.Free(x)
		}
	}
	r.xFull = nil
}

func (r *heteroRunner) logf(format string, args ...any) {
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, format+"\n", args...)
	}
}

// loop runs every epoch and builds the report.
func (r *heteroRunner) loop(ctx context.Context) (*HeteroReport, error) {
	cfg := r.cfg
	numBatches := (len(r.h.Train) + cfg.BatchSize - 1) / cfg.BatchSize
	every := LogEvery(cfg.Epochs)
	var history []EpochRecord
	var bar *progress.Bar
	barEnd := -1
	for e := 0; e < cfg.Epochs; e++ {
		if e > barEnd {
			barEnd = min(cfg.Epochs-1, (e/every+1)*every-1)
			bar = progress.New(int64(barEnd-e+1)*int64(numBatches), fmt.Sprintf("epoch %d/%d", e+1, cfg.Epochs))
		}
		t0 := time.Now()
		order := Shuffled(r.h.Train, cfg.Seed, e)
		var losses []float64
		for bi := 0; bi < numBatches; bi++ {
			if err := ctx.Err(); err != nil {
				bar.Finish()
				return nil, &RunError{Op: fmt.Sprintf("epoch %d batch %d", e+1, bi), Err: fmt.Errorf("%w: %v", ErrInterrupted, err)}
			}
			seeds := order[bi*cfg.BatchSize : min((bi+1)*cfg.BatchSize, len(order))]
			loss, err := r.step(e, bi, seeds)
			if err != nil {
				bar.Finish()
				return nil, &RunError{Op: fmt.Sprintf("epoch %d batch %d", e+1, bi), Err: err}
			}
			losses = append(losses, loss)
			bar.Add(1)
			bar.Describe(fmt.Sprintf("epoch %d/%d loss %.4f", e+1, cfg.Epochs, loss))
			if r.opts.OnBatch != nil {
				r.opts.OnBatch(e, bi, loss)
			}
		}
		rec := EpochRecord{Epoch: e + 1, BatchLosses: losses, Loss: MeanLoss(losses)}
		if cfg.Evaluates(e) {
			te := time.Now()
			t, err := r.evaluate()
			if err != nil {
				bar.Finish()
				return nil, &RunError{Op: fmt.Sprintf("epoch %d evaluation", e+1), Err: err}
			}
			rec.SetEvaluation(&t)
			rec.EvalSeconds = time.Since(te).Seconds()
		} else {
			rec.SetEvaluation(nil)
		}
		rec.Seconds = time.Since(t0).Seconds()
		history = append(history, rec)
		if e == barEnd {
			bar.Finish()
		}
		if e == barEnd || e == 0 {
			r.logf("%s", EpochLine(&rec, cfg.Epochs))
		}
	}
	return r.report(history), nil
}

func (r *heteroRunner) report(history []EpochRecord) *HeteroReport {
	h, cfg := r.h, r.cfg
	tgt := h.NodeTypes[h.Target]
	rep := &Report{Schema: ReportVersion, StrataVersion: Version, Dataset: h.Name, Model: cfg.Model, Mode: Sampled,
		Device: r.b.Name(), Seed: cfg.Seed, Epochs: history,
		Config: Config{Common: cfg.Common, Mode: Sampled, BatchSize: cfg.BatchSize, Fanouts: cfg.Fanouts},
		Graph: GraphStats{Nodes: h.NumNodes(), Edges: h.NumEdges(), Features: tgt.FeatDim, Classes: h.NumClasses,
			Train: len(h.Train), Val: len(h.Val), Test: len(h.Test)}}
	rep.Summarize()
	hs := HeteroSummary{Target: tgt.Name, AddReverse: cfg.AddReverse}
	for _, nt := range h.NodeTypes {
		hs.NodeTypes = append(hs.NodeTypes, NodeTypeStats{Name: nt.Name, Nodes: nt.NumNodes, Features: nt.FeatDim})
	}
	for e, et := range h.EdgeTypes {
		hs.EdgeTypes = append(hs.EdgeTypes, EdgeTypeStats{Name: h.EdgeTypeName(e), Edges: et.In.NumEdges(), Fanouts: r.fan[e]})
	}
	return &HeteroReport{Report: rep, Hetero: hs}
}

// inputs returns, per type, the input rows of the listed nodes (nil where
// the model does not read them or there are none) on the tape: the rows
// of the type's features, or ones for a type without features.
func (r *heteroRunner) inputs(t *autograd.Tape, nodes [][]int32) ([]*autograd.Var, error) {
	xs := make([]*autograd.Var, len(nodes))
	for ty, ids := range nodes {
		if len(ids) == 0 || !r.model.NeedsInput(ty) {
			continue
		}
		nt := r.h.NodeTypes[ty]
		w := max(nt.FeatDim, 1)
		rows := make([]float32, len(ids)*w)
		if nt.FeatDim == 0 {
			for i := range rows {
				rows[i] = 1
			}
		} else {
			for i, v := range ids {
				copy(rows[i*w:(i+1)*w], nt.Features[int64(v)*int64(w):(int64(v)+1)*int64(w)])
			}
		}
		x, err := t.Upload(rows, len(ids), w)
		if err != nil {
			return nil, err
		}
		xs[ty] = x
	}
	return xs, nil
}

// step samples the batch of seeds and runs one training step.
func (r *heteroRunner) step(epoch, batch int, seeds []int32) (float64, error) {
	mb, err := r.smp.Sample(r.h.Target, seeds, sample.Key{Seed: r.cfg.Seed, Epoch: epoch, Batch: batch})
	if err != nil {
		return 0, fmt.Errorf("sampling: %w", err)
	}
	blocks, err := nn.UploadHeteroBlocks(r.b, r.rels, mb)
	if err != nil {
		return 0, err
	}
	defer func() {
		for _, k := range blocks {
			k.Free()
		}
	}()
	t := autograd.NewTape(r.b)
	defer t.Release()
	xs, err := r.inputs(t, mb.Blocks[0].SrcNodes)
	if err != nil {
		return 0, err
	}
	logits, err := r.model.Forward(t, xs, blocks, true, r.cfg.DropoutSeed(epoch, batch))
	if err != nil {
		return 0, err
	}
	rows := make([]int32, len(seeds))
	labels := make([]int32, len(seeds))
	for i, v := range seeds {
		rows[i], labels[i] = int32(i), r.h.Labels[v]
	}
	rowsBuf, err := upload(r.b, rows)
	if err != nil {
		return 0, err
	}
	defer r.b.Free(rowsBuf)
	labelsBuf, err := upload(r.b, labels)
	if err != nil {
		return 0, err
	}
	defer r.b.Free(labelsBuf)
	logp, err := t.LogSoftmax(logits)
	if err != nil {
		return 0, err
	}
	lossVar, loss, err := t.NLLLoss(logp, rowsBuf, labelsBuf)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, fmt.Errorf("loss is %v (diverged: lower the learning rate)", loss)
	}
	if err := r.opt.ZeroGrad(); err != nil {
		return 0, err
	}
	if err := t.Backward(lossVar); err != nil {
		return 0, err
	}
	if err := r.opt.Step(); err != nil {
		return 0, err
	}
	return loss, nil
}

// evaluate scores the model without dropout: on the whole graph in one
// pass (Eval full) or on sampled batches of the split nodes.
func (r *heteroRunner) evaluate() (Tally, error) {
	if r.cfg.Eval == Sampled {
		return r.evaluateSampled()
	}
	h := r.h
	if r.full == nil {
		n := make([]int, len(h.NodeTypes))
		for t, nt := range h.NodeTypes {
			n[t] = int(nt.NumNodes)
		}
		ip := make([][]int64, len(h.EdgeTypes))
		ix := make([][]int32, len(h.EdgeTypes))
		for e, et := range h.EdgeTypes {
			ip[e], ix[e] = et.In.Indptr, et.In.Indices
		}
		var err error
		if r.full, err = nn.NewHeteroBlock(r.b, r.rels, n, n, ip, ix); err != nil {
			return Tally{}, err
		}
	}
	t := autograd.NewTape(r.b)
	defer t.Release()
	if r.xFull == nil {
		// Upload every type's inputs once, kept for later evaluations.
		all := make([][]int32, len(h.NodeTypes))
		for ty, nt := range h.NodeTypes {
			all[ty] = make([]int32, nt.NumNodes)
			for i := range all[ty] {
				all[ty][i] = int32(i)
			}
		}
		tmp := autograd.NewTape(r.b)
		xs, err := r.inputs(tmp, all)
		if err != nil {
			tmp.Release()
			return Tally{}, err
		}
		r.xFull = make([]backend.Buffer, len(xs))
		for ty, x := range xs {
			if x == nil {
				continue
			}
			if r.xFull[ty], err = r.b.Alloc(backend.Float32, x.Len()); err == nil {
				err = r.b.Copy(r.xFull[ty], x.Value)
			}
			if err != nil {
				tmp.Release()
				return Tally{}, err
			}
		}
		tmp.Release()
	}
	xs := make([]*autograd.Var, len(h.NodeTypes))
	for ty, buf := range r.xFull {
		if buf == nil {
			continue
		}
		var err error
		if xs[ty], err = t.Const(buf, int(h.NodeTypes[ty].NumNodes), max(h.NodeTypes[ty].FeatDim, 1)); err != nil {
			return Tally{}, err
		}
	}
	blocks := make([]*nn.HeteroBlock, r.cfg.Layers)
	for i := range blocks {
		blocks[i] = r.full
	}
	out, err := r.model.Forward(t, xs, blocks, false, 0)
	if err != nil {
		return Tally{}, err
	}
	n, c := int(h.NodeTypes[h.Target].NumNodes), h.NumClasses
	if out.Rows != n || out.Cols != c {
		return Tally{}, fmt.Errorf("model produced %dx%d logits, want %dx%d", out.Rows, out.Cols, n, c)
	}
	return Score(r.b, out.Value, n, c, r.splits)
}

// evaluateSampled scores the split nodes in batches of EvalBatchSize
// whose neighborhoods are sampled with EvalFanouts (every relation), with
// a key that does not depend on the epoch.
func (r *heteroRunner) evaluateSampled() (Tally, error) {
	var nodes []int32
	for _, sp := range r.splits {
		nodes = append(nodes, sp.Rows...)
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	c := r.h.NumClasses
	logits := make(map[int32][]float32, len(nodes))
	key := rng.Derive(r.cfg.Seed, tagEval)
	bs := r.cfg.EvalBatchSize
	for bi := 0; bi*bs < len(nodes); bi++ {
		seeds := nodes[bi*bs : min((bi+1)*bs, len(nodes))]
		mb, err := r.evSmp.Sample(r.h.Target, seeds, sample.Key{Seed: key, Batch: bi})
		if err != nil {
			return Tally{}, fmt.Errorf("sampling: %w", err)
		}
		err = func() error {
			blocks, err := nn.UploadHeteroBlocks(r.b, r.rels, mb)
			if err != nil {
				return err
			}
			defer func() {
				for _, k := range blocks {
					k.Free()
				}
			}()
			t := autograd.NewTape(r.b)
			defer t.Release()
			xs, err := r.inputs(t, mb.Blocks[0].SrcNodes)
			if err != nil {
				return err
			}
			out, err := r.model.Forward(t, xs, blocks, false, 0)
			if err != nil {
				return err
			}
			host := make([]float32, out.Len())
			if err := r.b.Download(host, out.Value); err != nil {
				return err
			}
			for i, v := range seeds {
				logits[v] = host[i*c : (i+1)*c]
			}
			return nil
		}()
		if err != nil {
			return Tally{}, err
		}
	}
	var t Tally
	for s, sp := range r.splits {
		for i, v := range sp.Rows {
			t.add(s, nn.Argmax(logits[v]), sp.Labels[i])
			if s == SplitVal {
				t.ValLoss += nn.CrossEntropy(logits[v], sp.Labels[i])
			}
		}
	}
	return t, nil
}
