package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
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
	// Multi describes a run on several devices (dsp/engine's
	// RunHetero); nil on one.
	Multi *MultiDevice `json:"multi_device,omitempty"`
}

// MultiDevice describes a typed run's devices: how many, their
// communicators (the kind and why it was chosen) and the mean training
// seconds of an epoch after the first (evaluation excluded).
type MultiDevice struct {
	Devices            int     `json:"devices"`
	Comm               string  `json:"comm"`
	CommReason         string  `json:"comm_reason"`
	BatchesPerDevice   int     `json:"batches_per_device"`
	SteadyEpochSeconds float64 `json:"steady_epoch_seconds"`
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

// RunHetero trains cfg's typed model (rgcn or hsage) on h with sampled
// mini-batches of target-type seeds and returns the report. Defaults are
// not applied: start from HeteroDefaults. Checkpoints are not supported
// yet (Options.CheckpointDir must be empty) nor is Options.Batches. With
// Options.Replica the run is one replica of a data-parallel run on
// several devices (Replica: its share of every epoch's batches, the
// gradients averaged every step; only replica 0 evaluates). A
// cancelled ctx stops the run between batches with an error wrapping
// ErrInterrupted.
//
// It is Run's trainer (the same Loop and step) with typed batches
// (typedSource) and a typed evaluation (typedEval), so every random
// choice is keyed as in Run: initial weights by the seed, the order of
// the training nodes by (seed, epoch), a batch's neighborhoods by
// sample.Key{seed, epoch, batch} and its dropout by DropoutSeed(epoch,
// batch); two runs with the same configuration give the same losses bit
// for bit, whatever the number of goroutines.
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
	rp := opts.Replica
	if rp != nil {
		if err := rp.check(); err != nil {
			return nil, err
		}
	}
	if rp == nil || !rp.Prepared {
		if err := CheckHetero(h); err != nil {
			return nil, err
		}
		var err error
		if h, err = cfg.Graph(h); err != nil {
			return nil, err
		}
	}
	fan, err := cfg.RelationFanouts(h)
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: Config{Common: cfg.Common, Mode: Sampled, BatchSize: cfg.BatchSize, Fanouts: cfg.Fanouts},
		opts: opts, b: opts.Backend, trainNodes: h.Train, labels: h.Labels, rep: opts.Replica}
	defer r.free()
	model, err := NewTypedModel(r.b, h, cfg.Common, h.NumClasses, nil)
	if err != nil {
		return nil, err
	}
	r.model = model
	if r.rep != nil && r.rep.Size > 1 {
		if err := r.shareGrads(model.Params()); err != nil {
			return nil, err
		}
	}
	r.opt = cfg.NewOptimizer(r.b, model.Params())
	in := &TypedInputs{B: r.b, H: h, Model: model}
	smp, err := cfg.typedSampler(r.b, opts.TypedSampler, h, fan)
	if err != nil {
		return nil, err
	}
	r.src = &typedSource{in: in, smp: smp, seedType: h.Target}
	if r.lead() {
		ev := &typedEval{in: in, layers: cfg.Layers, splits: labeledSplits(h.Train, h.Val, h.Test, h.Labels)}
		r.eval = ev
		if cfg.Eval == Sampled {
			ef := make([][]int, len(h.EdgeTypes))
			for e := range ef {
				ef[e] = cfg.EvalFanouts
			}
			// A replica's training sampler is a collective: replica 0
			// evaluates alone, with a sampler of its own.
			mk := opts.TypedSampler
			if r.rep != nil {
				mk = r.rep.EvalSampler
			}
			evSmp, err := cfg.typedSampler(r.b, mk, h, ef)
			if err != nil {
				return nil, err
			}
			ev.sampled = &typedSource{in: in, smp: evSmp, seedType: h.Target}
			ev.key, ev.batchSize = rng.Derive(cfg.Seed, tagEval), cfg.EvalBatchSize
		}
	}
	r.numBatches = (len(h.Train) + cfg.BatchSize - 1) / cfg.BatchSize
	if r.rep != nil {
		r.numBatches = r.rep.Batches
	}
	r.setLoop()
	if err := r.loop.Run(ctx, r); err != nil {
		return nil, err
	}
	if r.rep != nil && r.rep.Done != nil {
		if err := r.rep.Done(model.Params()); err != nil {
			return nil, &RunError{Op: "replica check", Err: err}
		}
	}
	rep := heteroReport(h, cfg, r.b.Name(), fan, r.history)
	rep.TotalSeconds = time.Since(start).Seconds()
	return rep, nil
}

