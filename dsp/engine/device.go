package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/internal/devbuf"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/cudadsp"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// device is one rank's state.
type device struct {
	s    *shared
	rank int
	b    backend.Backend
	m    *metrics.Counters

	kit    *kit
	ahead  *cache.ShardStore // prefetches remote rows of sampled batches (prefetcher), or nil
	shard  *cache.ShardStore // the store of a per-machine layout (kept after free for its counters), or nil
	sdevs  []backend.Sibling // the sampler workers' sibling handles of the GPU (own streams and locks), nil when shared
	ldev   backend.Sibling   // the loader's, likewise
	lb     backend.Backend   // the loader's back end: ldev, or b
	prof   *profiler         // times the trainer's ops of Config.ProfileEpoch
	lfence *devbuf.Fence     // waits for the loader's stream (ldev != nil)
	later  *cudadsp.Deferred // frees sampler and loader buffers after the trainer's copies of them
	// excl: the sampler workers' GPU target exclusion (TaskTargets), by
	// worker, made on first use.
	excl   []*excluder
	exclMu sync.Mutex
	trk    *tracker
	loader *cache.Loader
	model  nn.Model
	task   TaskReplica // Options.Task's part on this device, or nil
	opt    optim.Optimizer
	eval   *train.Evaluator
	evalIn backend.Buffer // the feature store's table as the trainer's handle reads it (evalTable), once found
	// evalShard: the feature store's cached rows as the trainer's
	// handle reads them (cachedTable), once found.
	evalShard backend.Buffer

	// Gradients: every parameter's gradient is a view of flat, whose last
	// element carries the step's loss; buckets are views of flat that are
	// all-reduced (mean) one after another. For a model of nn.New, flat's
	// front is the model's flat gradient buffer (nn.ShareGrad), so the
	// optimizer steps every parameter in one launch; oldGrads are the
	// gradients put aside otherwise (given back before FreeParams).
	flat     backend.Buffer
	oldGrads []backend.Buffer
	buckets  []backend.Buffer
	lossSlot backend.Buffer
	lossHist backend.Buffer // this epoch's averaged losses, one per batch
	rows     backend.Buffer // 0..BatchSize-1 (the seeds' rows of the logits)
	grads    comm.Comm
	gradN    int

	// bfloat16 activations (halfActivations): the loader returns
	// bfloat16 rows where its store writes them, and the model's
	// weights are converted in one launch a step into shadow (a
	// bfloat16 copy of its flat parameter buffer shadowOf) whose views
	// halves the tape reads (Tape.ShareHalf).
	half     bool
	shadow   backend.Buffer
	shadowOf backend.Buffer
	halves   [][2]backend.Buffer // parameter value, its view of shadow

	setupSeconds float64
	// warmed is set by warm when the back end counts product families
	// (backend.ProductFamilies): then those warmed and its fallbacks.
	warmed                      bool
	warmFamilies, warmFallbacks int
	// Rank 0's epoch bookkeeping.
	epochStart time.Time
	last       *train.EpochRecord // the last epoch, evaluated and recorded after the replica check
}

// item travels through the queues.
type item struct {
	epoch, batch, global, batches int
	last                          bool
	seeds                         []graph.NodeID
	work                          TaskBatch // Options.Task's batch (Seeds = seeds)
	bt                            batch
	x                             backend.Buffer  // input features
	xb                            backend.Backend // the back end that owns x
	// drop is the model's input dropout, applied to x by the loader
	// (P 0: none, the model applies its own, if any).
	drop cache.Dropout
}

func (it *item) free() {
	if it.bt != nil {
		it.bt.Free()
		it.bt = nil
	}
	if it.x != nil {
		it.xb.Free(it.x)
		it.x = nil
	}
}

func (d *device) errf(op string, err error) error {
	return &RunError{Op: fmt.Sprintf("rank %d %s", d.rank, op), Err: err}
}

func (d *device) hook(ctx context.Context, point string) {
	if h := d.s.opts.Hook; h != nil {
		h(ctx, d.rank, point)
	}
}

