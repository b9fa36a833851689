package link

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// HeteroConfig describes link prediction on one relation of a typed
// dataset: the typed encoder and its sampling (train.HeteroConfig: rgcn
// or hsage, a fanout per relation; BatchSize counts positive links), the
// relation, and the link settings of Config.
type HeteroConfig struct {
	train.HeteroConfig
	// Relation names the relation whose links are predicted: its full
	// "src___rel___dst" name, or the bare relation name when unique.
	Relation string    `json:"relation"`
	Split    Fractions `json:"split_edges"`
	NegRatio int       `json:"neg_ratio"`
	// NegSample and NegExclude are Config's, over the relation's types
	// (heteroNegatives).
	NegSample  string `json:"neg_sampling"` // uniform | degree
	NegExclude bool   `json:"neg_exclude"`
	Decoder    string `json:"decoder"`
	HitsK      int    `json:"hits_k"`
}

// HeteroDefaults are the settings of typed link prediction with model
// (rgcn or hsage) on relation: train.HeteroDefaults' encoder without
// weight decay (see Defaults), batches of 512 links, 10 epochs, the
// 85/5/10 split, one uniform negative per positive, the dot decoder,
// Hits@50.
func HeteroDefaults(model, relation string) HeteroConfig {
	c := HeteroConfig{HeteroConfig: train.HeteroDefaults(model), Relation: relation, Split: DefaultFractions,
		NegRatio: 1, NegSample: NegUniform, Decoder: DecoderDot, HitsK: 50}
	c.WeightDecay, c.BatchSize, c.Epochs = 0, 512, 10
	return c
}

// Validate checks every field and returns a *train.ConfigError naming
// the first bad one; the relation is checked against a dataset by
// RunHetero.
func (c *HeteroConfig) Validate() error {
	if err := c.HeteroConfig.Validate(); err != nil {
		return err
	}
	switch {
	case c.Relation == "":
		return cfgErr("relation", "empty: name the relation whose links are predicted")
	case c.Eval != train.Full:
		return cfgErr("eval", "%q: typed link prediction evaluates on the whole graph (full)", c.Eval)
	case c.Weighted:
		return cfgErr("weighted", "typed link prediction samples without edge weights")
	case c.NegRatio < 1 || c.NegRatio > MaxNegRatio:
		return cfgErr("neg_ratio", "%d not in [1, %d]", c.NegRatio, MaxNegRatio)
	case c.NegSample != NegUniform && c.NegSample != NegDegree:
		return cfgErr("neg_sampling", "unknown distribution %q (want uniform or degree)", c.NegSample)
	case c.Decoder != DecoderDot && c.Decoder != DecoderMLP:
		return cfgErr("decoder", "unknown decoder %q (want dot or mlp)", c.Decoder)
	case c.HitsK < 1 || c.HitsK > MaxHitsK:
		return cfgErr("hits_k", "%d not in [1, %d]", c.HitsK, MaxHitsK)
	}
	return c.Split.Validate()
}

// HeteroReport is a typed link-prediction run's report: Report's fields
// (Config holds the link settings in common), the relation, and the types.
type HeteroReport struct {
	*Report
	Relation string              `json:"relation"`
	Hetero   train.HeteroSummary `json:"hetero"`
}

// WriteJSON writes the report to path (indented JSON), atomically.
func (r *HeteroReport) WriteJSON(path string) error {
	if err := atomicfile.WriteJSON(path, r); err != nil {
		return fmt.Errorf("link: writing %s: %w", path, err)
	}
	return nil
}

// typedLinks is a typed run's view of its relation: the relation's
// links as a graph over the union of its two types' nodes (the source
// type's IDs, then the destination type's from off; one ID space when
// they are one type), which package link's Split splits.
type typedLinks struct {
	rel, rev int // the relation and its reverse (-1 for none)
	src, dst int // their node types
	nSrc     int64
	nDst     int64
	off      int32
}