// Graph is the graph cfg trains on: h, or h with its reverse relations
// (AddReverse), after checking that Weighted has every relation's
// weights.
func (c *HeteroConfig) Graph(h *dataset.Hetero) (*dataset.Hetero, error) {
	if c.AddReverse {
		var err error
		if h, err = h.AddReverse(); err != nil {
			return nil, &RunError{Op: "reverse relations", Err: err}
		}
	}
	if c.Weighted {
		for e, et := range h.EdgeTypes {
			if et.In.Weights == nil {
				return nil, &ConfigError{Field: "weighted", Msg: fmt.Sprintf("relation %s of %s has no edge weights", h.EdgeTypeName(e), h.Name)}
			}
		}
	}
	return h, nil
}

// NewSampler is the typed neighbor sampler of h's relations with fanouts
// (one list per relation) and c's Replace and Weighted.
func (c *HeteroConfig) NewSampler(h *dataset.Hetero, fanouts [][]int) (*sample.HeteroSampler, error) {
	numNodes, srels := samplerGraph(h)
	smp, err := sample.NewHeteroSampler(numNodes, srels, sample.HeteroConfig{Fanouts: fanouts, Replace: c.Replace, Weighted: c.Weighted})
	if err != nil {
		return nil, &RunError{Op: "sampler", Err: err}
	}
	return smp, nil
}

// NewTypedSampler makes a typed sampler of the relations rels (node
// counts numNodes) with cfg on b, for RunHetero (Options.TypedSampler).
// A sampler that is an io.Closer is closed when the run ends.
type NewTypedSampler func(b backend.Backend, numNodes []int64, rels []sample.Relation, cfg sample.HeteroConfig) (sample.TypedSampler, error)

// TypedSampler is the sampler RunHetero draws with: NewSampler's, or
// with mk the one mk makes on b (package link's typed runs use it too).
func (c *HeteroConfig) TypedSampler(b backend.Backend, mk NewTypedSampler, h *dataset.Hetero, fanouts [][]int) (sample.TypedSampler, error) {
	return c.typedSampler(b, mk, h, fanouts)
}

// typedSampler is NewSampler's sampler, or with mk the one mk makes on b.
func (c *HeteroConfig) typedSampler(b backend.Backend, mk NewTypedSampler, h *dataset.Hetero, fanouts [][]int) (sample.TypedSampler, error) {
	if mk == nil {
		return c.NewSampler(h, fanouts)
	}
	numNodes, srels := samplerGraph(h)
	smp, err := mk(b, numNodes, srels, sample.HeteroConfig{Fanouts: fanouts, Replace: c.Replace, Weighted: c.Weighted})
	if err != nil {
		return nil, &RunError{Op: "sampler", Err: err}
	}
	return smp, nil
}

// samplerGraph is h as the typed samplers read it.
func samplerGraph(h *dataset.Hetero) ([]int64, []sample.Relation) {
	numNodes := make([]int64, len(h.NodeTypes))
	for t, nt := range h.NodeTypes {
		numNodes[t] = nt.NumNodes
	}
	srels := make([]sample.Relation, len(h.EdgeTypes))
	for e, et := range h.EdgeTypes {
		srels[e] = sample.Relation{Src: et.Src, Dst: et.Dst, In: et.In}
	}
	return numNodes, srels
}

// HeteroRels are h's relations as a typed model names them.
func HeteroRels(h *dataset.Hetero) []nn.HeteroRel {
	rels := make([]nn.HeteroRel, len(h.EdgeTypes))
	for e, et := range h.EdgeTypes {
		rels[e] = nn.HeteroRel{Src: et.Src, Dst: et.Dst, Name: h.EdgeTypeName(e)}
	}
	return rels
}