// setup builds the device's sampler, feature store and loader, model,
// optimizer and gradient buffers.
func (d *device) setup() error {
	t0 := time.Now()
	s, cfg, r := d.s, &d.s.cfg, d.rank
	patch := s.patches[r]
	var err error
	csp := cfg.Sampler == SamplerCSP
	// The topology a device samples from: its patch (csp) or the whole
	// graph; all of it in device memory within the topology budget. Over
	// the budget, the rows that fit (the longest: layout's choice) stay
	// in device memory and the others are read from pinned host memory
	// through UVA (gpusample.Split).
	need := graphBytes(s.in)
	if csp {
		need = patch.DeviceBytes() + patch.HostBytes()
	}
	scfg := gpusample.Config{Fanouts: cfg.Train.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted, Placement: gpusample.OnDevice}
	if cfg.TopologyBytes > 0 && cfg.TopologyBytes < need {
		scfg.Placement = gpusample.Split
		if !csp {
			whole, _, err := layout.BuildWhole(s.in, layout.Options{DeviceBytes: cfg.TopologyBytes})
			if err != nil {
				return d.errf("topology", err)
			}
			scfg.DeviceRows = whole.DeviceRowIDs()
		}
	}
	hot := s.plan.Rows(r)
	d.lb = d.b
	if d.ldev != nil {
		d.lb = d.ldev
		if d.lfence, err = devbuf.NewFence(d.ldev); err != nil {
			return d.errf("fences", err)
		}
	}
	spec := samplerSpec{devs: d.sdevs, workers: cfg.SamplerWorkers, csp: csp, layer: cfg.Scheme == LayerWise, patch: patch,
		offsets: s.pd.book.Offsets(), m: d.m, links: s.rankLinks(r)}
	for w := range cfg.SamplerWorkers {
		spec.comms = append(spec.comms, s.deviceComm(r, samplerStage(w)))
	}
	// When the devices cache every row between them, the loader reads no
	// row from host memory (peers serve the rest): no pinned table.
	onlyHot := s.plan.CachedNodes() == int(s.in.NumRows)
	if d.kit, err = newKit(d.lb, s.in, s.x, int(s.in.NumRows), s.dim, hot, onlyHot, scfg, spec, s.placing.Add, s.shard(d)); err != nil {
		return d.errf("device kit", err)
	}
	d.ahead = d.prefetcher()
	d.shard, _ = d.kit.store.(*cache.ShardStore)
	s.clock.device("topology", r, d.kit.topology)
	s.clock.device("feature cache", r, d.kit.features)
	tm := time.Now()
	// The model first: whether its steps take bfloat16 rows decides
	// the loader's.
	if err := d.buildModel(); err != nil {
		return err
	}
	if d.loader, err = cache.NewLoader(cache.LoaderConfig{Plan: s.plan, Rank: r, Rows: int(s.in.NumRows), Cols: s.dim, Backend: d.lb,
		Store: d.kit.store, Dev: s.deviceComm(r, stLoader), Host: s.hostComm(r, stLoader), Metrics: d.m,
		BFloat16Rows: d.half && !s.opts.halfConvert && !s.opts.unfused}); err != nil {
		return d.errf("feature loader", err)
	}
	if d.sdevs != nil || d.ldev != nil {
		if d.later, err = cudadsp.NewDeferred(d.b); err != nil {
			return d.errf("fences", err)
		}
	}
	s.clock.device("model", r, time.Since(tm))
	if s.resumed != nil {
		if err := d.loadResumed(); err != nil {
			return d.errf("resume", err)
		}
	}
	s.mu.Lock()
	s.info.PerDevice[r] = DeviceInfo{Rank: r, Backend: d.b.Name(), Nodes: patch.NumRows(), Edges: patch.NumEdges(),
		TopologyDeviceBytes: patch.DeviceBytes(), TopologyHostBytes: patch.HostBytes(), CachedRows: d.kit.store.HotRows(),
		CacheBytes: 4 * int64(d.kit.store.HotRows()) * int64(s.dim), LocationTableBytes: s.plan.TableBytes()}
	s.mu.Unlock()
	d.setupSeconds = time.Since(t0).Seconds()
	s.clock.device("placement", r, time.Since(t0))
	return nil
}

// graphBytes is what the whole topology takes on a device (row offsets
// and column indices).
func graphBytes(g *graph.CSR) int64 { return 8*(g.NumRows+1) + 4*int64(len(g.Indices)) }

func (d *device) buildModel() error {
	s, cfg := d.s, &d.s.cfg
	var err error
	out := s.pd.ds.NumClasses
	if s.opts.Task != nil {
		out = s.opts.Task.OutDim()
	}
	if d.model, err = nn.New(d.b, cfg.Train.ModelConfig(s.dim, out)); err != nil {
		return d.errf("model", err)
	}
	if s.opts.Task != nil {
		if d.task, err = s.opts.Task.Replica(d.b); err != nil {
			return d.errf("task", err)
		}
	}
	params := d.params()
	total := 0
	for _, p := range params {
		if p.Len() <= 0 || p.Grad == nil {
			return d.errf("model", fmt.Errorf("parameter %q has no gradient", p.Name))
		}
		total += p.Len()
	}
	d.gradN = total + 1
	if d.flat, err = d.b.Alloc(backend.Float32, d.gradN); err != nil {
		return d.errf("gradients", err)
	}
	if _, g, ok := nn.Flat(params); ok && g != nil && !s.opts.unfused {
		// The model's gradients are one buffer already: make it the
		// front of flat, so that the optimizer still sees one buffer
		// (one Adam launch) and the all-reduce reduces it in place.
		if err := nn.ShareGrad(d.b, params, d.flat); err != nil {
			return d.errf("gradients", err)
		}
	} else {
		off := 0
		for _, p := range params {
			v, err := devbuf.View(d.flat, off, p.Len())
			if err != nil {
				return d.errf("gradients", err)
			}
			d.oldGrads = append(d.oldGrads, p.Grad)
			p.Grad = v
			off += p.Len()
		}
	}
	if d.lossSlot, err = devbuf.View(d.flat, total, 1); err != nil {
		return d.errf("gradients", err)
	}
	per := max(cfg.BucketBytes/4, 1)
	for at := 0; at < d.gradN; at += per {
		v, err := devbuf.View(d.flat, at, min(per, d.gradN-at))
		if err != nil {
			return d.errf("gradients", err)
		}
		d.buckets = append(d.buckets, v)
	}
	if d.rank == 0 {
		s.mu.Lock()
		s.info.GradientBuckets = len(d.buckets)
		s.mu.Unlock()
	}
	d.grads = s.deviceComm(d.rank, stTrainer)
	d.opt = cfg.Train.NewOptimizer(d.b, params)
	rows := make([]int32, cfg.Train.BatchSize)
	for i := range rows {
		rows[i] = int32(i)
	}
	if d.rows, err = devbuf.Upload(d.b, rows); err != nil {
		return d.errf("rows", err)
	}
	// At most ceil(ceil(T/K)/B) batches per device and epoch (see
	// assign).
	t := len(s.pd.ds.Train)
	share := (t + cfg.Devices - 1) / cfg.Devices
	most := (share + cfg.Train.BatchSize - 1) / cfg.Train.BatchSize
	if s.opts.Task != nil {
		most = s.opts.Task.MaxBatches()
	}
	if d.lossHist, err = d.b.Alloc(backend.Float32, max(most, 1)); err != nil {
		return d.errf("losses", err)
	}
	return d.buildShadow()
}