// RunHetero trains a typed encoder and cfg's decoder to predict the links
// of cfg.Relation on h, through train's Loop: the relation's links are
// split by split.RelationEdges with cfg.Split and cfg.Seed, or taken
// from opts.EdgeSplit (the dataset's stored split of that relation,
// split.ReadRelationEdges; a stored split of seed s is the split a run
// with seed s draws), and made a Split as FromEdgeSplit makes one
// (held-out links, and their reverse relation's edges, leave the
// message-passing graph); each step's seeds are the endpoints of its
// positive and negative links, seeds of their own types
// (sample.HeteroSampler.SampleTypes, as PyG's LinkNeighborLoader seeds
// HeteroData); training negatives are pairs of the two types drawn by
// package sample's negative samplers (heteroNegatives: uniform or
// degree-biased, optionally excluding the relation's training links),
// evaluation ones are fixed uniform pairs that are no links of the
// relation; and the decoder scores the source type's final embedding
// against the destination type's. Evaluation runs the encoder over the
// whole message-passing graph. opts.TypedSampler, when set, draws the
// batches (on a GPU: the same batches).
func RunHetero(ctx context.Context, h *dataset.Hetero, cfg HeteroConfig, opts Options) (*HeteroReport, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Backend == nil {
		return nil, &RunError{Op: "setup", Err: errors.New("no back end")}
	}
	if h == nil {
		return nil, &DataError{Msg: "no typed dataset"}
	}
	if err := dataset.ValidateHetero(h); err != nil {
		return nil, &DataError{Msg: fmt.Sprintf("%s: %v", h.Name, err)}
	}
	h, err := cfg.Graph(h)
	if err != nil {
		return nil, err
	}
	tl, err := findRelation(h, cfg.Relation)
	if err != nil {
		return nil, err
	}
	r := &heteroRunner{cfg: cfg, b: opts.Backend, tl: tl, typed: opts.TypedSampler, keep: opts.Keep}
	defer r.free()
	if err := r.build(h, opts.EdgeSplit); err != nil {
		return nil, err
	}
	loop := train.Loop{Epochs: cfg.Epochs, Batches: r.numBatches, OnBatch: opts.OnBatch, Log: opts.Log}
	if err := loop.Run(ctx, r); err != nil {
		return nil, err
	}
	et := h.EdgeTypes[tl.rel]
	lc := Config{Common: cfg.Common, Mode: train.Sampled, BatchSize: cfg.BatchSize, Fanouts: cfg.Fanouts,
		Split: cfg.Split, NegRatio: cfg.NegRatio, NegSample: cfg.NegSample, NegExclude: cfg.NegExclude, Decoder: cfg.Decoder, HitsK: cfg.HitsK}
	rep := &Report{
		Schema: ReportVersion, StrataVersion: train.Version, Task: "link", Dataset: h.Name, Model: cfg.Model,
		Mode: train.Sampled, Decoder: cfg.Decoder, Device: r.b.Name(), Seed: cfg.Seed, HitsK: cfg.HitsK,
		Config: lc, Epochs: r.history, Split: r.split.Stats(),
		Graph: Graph{Nodes: h.NodeTypes[et.Src].NumNodes + h.NodeTypes[et.Dst].NumNodes, Edges: et.In.NumEdges(),
			Features: h.NodeTypes[et.Src].FeatDim},
	}
	rep.Summarize()
	rep.TotalSeconds = time.Since(start).Seconds()
	return &HeteroReport{Report: rep, Relation: h.EdgeTypeName(tl.rel), Hetero: train.SummarizeTypes(r.mp, cfg.AddReverse, r.fan)}, nil
}