// NewTypedModel builds c's typed model (Model rgcn or hsage, Layers,
// Hidden, Dropout; initial weights keyed by the seed) for h's types and
// relations on b, with outDim outputs for h's target type and the types
// in outputs (link prediction's endpoint types; the target is then the
// first of them when h has no labels).
func NewTypedModel(b backend.Backend, h *dataset.Hetero, c Common, outDim int, outputs []int) (*nn.HeteroModel, error) {
	schema := TypedSchema(h, outputs)
	m, err := nn.NewHetero(b, nn.HeteroConfig{Kind: c.Model, Schema: schema, Hidden: c.Hidden,
		OutDim: outDim, Layers: c.Layers, Dropout: float32(c.Dropout), InputDropout: float32(c.Dropout),
		Seed: rng.Derive(c.Seed, tagInit)})
	if err != nil {
		return nil, &RunError{Op: "model", Err: err}
	}
	return m, nil
}

// TypedSchema is h's schema as NewTypedModel builds a model for it:
// its node types and feature widths, its relations, the target (the
// first of outputs when there are some) and outputs.
func TypedSchema(h *dataset.Hetero, outputs []int) nn.HeteroSchema {
	T := len(h.NodeTypes)
	schema := nn.HeteroSchema{NodeTypes: make([]string, T), InDims: make([]int, T), Target: h.Target,
		Rels: HeteroRels(h), Outputs: outputs}
	if len(outputs) > 0 {
		schema.Target = outputs[0]
	}
	for t, nt := range h.NodeTypes {
		schema.NodeTypes[t], schema.InDims[t] = nt.Name, nt.FeatDim
	}
	return schema
}

func heteroReport(h *dataset.Hetero, cfg HeteroConfig, device string, fan [][]int, history []EpochRecord) *HeteroReport {
	tgt := h.NodeTypes[h.Target]
	rep := &Report{Schema: ReportVersion, StrataVersion: Version, Dataset: h.Name, Model: cfg.Model, Mode: Sampled,
		Device: device, Seed: cfg.Seed, Epochs: history,
		Config: Config{Common: cfg.Common, Mode: Sampled, BatchSize: cfg.BatchSize, Fanouts: cfg.Fanouts},
		Graph: GraphStats{Nodes: h.NumNodes(), Edges: h.NumEdges(), Features: tgt.FeatDim, Classes: h.NumClasses,
			Train: len(h.Train), Val: len(h.Val), Test: len(h.Test)}}
	rep.Summarize()
	return &HeteroReport{Report: rep, Hetero: SummarizeTypes(h, cfg.AddReverse, fan)}
}

// SummarizeTypes describes h's types for a report: the target, every
// node type and every relation with its fanouts.
func SummarizeTypes(h *dataset.Hetero, addReverse bool, fan [][]int) HeteroSummary {
	hs := HeteroSummary{AddReverse: addReverse}
	if h.Target >= 0 {
		hs.Target = h.NodeTypes[h.Target].Name
	}
	for _, nt := range h.NodeTypes {
		hs.NodeTypes = append(hs.NodeTypes, NodeTypeStats{Name: nt.Name, Nodes: nt.NumNodes, Features: nt.FeatDim})
	}
	for e, et := range h.EdgeTypes {
		hs.EdgeTypes = append(hs.EdgeTypes, EdgeTypeStats{Name: h.EdgeTypeName(e), Edges: et.In.NumEdges(), Fanouts: fan[e]})
	}
	return hs
}

// TypedInputs feeds a typed model: per node type, the input rows of
// listed nodes (the type's features, or ones for a type without
// features) on a tape, and the forward pass of a sampled typed batch.
type TypedInputs struct {
	B     backend.Backend
	H     *dataset.Hetero
	Model *nn.HeteroModel
}

// Rows returns, per type, the input rows of the listed nodes on the tape
// (nil where the model does not read them or there are none).
func (x *TypedInputs) Rows(t *autograd.Tape, nodes [][]int32) ([]*autograd.Var, error) {
	xs := make([]*autograd.Var, len(nodes))
	for ty, ids := range nodes {
		if len(ids) == 0 || !x.Model.NeedsInput(ty) {
			continue
		}
		nt := x.H.NodeTypes[ty]
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
		v, err := t.Upload(rows, len(ids), w)
		if err != nil {
			return nil, err
		}
		xs[ty] = v
	}
	return xs, nil
}