// halfActivations reports whether the device's steps run with bfloat16
// activations: bf16 precision, a model whose layers take them
// (nn.BF16Activations) and a back end that has them (a tape agrees to
// SetActivations).
func (d *device) halfActivations() bool {
	if d.s.cfg.Train.Prec() != backend.BF16 || !nn.BF16Activations(d.model) {
		return false
	}
	return autograd.NewTape(d.b).SetActivations(backend.BFloat16)
}

// buildShadow sets half and, with bfloat16 activations and the model's
// parameters in one buffer, allocates their bfloat16 shadow: each step
// converts every weight in one launch instead of one per weight.
func (d *device) buildShadow() error {
	d.half = d.halfActivations()
	if !d.half || d.s.opts.halfConvert {
		return nil
	}
	ps := d.model.Params()
	value, _, ok := nn.Flat(ps)
	if !ok {
		return nil // parameters in separate buffers: converted one by one
	}
	var err error
	if d.shadow, err = devbuf.AllocRaw(d.b, backend.BFloat16, value.Len()); err != nil { // each step's Convert writes it
		return d.errf("bfloat16 weights", err)
	}
	if d.halves, err = nn.HalfShares(ps, d.shadow); err != nil {
		return d.errf("bfloat16 weights", err)
	}
	d.shadowOf = value
	return nil
}

// free releases everything the device holds.
func (d *device) free() {
	if d.later != nil {
		d.later.Close()
	}
	if d.lfence != nil {
		d.lfence.Close()
		d.lfence = nil
	}
	if d.loader != nil {
		d.loader.Close() // closes the store
	} else if d.kit != nil && d.kit.store != nil {
		d.kit.store.Close()
	}
	d.closeExcluders()
	if d.kit != nil {
		d.kit.close()
	}
	if d.opt != nil {
		d.opt.Free()
	}
	if d.model != nil {
		ps := d.params()
		for i := range d.oldGrads {
			ps[i].Grad = d.oldGrads[i]
		}
		nn.FreeParams(d.b, d.model.Params())
	}
	if d.task != nil {
		d.task.Free()
	}
	for _, x := range []backend.Buffer{d.flat, d.lossHist, d.rows, d.shadow} {
		if x != nil {
			d.b.Free(x)
		}
	}
	d.shadow, d.shadowOf, d.halves = nil, nil, nil
	d.eval.Close()
	d.later, d.kit, d.loader, d.opt, d.model, d.eval, d.flat, d.lossHist, d.rows = nil, nil, nil, nil, nil, nil, nil, nil, nil
	d.task = nil
}

// params are the parameters the device trains: the model's, then the
// task's (Options.Task).
func (d *device) params() []*nn.Param {
	ps := d.model.Params()
	if d.task != nil {
		ps = append(ps[:len(ps):len(ps)], d.task.Params()...)
	}
	return ps
}

// start runs the device's stages: three goroutines joined by queues, or
// one loop with the pipeline off.
func (d *device) start(ctx context.Context) error {
	s, cfg, r := d.s, &d.s.cfg, d.rank
	if cfg.NoPipeline {
		s.group.Go(fmt.Sprintf("rank %d", r), func() error { return d.sequential(ctx) })
		return nil
	}
	// One queue per sampler worker; the loader takes the batches from
	// them in turn, which is their order.
	toLoader := make([]*pipeline.Queue[*item], cfg.SamplerWorkers)
	for w := range toLoader {
		toLoader[w] = pipeline.NewQueue[*item](stageNames[samplerStage(w)]+"->loader", r, cfg.QueueCapacity, s.waitTimeout())
	}
	toTrainer := pipeline.NewQueue[*item]("loader->trainer", r, cfg.QueueCapacity, s.waitTimeout())
	s.mu.Lock()
	for _, q := range toLoader {
		s.queues[r] = append(s.queues[r], q.Stats)
	}
	s.queues[r] = append(s.queues[r], toTrainer.Stats)
	s.mu.Unlock()
	drain := func(q *pipeline.Queue[*item]) { q.Drain(func(it *item) { it.free() }) }
	for w, q := range toLoader {
		s.group.Go(fmt.Sprintf("rank %d %s", r, stageNames[samplerStage(w)]), func() error {
			defer q.Close()
			return d.samplerStage(ctx, w, q)
		})
	}
	s.group.Go(fmt.Sprintf("rank %d loader", r), func() error {
		defer toTrainer.Close()
		err := d.loaderStage(ctx, toLoader, toTrainer)
		if err != nil {
			for _, q := range toLoader {
				drain(q)
			}
		}
		return err
	})
	s.group.Go(fmt.Sprintf("rank %d trainer", r), func() error {
		err := d.trainerStage(ctx, toTrainer)
		if err != nil {
			drain(toTrainer)
		}
		return err
	})
	return nil
}

// epochBatches is this device's batches of epoch e: its training nodes
// (assign), or Options.Task's batches.
func (d *device) epochBatches(e int) ([]TaskBatch, error) {
	s, cfg := d.s, &d.s.cfg
	if t := s.opts.Task; t != nil {
		all, err := t.Batches(e)
		if err != nil {
			return nil, d.errf("batches", err)
		}
		if len(all) != cfg.Devices {
			return nil, d.errf("batches", fmt.Errorf("the task dealt batches to %d devices of %d", len(all), cfg.Devices))
		}
		if n := len(all[d.rank]); n == 0 || n > d.lossHist.Len() {
			return nil, d.errf("batches", fmt.Errorf("the task dealt %d batches to device %d, want 1..%d", n, d.rank, d.lossHist.Len()))
		}
		for r := range all {
			if len(all[r]) != len(all[d.rank]) {
				return nil, d.errf("batches", fmt.Errorf("the task dealt %d batches to device %d, %d to device %d", len(all[r]), r, len(all[d.rank]), d.rank))
			}
		}
		if d.rank == 0 {
			s.mu.Lock()
			s.info.BatchesPerDevice = len(all[0])
			s.mu.Unlock()
		}
		return all[d.rank], nil
	}
	plan, err := assign(s.pd.ds.Train, s.pd.book, cfg.Train.BatchSize, cfg.Rebalance, cfg.Train.Seed, e)
	if err != nil {
		return nil, d.errf("batches", err)
	}
	if d.rank == 0 {
		s.mu.Lock()
		s.info.BatchesPerDevice, s.info.DroppedSeeds = len(plan.batches[0]), plan.dropped
		s.mu.Unlock()
	}
	out := make([]TaskBatch, len(plan.batches[d.rank]))
	for i, seeds := range plan.batches[d.rank] {
		out[i] = TaskBatch{Seeds: seeds}
	}
	return out, nil
}