// findRelation resolves name among h's relations and finds its reverse
// ((dst, "rev_"+rel, src), as dataset.Hetero.AddReverse names it).
func findRelation(h *dataset.Hetero, name string) (typedLinks, error) {
	var names []string
	for e := range h.EdgeTypes {
		names = append(names, h.EdgeTypeName(e))
	}
	r := h.EdgeType(name)
	switch r {
	case -1:
		return typedLinks{}, cfgErr("relation", "%s names no relation of %s (has %v)", name, h.Name, names)
	case -2:
		return typedLinks{}, cfgErr("relation", "%s: several relations of %s carry that name; use src___rel___dst (has %v)", name, h.Name, names)
	}
	et := h.EdgeTypes[r]
	tl := typedLinks{rel: r, rev: -1, src: et.Src, dst: et.Dst, nSrc: h.NodeTypes[et.Src].NumNodes, nDst: h.NodeTypes[et.Dst].NumNodes}
	if et.Src != et.Dst {
		tl.off = int32(tl.nSrc)
		tl.rev = h.EdgeType(h.NodeTypes[et.Dst].Name + dataset.RelSep + "rev_" + et.Rel + dataset.RelSep + h.NodeTypes[et.Src].Name)
	}
	if tl.rev < 0 {
		tl.rev = -1
	}
	if int64(tl.off)+tl.nDst > math.MaxInt32 {
		return typedLinks{}, &DataError{Msg: fmt.Sprintf("%s: %d + %d nodes exceed int32 IDs", h.EdgeTypeName(r), tl.nSrc, tl.nDst)}
	}
	return tl, nil
}

// heteroRunner is a typed link-prediction run: the Task train's Loop
// drives.
type heteroRunner struct {
	cfg   HeteroConfig
	b     backend.Backend
	tl    typedLinks
	mp    *dataset.Hetero // the message-passing graph
	fan   [][]int
	split *Split
	negs  *Negatives
	x     *train.TypedInputs
	model *nn.HeteroModel
	dec   Decoder
	opt   optim.Optimizer
	smp   sample.TypedSampler
	typed train.NewTypedSampler // makes smp; nil for the host's
	full  *nn.HeteroBlock
	keep  *train.Keeper

	numBatches int
	edges      Edges // the current epoch's training links
	history    []EpochRecord
}

func (r *heteroRunner) build(h *dataset.Hetero, stored *split.EdgeSplit) error {
	if err := r.prepare(h, stored); err != nil {
		return err
	}
	cfg, tl := &r.cfg, r.tl
	var err error
	lc := Config{Common: cfg.Common, NegRatio: cfg.NegRatio, NegSample: cfg.NegSample, NegExclude: cfg.NegExclude}
	if r.negs, err = heteroNegatives(r.split, tl, &lc); err != nil {
		return &RunError{Op: "negative sampler", Err: err}
	}
	if r.fan, err = cfg.RelationFanouts(r.mp); err != nil {
		return err
	}
	if r.model, err = train.NewTypedModel(r.b, r.mp, cfg.Common, cfg.Hidden, []int{tl.src, tl.dst}); err != nil {
		return err
	}
	if r.dec, err = NewDecoder(r.b, cfg.Decoder, cfg.Hidden, rng.Derive(cfg.Seed, tagDecoder)); err != nil {
		return &RunError{Op: "decoder", Err: err}
	}
	r.opt = cfg.NewOptimizer(r.b, r.params())
	r.x = &train.TypedInputs{B: r.b, H: r.mp, Model: r.model}
	if r.smp, err = cfg.TypedSampler(r.b, r.typed, r.mp, r.fan); err != nil {
		return err
	}
	r.numBatches = (r.split.Train.Len() + cfg.BatchSize - 1) / cfg.BatchSize
	return nil
}

// params are the encoder's parameters, then the decoder's.
func (r *heteroRunner) params() []*nn.Param {
	return slices.Concat(r.model.Params(), r.dec.Params())
}