// ForwardBatch uploads mb's blocks, gathers its inputs and runs the
// model (ForwardTypes): per type, the rows of mb's seeds of that type.
// cleanup frees the blocks: call it after the tape is released.
func (x *TypedInputs) ForwardBatch(t *autograd.Tape, mb *sample.HeteroMiniBatch, train bool, seed uint64) ([]*autograd.Var, func(), error) {
	blocks, err := nn.UploadHeteroBlocks(x.B, x.Model.Config().Schema.Rels, mb)
	cleanup := func() {
		for _, k := range blocks {
			k.Free()
		}
	}
	if err != nil {
		return nil, cleanup, err
	}
	xs, err := x.Rows(t, mb.Blocks[0].SrcNodes)
	if err != nil {
		return nil, cleanup, err
	}
	out, err := x.Model.ForwardTypes(t, xs, blocks, train, seed)
	return out, cleanup, err
}

// typedSource draws typed batches seeded by nodes of seedType.
type typedSource struct {
	in       *TypedInputs
	smp      sample.TypedSampler
	seedType int
}

type typedBatch struct {
	s       *typedSource
	mb      *sample.HeteroMiniBatch
	cleanup func()
}

func (s *typedSource) next(seeds []int32, key sample.Key) (batch, error) {
	mb, err := s.smp.Sample(s.seedType, seeds, key)
	if err != nil {
		return nil, err
	}
	return &typedBatch{s: s, mb: mb}, nil
}

func (s *typedSource) prefetch([]int32, sample.Key) error { return nil }
func (s *typedSource) deviceLoss() bool                   { return false }

// close closes a sampler that holds resources (a GPU's).
func (s *typedSource) close() {
	if c, ok := s.smp.(io.Closer); ok {
		c.Close()
	}
}

func (b *typedBatch) forward(t *autograd.Tape, train bool, seed uint64) (*autograd.Var, error) {
	out, cleanup, err := b.s.in.ForwardBatch(t, b.mb, train, seed)
	b.cleanup = cleanup
	if err != nil {
		return nil, err
	}
	if y := out[b.s.seedType]; y != nil {
		return y, nil
	}
	return nil, fmt.Errorf("typed model computed no rows of the seeds' type %d", b.s.seedType)
}

func (b *typedBatch) release() {
	if b.cleanup != nil {
		b.cleanup()
	}
}

// typedEval scores a typed model without dropout: on the whole graph in
// one pass (Eval full: the graph's block and every type's inputs
// uploaded once, kept for later evaluations) or, with sampled set, on
// batches of the split nodes whose neighborhoods are sampled with
// EvalFanouts (every relation) under a key that does not depend on the
// epoch.
type typedEval struct {
	in        *TypedInputs
	layers    int
	splits    *[3]Labeled
	full      *nn.HeteroBlock
	xFull     []backend.Buffer
	sampled   *typedSource
	key       uint64
	batchSize int
}

func (ev *typedEval) close() {
	if ev.sampled != nil {
		ev.sampled.close()
		ev.sampled = nil
	}
	ev.full.Free()
	ev.full = nil
	for _, x := range ev.xFull {
		if x != nil {
			ev.in.B.Free(x)
		}
	}
	ev.xFull = nil
}

func (ev *typedEval) evaluate() (Tally, error) {
	if ev.sampled != nil {
		return ev.evaluateSampled()
	}
	b, h := ev.in.B, ev.in.H
	t := autograd.NewTape(b)
	defer t.Release()
	xs, blocks, err := ev.wholeGraph(t, ev.layers)
	if err != nil {
		return Tally{}, err
	}
	out, err := ev.in.Model.Forward(t, xs, blocks, false, 0)
	if err != nil {
		return Tally{}, err
	}
	n, c := int(h.NodeTypes[h.Target].NumNodes), h.NumClasses
	if out.Rows != n || out.Cols != c {
		return Tally{}, fmt.Errorf("model produced %dx%d logits, want %dx%d", out.Rows, out.Cols, n, c)
	}
	return Score(b, out.Value, n, c, ev.splits)
}