// sampleOne draws batch i of epoch e with sampler worker w.
func (d *device) sampleOne(ctx context.Context, w, e, i int, mine []TaskBatch) (*item, error) {
	cfg := &d.s.cfg
	d.trk.set(samplerStage(w), "sampling epoch %d batch %d", e+1, i)
	d.hook(ctx, "sampler")
	t0 := time.Now()
	global := i*cfg.Devices + d.rank
	tb := mine[i]
	var err error
	if p, ok := d.s.opts.Task.(TaskPreparer); ok {
		if tb, err = p.Prepare(tb); err != nil {
			return nil, d.errf(fmt.Sprintf("sampler epoch %d batch %d: preparing", e+1, i), err)
		}
	}
	bt, err := d.kit.smps[w].Sample(ctx, tb.Seeds, sample.Key{Seed: cfg.Train.Seed, Epoch: e, Batch: global})
	if err == nil && d.s.opts.Task != nil {
		bt, err = d.exclude(w, bt, tb)
	}
	if err != nil {
		return nil, d.errf(fmt.Sprintf("sampler epoch %d batch %d", e+1, i), err)
	}
	d.m.StageBusy(metrics.Sampler, time.Since(t0))
	return &item{epoch: e, batch: i, global: global, batches: len(mine), last: i == len(mine)-1, seeds: tb.Seeds, work: tb, bt: bt}, nil
}

// exclude lets Options.Task edit a batch that sampler worker w drew: a
// GPU batch of a TaskTargets task on its GPU (excludeOn); otherwise on
// the host (a GPU batch is downloaded, and its device copy freed: the
// batch continues as a host batch, its blocks uploaded by the trainer).
func (d *device) exclude(w int, bt batch, tb TaskBatch) (batch, error) {
	var mb *sample.MiniBatch
	switch b := bt.(type) {
	case *hostBatch:
		mb = b.mb
	case *cudadsp.Batch:
		if tt, ok := d.s.opts.Task.(TaskTargets); ok {
			done, err := d.excludeOn(w, b, tt.Targets(tb))
			if err != nil {
				b.Free()
				return nil, err
			}
			if done {
				return b, nil
			}
		}
		var err error
		mb, err = b.Download()
		b.Free()
		if err != nil {
			return nil, err
		}
		bt = &hostBatch{mb: mb}
	default:
		bt.Free()
		return nil, fmt.Errorf("the task cannot edit a %T batch", bt)
	}
	if err := d.s.opts.Task.Exclude(mb, tb); err != nil {
		bt.Free()
		return nil, err
	}
	return bt, nil
}

// excludeOn removes the edges of keys (TaskTargets) from g on the GPU
// handle that sampled it, with sampler worker w's excluder (made on the
// first batch); false when that handle cannot (the host edits it then).
func (d *device) excludeOn(w int, g *cudadsp.Batch, keys []uint64) (bool, error) {
	d.exclMu.Lock()
	if d.excl == nil {
		d.excl = make([]*excluder, max(d.s.cfg.SamplerWorkers, 1))
	}
	x := d.excl[w%len(d.excl)]
	if x == nil {
		x = &excluder{}
		d.excl[w%len(d.excl)] = x
	}
	d.exclMu.Unlock()
	if !x.tried {
		x.tried = true
		var err error
		if x.x, err = cudadsp.NewPairExcluder(g.Device()); err != nil {
			return false, err
		}
	}
	if x.x == nil {
		return false, nil
	}
	_, err := x.x.Exclude(g, keys)
	return err == nil, err
}

// excluder is a sampler worker's cudadsp.PairExcluder, made once (x
// stays nil when the worker's handle has none).
type excluder struct {
	x     *cudadsp.PairExcluder
	tried bool
}

// closeExcluders releases the sampler workers' excluders.
func (d *device) closeExcluders() {
	d.exclMu.Lock()
	defer d.exclMu.Unlock()
	for _, x := range d.excl {
		if x != nil {
			x.x.Close()
		}
	}
	d.excl = nil
}