// prepare makes what training and EvaluateHetero share: the relation's
// split of the relation's links (over the union of its types' IDs) with
// its fixed evaluation negatives, and the message-passing graph.
func (r *heteroRunner) prepare(h *dataset.Hetero, stored *split.EdgeSplit) error {
	cfg, tl := &r.cfg, r.tl
	// The relation's links over the union of its types' IDs.
	et := h.EdgeTypes[tl.rel]
	var src, dst []int32
	for v := int32(0); int64(v) < et.In.NumRows; v++ {
		for _, u := range et.In.Neighbors(v) {
			src, dst = append(src, u), append(dst, tl.off+v)
		}
	}
	g, err := graph.FromEdges(int64(tl.off)+tl.nDst, src, dst)
	if err != nil {
		return &RunError{Op: "relation graph", Err: err}
	}
	if r.split, err = relationSplit(h, g, tl, cfg, stored); err != nil {
		return err
	}
	// Fixed evaluation negatives of the two types (Split's are drawn
	// over the union).
	if r.split.ValNeg, err = typedEvalNegatives(g, tl, r.split.Val.Len(), rng.Derive(cfg.Seed, tagEvalNeg, 0)); err != nil {
		return err
	}
	if r.split.TestNeg, err = typedEvalNegatives(g, tl, r.split.Test.Len(), rng.Derive(cfg.Seed, tagEvalNeg, 1)); err != nil {
		return err
	}
	r.mp = r.messagePassing(h)
	return nil
}

// messagePassing is h with the relation's edges (and its reverse's)
// replaced by the split's message-passing graph: no held-out link in
// either direction.
func (r *heteroRunner) messagePassing(h *dataset.Hetero) *dataset.Hetero {
	tl, s := r.tl, r.split
	mp := *h
	mp.EdgeTypes = slices.Clone(h.EdgeTypes)
	rows := func(g *graph.CSR, lo, n int64, shift int32, cols int64) *graph.CSR {
		ip := make([]int64, n+1)
		base := g.Indptr[lo]
		for i := range ip {
			ip[i] = g.Indptr[lo+int64(i)] - base
		}
		ix := slices.Clone(g.Indices[base:g.Indptr[lo+n]])
		for i := range ix {
			ix[i] -= shift
		}
		return &graph.CSR{NumRows: n, NumCols: cols, Indptr: ip, Indices: ix}
	}
	// Rows of In are destinations (from off), their entries sources.
	mp.EdgeTypes[tl.rel].In = rows(s.In, int64(tl.off), tl.nDst, 0, tl.nSrc)
	if tl.rev >= 0 {
		// The reverse relation's rows are the sources, entries the
		// destinations: the rows of Out.
		mp.EdgeTypes[tl.rev].In = rows(s.Out, 0, tl.nSrc, tl.off, tl.nDst)
	}
	return &mp
}

// relationSplit is the run's Split of g, relation tl's links over the
// union of its types' IDs: stored (the dataset's split of that relation)
// when given, else split.RelationEdges of h's relation with cfg's
// fractions and seed; either way FromEdgeSplit with IDs moved to the
// union, so a stored split of the run's seed gives the run's split.
func relationSplit(h *dataset.Hetero, g *graph.CSR, tl typedLinks, cfg *HeteroConfig, stored *split.EdgeSplit) (*Split, error) {
	name := h.EdgeTypeName(tl.rel)
	es, source := stored, SourceStored
	if es == nil {
		var err error
		f := split.Fractions{cfg.Split.Train, cfg.Split.Val, cfg.Split.Test}
		if es, err = split.RelationEdges(h, tl.rel, f, cfg.Seed); err != nil {
			return nil, &SplitError{Msg: err.Error()}
		}
		source = SourceRandom
	}
	if es.Relation != name || es.NumNodes != tl.nSrc || es.NumDstNodes != tl.nDst {
		return nil, &SplitError{Msg: fmt.Sprintf("the edge split is of relation %.200q (%d+%d nodes), not %s (%d+%d)",
			es.Relation, es.NumNodes, es.NumDstNodes, name, tl.nSrc, tl.nDst)}
	}
	u := *es
	u.NumNodes = int64(tl.off) + tl.nDst
	for i := range u.Dst {
		u.Dst[i] = slices.Clone(es.Dst[i])
		for j := range u.Dst[i] {
			if u.Dst[i][j] < 0 || int64(u.Dst[i][j]) >= tl.nDst {
				return nil, &SplitError{Msg: fmt.Sprintf("link %d of part %d: destination %d outside %d nodes", j, i, u.Dst[i][j], tl.nDst)}
			}
			u.Dst[i][j] += tl.off
		}
	}
	s, err := FromEdgeSplit(g, &u, cfg.Seed)
	if err != nil {
		return nil, err
	}
	s.Source = source
	return s, nil
}