// wholeGraph uploads the whole graph once (upload) and returns every
// type's inputs as constants of t and the whole graph's block for each
// of k layers.
func (ev *typedEval) wholeGraph(t *autograd.Tape, k int) ([]*autograd.Var, []*nn.HeteroBlock, error) {
	if err := ev.upload(); err != nil {
		return nil, nil, err
	}
	h := ev.in.H
	xs := make([]*autograd.Var, len(h.NodeTypes))
	for ty, buf := range ev.xFull {
		if buf == nil {
			continue
		}
		var err error
		if xs[ty], err = t.Const(buf, int(h.NodeTypes[ty].NumNodes), max(h.NodeTypes[ty].FeatDim, 1)); err != nil {
			return nil, nil, err
		}
	}
	blocks := make([]*nn.HeteroBlock, k)
	for i := range blocks {
		blocks[i] = ev.full
	}
	return xs, blocks, nil
}

// upload puts the whole graph's block and every type's inputs on the
// back end, once.
func (ev *typedEval) upload() error {
	b, h := ev.in.B, ev.in.H
	if ev.full == nil {
		var err error
		if ev.full, err = UploadTypedGraph(b, h); err != nil {
			return err
		}
	}
	if ev.xFull != nil {
		return nil
	}
	all := make([][]int32, len(h.NodeTypes))
	for ty, nt := range h.NodeTypes {
		all[ty] = make([]int32, nt.NumNodes)
		for i := range all[ty] {
			all[ty][i] = int32(i)
		}
	}
	tmp := autograd.NewTape(b)
	defer tmp.Release()
	xs, err := ev.in.Rows(tmp, all)
	if err != nil {
		return err
	}
	ev.xFull = make([]backend.Buffer, len(xs))
	for ty, x := range xs {
		if x == nil {
			continue
		}
		if ev.xFull[ty], err = b.Alloc(backend.Float32, x.Len()); err == nil {
			err = b.Copy(ev.xFull[ty], x.Value)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// UploadTypedGraph is h's whole graph as one typed block (every node of
// every type both a source and a destination), for whole-graph passes.
func UploadTypedGraph(b backend.Backend, h *dataset.Hetero) (*nn.HeteroBlock, error) {
	n := make([]int, len(h.NodeTypes))
	for t, nt := range h.NodeTypes {
		n[t] = int(nt.NumNodes)
	}
	ip := make([][]int64, len(h.EdgeTypes))
	ix := make([][]int32, len(h.EdgeTypes))
	for e, et := range h.EdgeTypes {
		ip[e], ix[e] = et.In.Indptr, et.In.Indices
	}
	return nn.NewHeteroBlock(b, HeteroRels(h), n, n, ip, ix)
}

func (ev *typedEval) evaluateSampled() (Tally, error) {
	var nodes []int32
	for _, sp := range ev.splits {
		nodes = append(nodes, sp.Rows...)
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	c := ev.in.H.NumClasses
	logits := make(map[int32][]float32, len(nodes))
	bs := ev.batchSize
	for bi := 0; bi*bs < len(nodes); bi++ {
		seeds := nodes[bi*bs : min((bi+1)*bs, len(nodes))]
		mb, err := ev.sampled.next(seeds, sample.Key{Seed: ev.key, Batch: bi})
		if err != nil {
			return Tally{}, fmt.Errorf("sampling: %w", err)
		}
		if err := ev.scoreBatch(mb, seeds, c, logits); err != nil {
			return Tally{}, err
		}
	}
	return tallyRows(ev.splits, logits), nil
}

func (ev *typedEval) scoreBatch(mb batch, seeds []int32, c int, out map[int32][]float32) error {
	defer mb.release()
	t := autograd.NewTape(ev.in.B)
	defer t.Release()
	y, err := mb.forward(t, false, 0)
	if err != nil {
		return err
	}
	host := make([]float32, y.Len())
	if err := ev.in.B.Download(host, y.Value); err != nil {
		return err
	}
	for i, v := range seeds {
		out[v] = host[i*c : (i+1)*c]
	}
	return nil
}