// loadOne fetches the batch's input features.
func (d *device) loadOne(ctx context.Context, it *item) error {
	d.trk.set(stLoader, "loading epoch %d batch %d", it.epoch+1, it.batch)
	d.hook(ctx, "loader")
	t0 := time.Now()
	// The model's input dropout is applied while the rows are written
	// (the gather, or the exchange's scatter): no pass of its own over
	// the step's largest tensor; the step then marks x as dropped
	// (Tape.ConstDropped) so the model does not drop it again.
	if p, seed, ok := nn.InputDropout(d.model, d.s.cfg.Train.DropoutSeed(it.epoch, it.global)); ok && !d.s.opts.unfused {
		it.drop = cache.Dropout{P: p, Seed: seed}
	}
	x, err := d.load(ctx, it)
	if err != nil {
		return d.errf(fmt.Sprintf("loader epoch %d batch %d", it.epoch+1, it.batch), err)
	}
	it.x, it.xb = x, d.lb
	if p, ok := it.bt.(backwardPreparer); ok && d.ldev != nil {
		// The transposes the step's backward pass reads, built here on
		// the loader's stream instead of the trainer's; the first
		// layer's input needs no gradient, so its block none (unless
		// a model asks: then the trainer builds it).
		if err := p.PrepareBackward(d.lb, 1); err != nil {
			return d.errf(fmt.Sprintf("loader epoch %d batch %d", it.epoch+1, it.batch), err)
		}
	}
	if d.lfence != nil {
		// The trainer reads x from its own stream: the loader's must
		// have written it.
		if err := d.lfence.Record(); err == nil {
			err = d.lfence.Wait()
		}
		if err != nil {
			return d.errf(fmt.Sprintf("loader epoch %d batch %d", it.epoch+1, it.batch), err)
		}
	}
	d.m.StageBusy(metrics.Loader, time.Since(t0))
	return nil
}

// load runs the loader on the batch's device IDs when it has them (no
// upload: a device-to-device copy onto the loader's handle when the
// sampler's is another), else on its host IDs.
func (d *device) load(ctx context.Context, it *item) (backend.Buffer, error) {
	in := it.bt.DeviceIDs()
	if in == nil {
		return d.loader.LoadDropout(ctx, it.bt.IDs(), it.drop)
	}
	if sb, ok := d.lb.(backend.Siblings); ok && isGPU(d.lb) && !sb.Owns(in) {
		// The sampler waited for its stream before handing the batch on.
		c, err := cudadsp.AdoptBuffer(d.lb, in)
		if err != nil {
			return nil, err
		}
		defer d.lb.Free(c)
		in = c
	}
	return d.loader.LoadDeviceDropout(ctx, in, it.drop)
}

// trainOne runs the optimizer step and, after the epoch's last batch,
// the epoch's bookkeeping.
func (d *device) trainOne(ctx context.Context, it *item) error {
	d.trk.set(stTrainer, "training epoch %d batch %d", it.epoch+1, it.batch)
	d.hook(ctx, "trainer")
	t0 := time.Now()
	if d.epochStart.IsZero() {
		d.epochStart = t0
	}
	err := d.prof.before(it)
	if err == nil {
		err = d.step(ctx, it)
	}
	if err == nil {
		err = d.prof.after(d.rank, it)
	}
	if err == nil && d.rank == 0 {
		d.s.firstBatch()
	}
	if err == nil && d.later != nil {
		// The step copied the batch's blocks and features on the
		// trainer's stream: free them once that has run.
		var frees []func()
		if bt := it.bt; bt != nil {
			frees = append(frees, bt.Free)
		}
		if x, xb := it.x, it.xb; x != nil && xb != d.b {
			frees = append(frees, func() { xb.Free(x) })
			it.x = nil
		}
		it.bt = nil
		err = d.later.Add(frees...)
	}
	it.free()
	if err != nil {
		return d.errf(fmt.Sprintf("trainer epoch %d batch %d", it.epoch+1, it.batch), err)
	}
	d.m.StageBusy(metrics.Trainer, time.Since(t0))
	if it.last {
		if err := d.endEpoch(ctx, it); err != nil {
			return d.errf(fmt.Sprintf("end of epoch %d", it.epoch+1), err)
		}
	}
	return nil
}

// samplerStage runs sampler worker w into its queue.
func (d *device) samplerStage(ctx context.Context, w int, out *pipeline.Queue[*item]) error {
	st := samplerStage(w)
	return d.sampleAll(ctx, w, func(it *item) error {
		if d.ahead != nil {
			// The batch's rows of other machines travel while it
			// waits in the queue (the loader's gather finds them).
			ids, err := aheadIDs(it.bt)
			if err != nil {
				it.free()
				return d.errf(fmt.Sprintf("sampler epoch %d batch %d", it.epoch+1, it.batch), err)
			}
			d.ahead.Prefetch(ids)
		}
		t := time.Now()
		d.trk.wait(st, "waiting for room in queue %s (epoch %d batch %d)", out.Name(), it.epoch+1, it.batch)
		if err := out.Push(ctx, stageNames[st], it); err != nil {
			it.free()
			return err
		}
		d.m.StageWaitOut(metrics.Sampler, time.Since(t))
		return nil
	})
}

// aheadIDs is a batch's input IDs on the host, for a prefetch: a GPU
// batch's are downloaded from the sampler's handle (a few MB, whose copy
// the prefetch's requests hide).
func aheadIDs(bt batch) ([]int32, error) {
	if ids := bt.IDs(); ids != nil {
		return ids, nil
	}
	if g, ok := bt.(*cudadsp.Batch); ok {
		return g.HostIDs()
	}
	return nil, nil
}

// sampleAll samples sampler worker w's share of this device's batches
// of every epoch in order (the run's batches w, w+N, w+2N, ... with N
// workers) and hands each to use.
func (d *device) sampleAll(ctx context.Context, w int, use func(*item) error) error {
	n, seq := d.s.cfg.SamplerWorkers, 0
	for e := d.s.firstEpoch(); e < d.s.cfg.Train.Epochs; e++ {
		mine, err := d.epochBatches(e)
		if err != nil {
			return err
		}
		for i := range mine {
			seq++
			if (seq-1)%n != w {
				continue
			}
			it, err := d.sampleOne(ctx, w, e, i, mine)
			if err != nil {
				return err
			}
			if err := use(it); err != nil {
				return err
			}
		}
	}
	return nil
}