// typedEvalNegatives draws count uniform pairs (u of the source type, v of
// the destination type) that are no link of g (and no self-pair within
// one type), from key's stream.
func typedEvalNegatives(g *graph.CSR, tl typedLinks, count int, key uint64) (Edges, error) {
	st := rng.NewStream(key)
	out := Edges{Src: make([]int32, 0, count), Dst: make([]int32, 0, count)}
	for i := 0; i < count; i++ {
		ok := false
		for range maxNegTrials {
			u, v := int32(st.Below(uint64(tl.nSrc))), tl.off+int32(st.Below(uint64(tl.nDst)))
			if u != v && !hasEdge(g, u, v) {
				out.add(u, v)
				ok = true
				break
			}
		}
		if !ok {
			return Edges{}, &SplitError{Msg: fmt.Sprintf("negative %d: %d random pairs were all links or self-pairs: the relation is too dense for negatives", i, maxNegTrials)}
		}
	}
	return out, nil
}

func (r *heteroRunner) free() {
	if r.model != nil {
		nn.FreeParams(r.b, r.model.Params())
	}
	if r.dec != nil {
		nn.FreeParams(r.b, r.dec.Params())
	}
	if r.opt != nil {
		r.opt.Free()
	}
	r.full.Free()
	if c, ok := r.smp.(io.Closer); ok {
		c.Close() // a GPU sampler's device copies
	}
	r.model, r.dec, r.opt, r.full, r.smp = nil, nil, nil, nil, nil
}

// BeginEpoch orders the training links for epoch.
func (r *heteroRunner) BeginEpoch(epoch int) error {
	r.edges = EpochEdges(r.split, r.cfg.Seed, epoch)
	return nil
}

// seedsOf splits a batch's seeds (union IDs, ascending) into the two
// types' local IDs and maps its rows to rows of the two types'
// embeddings.
func (r *heteroRunner) seedsOf(b *Batch) (seeds [][]int32, srcRow, dstRow []int32) {
	tl := r.tl
	seeds = make([][]int32, len(r.mp.NodeTypes))
	if tl.src == tl.dst {
		seeds[tl.src] = b.Seeds
		return seeds, b.SrcRow, b.DstRow
	}
	k, _ := slices.BinarySearch(b.Seeds, tl.off)
	seeds[tl.src] = b.Seeds[:k]
	seeds[tl.dst] = make([]int32, len(b.Seeds)-k)
	for i, v := range b.Seeds[k:] {
		seeds[tl.dst][i] = v - tl.off
	}
	dstRow = make([]int32, len(b.DstRow))
	for i, row := range b.DstRow {
		dstRow[i] = row - int32(k)
	}
	return seeds, b.SrcRow, dstRow
}

// Step runs one optimizer step on a batch of training links and their
// negatives (NegRatio pairs of the two types per link, heteroNegatives).
func (r *heteroRunner) Step(epoch, bi int) (float64, error) {
	bs := r.cfg.BatchSize
	lo, hi := bi*bs, min((bi+1)*bs, r.edges.Len())
	pos := Edges{Src: r.edges.Src[lo:hi], Dst: r.edges.Dst[lo:hi]}
	neg, err := r.negs.Draw(pos, epoch, bi)
	if err != nil {
		return 0, fmt.Errorf("negatives: %w", err)
	}
	batch := NewBatch(pos, neg)
	seeds, srcRow, dstRow := r.seedsOf(batch)
	mb, err := r.smp.SampleTypes(seeds, sample.Key{Seed: r.cfg.Seed, Epoch: epoch, Batch: bi})
	if err != nil {
		return 0, fmt.Errorf("sampling: %w", err)
	}
	r.excludeTargets(mb, pos)
	t := autograd.NewTape(r.b)
	defer t.Release()
	out, cleanup, err := r.x.ForwardBatch(t, mb, true, r.cfg.DropoutSeed(epoch, bi))
	defer cleanup()
	if err != nil {
		return 0, err
	}
	bufs, err := uploadAll(r.b, srcRow, dstRow, batch.Labels)
	defer freeAll(r.b, bufs)
	if err != nil {
		return 0, err
	}
	scores, err := r.dec.ScorePairs(t, out[r.tl.src], out[r.tl.dst], bufs[0], bufs[1])
	if err != nil {
		return 0, err
	}
	lv, loss, err := t.BCEWithLogits(scores, bufs[2])
	if err != nil {
		return 0, err
	}
	return descend(t, r.opt, lv, loss)
}

// excludeTargets removes from mb's blocks the sampled edges of the
// relation and its reverse that join a positive's endpoints (ExcludeTargets
// for typed batches).
func (r *heteroRunner) excludeTargets(mb *sample.HeteroMiniBatch, pos Edges) {
	tl := r.tl
	targets := make(map[[2]int32]bool, pos.Len())
	for i := range pos.Src {
		targets[[2]int32{pos.Src[i], pos.Dst[i] - tl.off}] = true
		if tl.src == tl.dst {
			targets[[2]int32{pos.Dst[i], pos.Src[i]}] = true
		}
	}
	for b := range mb.Blocks {
		blk := &mb.Blocks[b]
		for _, rel := range []int{tl.rel, tl.rev} {
			if rel < 0 {
				continue
			}
			rb := &blk.Rels[rel]
			if len(rb.Indptr) == 0 {
				continue
			}
			et := r.mp.EdgeTypes[rel]
			w := int64(0)
			for i := 0; i+1 < len(rb.Indptr); i++ {
				lo, hi := rb.Indptr[i], rb.Indptr[i+1]
				rb.Indptr[i] = w
				d := blk.SrcNodes[et.Dst][i]
				for e := lo; e < hi; e++ {
					s := blk.SrcNodes[et.Src][rb.Indices[e]]
					pair := [2]int32{s, d} // (source type, destination type)
					if rel == tl.rev {
						pair = [2]int32{d, s}
					}
					if targets[pair] {
						continue
					}
					rb.Indices[w] = rb.Indices[e]
					if rb.EdgeIDs != nil {
						rb.EdgeIDs[w] = rb.EdgeIDs[e]
					}
					w++
				}
			}
			rb.Indptr[len(rb.Indptr)-1] = w
			rb.Indices = rb.Indices[:w]
			if rb.EdgeIDs != nil {
				rb.EdgeIDs = rb.EdgeIDs[:w]
			}
		}
	}
}

// EndEpoch evaluates the epoch when due and records it.
func (r *heteroRunner) EndEpoch(e int, losses []float64, seconds func() float64) (string, error) {
	rec := EpochRecord{Epoch: e + 1, BatchLosses: slices.Clone(losses), Loss: train.MeanLoss(losses), EvalSkipped: !r.cfg.Evaluates(e)}
	if !rec.EvalSkipped {
		t0 := time.Now()
		var err error
		if rec.Val, rec.Test, err = r.evaluate(); err != nil {
			return "", &RunError{Op: fmt.Sprintf("epoch %d evaluation", e+1), Err: err}
		}
		rec.EvalSeconds = time.Since(t0).Seconds()
	}
	rec.Seconds = seconds()
	sel := rec.Selection()
	if err := r.keep.Offer(&sel, e == r.cfg.Epochs-1, r.b, r.params()); err != nil {
		return "", &RunError{Op: fmt.Sprintf("epoch %d", e+1), Err: err}
	}
	r.history = append(r.history, rec)
	return EpochLine(&rec, r.cfg.Epochs, r.cfg.HitsK), nil
}