// loaderStage loads the batches of the sampler workers' queues in turn
// (their order) into out.
func (d *device) loaderStage(ctx context.Context, ins []*pipeline.Queue[*item], out *pipeline.Queue[*item]) error {
	for k := 0; ; k++ {
		in := ins[k%len(ins)]
		t := time.Now()
		d.trk.wait(stLoader, "waiting for a batch in queue %s", in.Name())
		it, ok, err := in.Pop(ctx, "loader")
		if err != nil || !ok {
			return err
		}
		d.m.StageWaitIn(metrics.Loader, time.Since(t))
		if err := d.loadOne(ctx, it); err != nil {
			it.free()
			return err
		}
		t = time.Now()
		d.trk.wait(stLoader, "waiting for room in queue loader->trainer (epoch %d batch %d)", it.epoch+1, it.batch)
		if err := out.Push(ctx, "loader", it); err != nil {
			it.free()
			return err
		}
		d.m.StageWaitOut(metrics.Loader, time.Since(t))
	}
}

func (d *device) trainerStage(ctx context.Context, in *pipeline.Queue[*item]) error {
	for {
		t := time.Now()
		d.trk.wait(stTrainer, "waiting for a batch in queue loader->trainer")
		it, ok, err := in.Pop(ctx, "trainer")
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		d.m.StageWaitIn(metrics.Trainer, time.Since(t))
		if err := d.trainOne(ctx, it); err != nil {
			return err
		}
	}
	return d.finish(ctx)
}

// sequential is the pipeline turned off: sample, load and train each
// batch before the next. Each step is waited for, so that the GPU does
// not overlap a step with the next batch's sampling either.
func (d *device) sequential(ctx context.Context) error {
	err := d.sampleAll(ctx, 0, func(it *item) error {
		if err := d.loadOne(ctx, it); err != nil {
			it.free()
			return err
		}
		if err := d.trainOne(ctx, it); err != nil {
			return err
		}
		return d.waitStep(ctx)
	})
	if err != nil {
		return err
	}
	return d.finish(ctx)
}

// waitStep waits until the trainer's device has run the steps queued so
// far (an asynchronous gradient all-reduce included, within its deadline).
func (d *device) waitStep(ctx context.Context) error {
	if d.grads != nil {
		return d.grads.Sync(ctx)
	}
	if isGPU(d.b) {
		return d.b.Synchronize()
	}
	return nil
}

// step trains on one batch: forward, loss, backward into the flat
// gradient buffer, mean all-reduce of the gradients and the loss (several
// devices), optimizer step. The loss is copied into lossHist on the
// device; nothing here waits for the device except the all-reduce.
func (d *device) step(ctx context.Context, it *item) error {
	b, s, cfg := d.b, d.s, &d.s.cfg
	if it.batch >= d.lossHist.Len() {
		return fmt.Errorf("batch %d of at most %d per epoch", it.batch, d.lossHist.Len())
	}
	blocks, err := it.bt.Blocks(b)
	if err != nil {
		return err
	}
	defer func() {
		for _, k := range blocks {
			k.Free()
		}
	}()
	if len(blocks) != cfg.Train.Layers {
		return fmt.Errorf("%d blocks for %d layers", len(blocks), cfg.Train.Layers)
	}
	n := it.bt.NumInputs()
	x := it.x
	if it.xb != b {
		// Features from the loader's handle of this GPU: read them in
		// place (the loader waited for its stream before handing them
		// on; trainOne frees them once the trainer's stream is past).
		if x, err = cudadsp.AliasBuffer(b, it.x); err != nil {
			return err
		}
	}
	t := autograd.NewTape(b)
	defer t.Release()
	if err := d.halfTape(t); err != nil {
		return err
	}
	if !d.half && x.DType() != backend.Float32 {
		return fmt.Errorf("%s feature rows for a step with float32 activations", x.DType())
	}
	var xv *autograd.Var
	if it.drop.P > 0 {
		xv, err = t.ConstDropped(x, n, s.dim, it.drop.P, it.drop.Seed)
	} else {
		xv, err = t.Const(x, n, s.dim)
	}
	if err != nil {
		return err
	}
	logits, err := d.model.Forward(t, xv, blocks, true, cfg.Train.DropoutSeed(it.epoch, it.global))
	if err != nil {
		return err
	}
	if logits.Rows != len(it.seeds) {
		return fmt.Errorf("model produced %d rows of logits for %d seeds", logits.Rows, len(it.seeds))
	}
	lv, done, err := d.loss(t, logits, it)
	defer done()
	if err != nil {
		return err
	}
	if err := b.Fill(d.flat, 0); err != nil {
		return err
	}
	if err := t.Backward(lv); err != nil {
		return err
	}
	if err := b.Copy(d.lossSlot, lv.Value); err != nil {
		return err
	}
	if d.grads != nil {
		for _, bk := range d.buckets {
			if err := d.grads.AllReduce(ctx, bk, comm.Mean); err != nil {
				return err
			}
		}
		k := cfg.Devices
		// A ring all-reduce: each rank sends 2(k-1)/k of the buffer to
		// its next rank, across machines when that one is elsewhere.
		d.m.AddBytes(metrics.Gradient, s.rankLinks(d.rank)[(d.rank+1)%k], int64(2*(k-1)*4*d.gradN/k))
	}
	slot, err := devbuf.View(d.lossHist, it.batch, 1)
	if err != nil {
		return err
	}
	if err := b.Copy(slot, d.lossSlot); err != nil {
		return err
	}
	if err := d.opt.Step(); err != nil {
		return err
	}
	if f := s.opts.OnBatch; f != nil {
		var l [1]float32
		if err := b.Download(l[:], slot); err != nil {
			return err
		}
		f(d.rank, it.epoch, it.batch, float64(l[0]))
	}
	return nil
}