// evaluate embeds every node over the whole message-passing graph
// without dropout and scores the fixed validation and test pairs.
func (r *heteroRunner) evaluate() (val, test Metrics, err error) {
	if r.full == nil {
		if r.full, err = train.UploadTypedGraph(r.b, r.mp); err != nil {
			return val, test, err
		}
	}
	t := autograd.NewTape(r.b)
	defer t.Release()
	all := make([][]int32, len(r.mp.NodeTypes))
	for ty, nt := range r.mp.NodeTypes {
		all[ty] = make([]int32, nt.NumNodes)
		for i := range all[ty] {
			all[ty][i] = int32(i)
		}
	}
	xs, err := r.x.Rows(t, all)
	if err != nil {
		return val, test, err
	}
	blocks := make([]*nn.HeteroBlock, r.cfg.Layers)
	for i := range blocks {
		blocks[i] = r.full
	}
	out, err := r.model.ForwardTypes(t, xs, blocks, false, 0)
	if err != nil {
		return val, test, err
	}
	s := r.split
	parts := []Edges{s.Val, s.ValNeg, s.Test, s.TestNeg}
	scores := make([][]float32, len(parts))
	for i, p := range parts {
		dst := make([]int32, p.Len())
		for j, v := range p.Dst {
			dst[j] = v - r.tl.off
		}
		if scores[i], err = r.scorePairs(t, out, p.Src, dst); err != nil {
			return val, test, err
		}
	}
	if val, err = Evaluate(scores[0], scores[1], r.cfg.HitsK); err != nil {
		return val, test, fmt.Errorf("validation: %w", err)
	}
	if test, err = Evaluate(scores[2], scores[3], r.cfg.HitsK); err != nil {
		return val, test, fmt.Errorf("test: %w", err)
	}
	return val, test, nil
}

func (r *heteroRunner) scorePairs(t *autograd.Tape, out []*autograd.Var, src, dst []int32) ([]float32, error) {
	bufs, err := uploadAll(r.b, src, dst)
	defer freeAll(r.b, bufs)
	if err != nil {
		return nil, err
	}
	s, err := r.dec.ScorePairs(t, out[r.tl.src], out[r.tl.dst], bufs[0], bufs[1])
	if err != nil {
		return nil, err
	}
	host := make([]float32, s.Len())
	return host, r.b.Download(host, s.Value)
}

// EvaluateHetero scores a trained typed link model again: it rebuilds
// the split RunHetero made of cfg.Relation on h (the dataset as given,
// as RunHetero takes it; stored: the stored edge split the run used, nil
// for a random one), with the same fixed validation and test negatives
// and message-passing graph, and scores them with enc and dec as
// RunHetero's evaluation does. enc must read the graph cfg.Graph makes
// of h (its schema: train.TypedSchema with outputs the relation's source
// and destination types). stats describes the split.
func EvaluateHetero(b backend.Backend, h *dataset.Hetero, cfg HeteroConfig, stored *split.EdgeSplit, enc *nn.HeteroModel, dec Decoder) (val, test Metrics, stats Stats, err error) {
	if err = cfg.Validate(); err != nil {
		return val, test, stats, err
	}
	switch {
	case b == nil:
		return val, test, stats, &RunError{Op: "setup", Err: errors.New("no back end")}
	case h == nil:
		return val, test, stats, &DataError{Msg: "no typed dataset"}
	case enc == nil || dec == nil:
		return val, test, stats, &RunError{Op: "setup", Err: errors.New("no encoder or decoder")}
	}
	if err = dataset.ValidateHetero(h); err != nil {
		return val, test, stats, &DataError{Msg: fmt.Sprintf("%s: %v", h.Name, err)}
	}
	if h, err = cfg.Graph(h); err != nil {
		return val, test, stats, err
	}
	tl, err := findRelation(h, cfg.Relation)
	if err != nil {
		return val, test, stats, err
	}
	r := &heteroRunner{cfg: cfg, b: b, tl: tl}
	if err = r.prepare(h, stored); err != nil {
		return val, test, stats, err
	}
	defer r.full.Free()
	r.model, r.dec = enc, dec
	r.x = &train.TypedInputs{B: b, H: r.mp, Model: enc}
	val, test, err = r.evaluate()
	return val, test, r.split.Stats(), err
}