// halfTape sets t up for bfloat16 activations when the device's steps
// run them: the loader wrote bfloat16 rows (else the model converts
// them), and the weights' bfloat16 copies are made here in one launch,
// after the last step's update.
func (d *device) halfTape(t *autograd.Tape) error {
	if !d.half {
		return nil
	}
	t.SetActivations(backend.BFloat16)
	if d.shadow == nil {
		return nil
	}
	if err := d.b.Convert(d.shadow, d.shadowOf); err != nil {
		return err
	}
	for _, h := range d.halves {
		if err := t.ShareHalf(h[0], h[1]); err != nil {
			return err
		}
	}
	return nil
}

// loss is the step's loss from the model's output rows of the seeds:
// node classification's (log-softmax, NLL of the seeds' labels) or
// Options.Task's.
// done, never nil, frees what the loss uploaded once the backward pass
// has run.
func (d *device) loss(t *autograd.Tape, logits *autograd.Var, it *item) (lv *autograd.Var, done func(), err error) {
	if d.task != nil {
		lv, done, err = d.task.Loss(t, logits, it.work)
		if done == nil {
			done = func() {}
		}
		return lv, done, err
	}
	labels := make([]int32, len(it.seeds))
	for i, v := range it.seeds {
		labels[i] = d.s.pd.ds.Labels[v]
	}
	return d.classLoss(t, logits, labels)
}

// classLoss is node classification's loss: the NLL of the log-softmax
// of logits' first len(labels) rows against labels. done, never nil,
// frees the labels' upload once the backward pass has run.
func (d *device) classLoss(t *autograd.Tape, logits *autograd.Var, labels []int32) (lv *autograd.Var, done func(), err error) {
	b := d.b
	done = func() {}
	lb, err := devbuf.Upload(b, labels)
	if err != nil {
		return nil, done, err
	}
	done = func() { b.Free(lb) }
	rows, err := devbuf.View(d.rows, 0, len(labels))
	if err != nil {
		return nil, done, err
	}
	logp, err := t.LogSoftmax(logits)
	if err != nil {
		return nil, done, err
	}
	lv, err = nn.NLLLoss(t, logp, rows, lb)
	return lv, done, err
}

// endEpoch reads the epoch's losses (every device checks them; device 0
// records them), and evaluates when due: on device 0, or on every device
// when the evaluation is spread over them (sampled evaluation).
func (d *device) endEpoch(ctx context.Context, it *item) error {
	cfg := &d.s.cfg
	host := make([]float32, it.batches)
	v, err := devbuf.View(d.lossHist, 0, it.batches)
	if err != nil {
		return err
	}
	if err := d.b.Download(host, v); err != nil {
		return err
	}
	losses := make([]float64, len(host))
	for i, l := range host {
		losses[i] = float64(l)
		if math.IsNaN(losses[i]) || math.IsInf(losses[i], 0) {
			return fmt.Errorf("batch %d loss is %v (diverged: lower the learning rate)", i, l)
		}
	}
	rec := train.EpochRecord{Epoch: it.epoch + 1}
	if d.rank == 0 {
		rec.BatchLosses, rec.Loss = losses, train.MeanLoss(losses)
		rec.Seconds = time.Since(d.epochStart).Seconds()
	}
	if it.epoch == cfg.Train.Epochs-1 {
		// The last epoch's evaluation runs after the replica check
		// (finish), so that no device waits in a collective while
		// another evaluates (a long evaluation would look like a stall).
		d.last = &rec
		return nil
	}
	if err := d.record(ctx, rec); err != nil {
		return err
	}
	return d.saveCheckpoint(it.epoch + 1)
}

// shardedEval reports whether every device takes part in the evaluation:
// sampled evaluation spreads the batches (Evaluator.RunShard); the
// whole-graph evaluation runs on device 0's goroutine over every device
// (Evaluator.RunDevices: layer-wise inference, a node range per device)
// while the other ranks wait for the tally.
func (s *shared) shardedEval() bool {
	return s.cfg.Devices > 1 && s.opts.Task == nil // a task evaluates on device 0
}

// record evaluates when due and, on device 0, records and logs the epoch.
// With a sharded evaluation every device calls it (in the same order);
// otherwise only device 0 does anything.
func (d *device) record(ctx context.Context, rec train.EpochRecord) error {
	s, cfg := d.s, &d.s.cfg
	sharded := s.shardedEval()
	if d.rank != 0 && !sharded {
		return nil
	}
	trainSec := rec.Seconds
	epoch := rec.Epoch - 1
	var evalSec float64
	evaluated := cfg.Train.Evaluates(epoch)
	taskLine := ""
	if evaluated && s.opts.Task != nil {
		d.trk.set(stTrainer, "evaluating after epoch %d", epoch+1)
		t0 := time.Now()
		line, err := s.opts.Task.Evaluate(TaskEval{B: d.b, Model: d.model, Replica: d.task, In: s.in, Feats: s.feats}, epoch)
		if err != nil {
			return fmt.Errorf("evaluation: %w", err)
		}
		taskLine = "  " + line
		evalSec = time.Since(t0).Seconds()
	} else if evaluated {
		d.trk.set(stTrainer, "evaluating after epoch %d", epoch+1)
		t0 := time.Now()
		if d.eval == nil && (d.rank == 0 || cfg.Train.Eval == train.Sampled) {
			ev, err := train.NewEvaluator(d.b, s.pd.ds, s.in, s.feats, cfg.Train.Common)
			if err != nil {
				return fmt.Errorf("evaluator: %w", err)
			}
			ev.Log = s.opts.Log // where the whole-graph evaluation's layers lived
			d.eval = ev
		}
		var tl train.Tally
		var err error
		switch {
		case sharded && cfg.Train.Eval == train.Sampled:
			if tl, err = d.eval.RunShard(d.model, d.rank, cfg.Devices); err == nil {
				tl, err = sumTallies(ctx, s.hostComm(d.rank, stTrainer), tl)
			}
		case sharded:
			// Device 0 runs the inference on every device, once all of
			// them are here (the first all-gather: a device may still be
			// stepping after the last all-reduce), waiting for the tally,
			// their replicas equal; the others add nothing. Each device's
			// work is queued on its own handle, after its last step.
			hc := s.hostComm(d.rank, stTrainer)
			if _, err = sumTallies(ctx, hc, train.Tally{}); err != nil {
				break
			}
			if d.rank == 0 {
				bs := make([]backend.Backend, len(s.devs))
				ms := make([]nn.Model, len(s.devs))
				for i, o := range s.devs {
					bs[i], ms[i] = o.b, o.model
				}
				if sh := s.evalShards(s.devs); sh != nil {
					tl, err = d.eval.RunDevicesShards(bs, ms, sh)
				} else {
					tl, err = d.eval.RunDevicesFrom(bs, ms, s.evalInputs(s.devs))
				}
			}
			if err == nil {
				tl, err = sumTallies(ctx, hc, tl)
			}
		case cfg.Train.Eval != train.Sampled:
			tl, err = d.eval.RunDevicesFrom([]backend.Backend{d.b}, []nn.Model{d.model}, s.evalInputs([]*device{d}))
		default:
			tl, err = d.eval.Run(d.model)
		}
		if err != nil {
			if errors.Is(err, backend.ErrOutOfMemory) && cfg.Train.Eval != train.Sampled {
				return fmt.Errorf("evaluation: the whole-graph forward pass over %d nodes does not fit on one GPU (use --eval sampled): %w", s.in.NumRows, err)
			}
			return fmt.Errorf("evaluation: %w", err)
		}
		rec.SetEvaluation(&tl)
		evalSec = time.Since(t0).Seconds()
	}
	if d.rank != 0 {
		return nil
	}
	if err := s.opts.Keep.Offer(&rec, epoch == cfg.Train.Epochs-1, d.b, d.model.Params()); err != nil {
		return err
	}
	s.mu.Lock()
	s.run.EpochTrainSeconds = append(s.run.EpochTrainSeconds, trainSec)
	s.run.EpochLosses = append(s.run.EpochLosses, rec.Loss)
	s.run.EvalSeconds = append(s.run.EvalSeconds, evalSec)
	if evaluated {
		s.history = append(s.history, rec)
	}
	s.mu.Unlock()
	em := s.epochs.add(epoch+1, s.snapshot())
	epochs := cfg.Train.Epochs
	if log := s.opts.Log; log != nil && (epoch == 0 || (epoch+1)%train.LogEvery(epochs) == 0 || epoch == epochs-1) {
		acc := ""
		switch {
		case evaluated && s.opts.Task != nil:
			acc = fmt.Sprintf("%s  (eval %.2fs)", taskLine, evalSec)
		case evaluated:
			acc = fmt.Sprintf("  train %.4f  val %.4f  test %.4f  (eval %.2fs)", rec.TrainAccuracy, rec.ValAccuracy, rec.TestAccuracy, evalSec)
		}
		fmt.Fprintf(log, "epoch %*d/%d  loss %.4f  train time %.3fs%s  %s\n", len(fmt.Sprint(epochs)), epoch+1, epochs, rec.Loss, trainSec, acc, em.Summary.String()+s.remoteLine())
	}
	if log := s.opts.Log; log != nil && evaluated && !s.evalHinted {
		if h := evalHint(evalSec, trainSec, cfg.Train.Eval, evaluationsAfter(&cfg.Train.Common, epoch)); h != "" {
			s.evalHinted = true
			fmt.Fprintln(log, h)
		}
	}
	d.epochStart = time.Now()
	return nil
}

// finish counts the last statistics and checks that every device ends
// with the same parameters, bit for bit.
func (d *device) finish(ctx context.Context) error {
	d.trk.set(stTrainer, "checking the replicas")
	if d.later != nil {
		if err := d.later.Drain(); err != nil {
			return d.errf("freeing batches", err)
		}
	}
	if err := checkReplicas(ctx, d.b, d.params(), d.s.hostComm(d.rank, stTrainer), d.s.cfg.Devices); err != nil {
		return d.errf("replica check", err)
	}
	if d.rank == 0 {
		d.s.mu.Lock()
		d.s.run.ReplicasEqual = true
		d.s.mu.Unlock()
	}
	if d.last != nil {
		if err := d.record(ctx, *d.last); err != nil {
			return d.errf(fmt.Sprintf("end of epoch %d", d.last.Epoch), err)
		}
		if err := d.saveCheckpoint(d.last.Epoch); err != nil {
			return d.errf(fmt.Sprintf("end of epoch %d", d.last.Epoch), err)
		}
	}
	return nil
}

// evaluationsAfter counts the evaluations the run makes after epoch's
// (0-based).
func evaluationsAfter(c *train.Common, epoch int) int {
	n := 0
	for e := epoch + 1; e < c.Epochs; e++ {
		if c.Evaluates(e) {
			n++
		}
	}
	return n
}

// evalHint is a note for the log when an evaluation took evalSec, at
// least 10 s and over five times an epoch's training (trainSec), and more
// are to come: how to evaluate less often or for less; "" otherwise.
func evalHint(evalSec, trainSec float64, mode string, ahead int) string {
	if ahead < 1 || trainSec <= 0 || evalSec < 10 || evalSec <= 5*trainSec {
		return ""
	}
	h := fmt.Sprintf("note: the evaluation took %.1f s, %.0fx the epoch's training, and %d more are to come: --eval-every N evaluates every N epochs (and after the last)", evalSec, evalSec/trainSec, ahead)
	if mode != train.Sampled {
		h += "; --eval sampled estimates the accuracies from sampled neighborhoods, for less"
	}
	return h
}
