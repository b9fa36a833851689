package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/csp"
	"github.com/strata-gnn/strata/dsp/internal/ckpt"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

// Options are the run's environment; none of them changes its numbers.
type Options struct {
	// CheckpointDir, when set, makes device 0 write the run's state to
	// DIR/checkpoint.strata after every epoch (atomically). An existing
	// checkpoint is a *CheckpointError unless Resume is set, in which
	// case the run continues after its last epoch, with the losses and
	// accuracies of an uninterrupted run.
	CheckpointDir string
	Resume        bool
	// NewBackend opens device rank's back end (default: a CPU back end per
	// device). Each device must get its own instance.
	NewBackend func(rank int) (backend.Backend, error)
	// Log receives the per-epoch lines (losses, accuracies, metrics).
	Log io.Writer
	// OnBatch is called by every device after each optimizer step with
	// the device's batch cursor and the step's loss (averaged over devices).
	OnBatch func(rank, epoch, batch int, loss float64)
	// Hook is a test seam called at every stage step and before every
	// collective (see pipeline.Hook).
	Hook pipeline.Hook
}

// sparseThreshold is the trainer's: features denser than this are dense.
const sparseThreshold = 0.25

// stage indices in the coordinator.
const (
	stSampler = iota
	stLoader
	stTrainer
)

var stageNames = []string{"sampler", "loader", "trainer"}

// shared is what all devices of a run read.
type shared struct {
	cfg    Config
	opts   Options
	pd     *partitioned
	in     *graph.CSR
	x      []float32 // (row-normalized) features, the host tier
	dim    int
	sparse bool
	hot    []graph.NodeID      // hotness order (nil for presample)
	coords []*comm.Coordinator // per device; nil without coordination
	comms  [3][]comm.Comm
	group  *pipeline.Group
	ctrs   []metrics.Counters
	trk    []tracker
	queues [][]func() metrics.QueueSnapshot

	ckpt    *ckpt.Run[Config]   // checkpoints; nil when off
	resumed *ckpt.State[Config] // the checkpoint this run continues from, or nil

	closeOnce sync.Once
	mu        sync.Mutex
	history   []train.EpochRecord
	info      Info
	epochs    EpochLog // device 0's trainer's, read after the run
}

// Run trains cfg on ds with cfg.Devices devices and returns the report.
func Run(ctx context.Context, ds *dataset.Dataset, cfg Config, opts Options) (*Report, error) {
	start := time.Now()
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if err := checkDataset(ds); err != nil {
		return nil, err
	}
	if opts.NewBackend == nil {
		opts.NewBackend = func(int) (backend.Backend, error) { return cpu.New(cpu.Options{}) }
	}
	k := cfg.Devices
	pd, err := partitionData(ctx, ds, &cfg, opts.Log)
	if err != nil {
		return nil, err
	}
	s := &shared{cfg: cfg, opts: opts, pd: pd, dim: pd.ds.FeatDim, ctrs: make([]metrics.Counters, k), trk: make([]tracker, k), queues: make([][]func() metrics.QueueSnapshot, k)}
	if s.in = pd.ds.InGraph(); s.in == nil {
		return nil, &RunError{Op: "dataset", Err: errors.New("invalid graph")}
	}
	var rowNorm bool
	s.x, rowNorm, s.sparse = Features(pd.ds, cfg.Train.RowNorm)
	switch cfg.Hotness {
	case cache.ByInDegree:
		s.hot, err = cache.InDegree(s.in)
	case cache.ByPageRank:
		s.hot, err = cache.PageRank(s.in)
	case cache.ByReversePageRank:
		s.hot, err = cache.ReversePageRank(s.in)
	}
	if err != nil {
		return nil, &RunError{Op: "hotness", Err: err}
	}
	if !cfg.NoCoordinator {
		ctrl, err := inproc.New(k, comm.Options{Timeout: cfg.CommTimeout})
		if err != nil {
			return nil, &RunError{Op: "communicators", Err: err}
		}
		s.coords = make([]*comm.Coordinator, k)
		for r := range k {
			s.coords[r] = comm.NewCoordinator(ctrl[r], comm.CoordOptions{Timeout: cfg.WaitTimeout})
		}
		defer s.closeCoordinators()
	}
	for i := range s.comms {
		if s.comms[i], err = inproc.New(k, comm.Options{Timeout: cfg.CommTimeout}); err != nil {
			return nil, &RunError{Op: "communicators", Err: err}
		}
	}
	defer func() {
		for _, cs := range s.comms {
			for _, c := range cs {
				c.Close()
			}
		}
	}()
	s.info = Info{Devices: k, Comm: s.comms[0][0].Kind(), Scheme: cfg.Scheme, Partition: pd.method, EdgeCut: pd.edgeCut,
		Book: pd.book.Offsets(), CachePolicy: string(cfg.CachePolicy), CacheGroup: cfg.CacheGroup, Hotness: string(cfg.Hotness),
		QueueCapacity: cfg.QueueCapacity, Rebalance: cfg.Rebalance, Coordinated: !cfg.NoCoordinator, BucketBytes: cfg.BucketBytes,
		RowNormalized: rowNorm, SparseFeatures: s.sparse, PerDevice: make([]DeviceInfo, k)}
	if opts.CheckpointDir != "" {
		if err := s.openCheckpoints(ds); err != nil {
			return nil, err
		}
	}

	g, gctx := pipeline.NewGroup(ctx)
	s.group = g
	// A failure releases stages waiting for their turn.
	stop := context.AfterFunc(gctx, s.closeCoordinators)
	defer stop()
	// At the first failure, note what every stage was doing.
	var stalled, states []string
	g.OnFail = func(error) { stalled, states = s.diagnose(cfg.WaitTimeout / 2) }
	devs := make([]*device, k)
	for r := range k {
		devs[r] = &device{s: s, rank: r, m: &s.ctrs[r], trk: &s.trk[r]}
		g.Go(fmt.Sprintf("rank %d", r), func() error { return devs[r].run(gctx) })
	}
	err = g.Wait()
	for _, d := range devs {
		d.free()
	}
	if err != nil {
		if ctx.Err() != nil { // the caller cancelled: whatever failed then was interrupted
			return nil, &RunError{Op: "training", Err: fmt.Errorf("%w: %v", train.ErrInterrupted, err)}
		}
		return nil, &RunError{Op: "training", Err: err, Stalled: stalled, States: states}
	}
	rep := s.report(ds, devs[0].b.Name())
	rep.TotalSeconds = time.Since(start).Seconds()
	return rep, nil
}

func (s *shared) closeCoordinators() {
	s.closeOnce.Do(func() {
		for _, c := range s.coords {
			c.Close()
		}
	})
}

func nonNegative(x []float32) bool {
	for _, v := range x {
		if !(v >= 0) {
			return false
		}
	}
	return true
}

// device is one rank's state.
type device struct {
	s    *shared
	rank int
	m    *metrics.Counters
	trk  *tracker
	b    backend.Backend

	sampler interface {
		SampleContext(context.Context, []graph.NodeID, sample.Key) (*sample.MiniBatch, error)
	}
	loader *cache.Loader
	model  nn.Model
	opt    optim.Optimizer
	grads  *comm.Bucketer // parameters' gradients, then the loss
	host   [][]float32    // host copies of the gradients (and the loss)
	eval   *evaluator

	losses []float64 // this epoch's step losses (device 0)
	epochT time.Time
}

// item travels through the queues.
type item struct {
	epoch, batch, global int
	last                 bool
	seeds                []graph.NodeID
	mb                   *sample.MiniBatch
	feats                []float32
}

func (d *device) comm(stage int) comm.Comm {
	c := &pipeline.Comm{Comm: d.s.comms[stage][d.rank], Stage: stage, Name: stageNames[stage], Hook: d.s.opts.Hook,
		Track: func(blocked string) { d.trk.block(stage, blocked) }}
	if d.s.coords != nil {
		c.Launch = d.s.coords[d.rank]
	}
	return c
}

func (d *device) hook(ctx context.Context, point string) {
	if h := d.s.opts.Hook; h != nil {
		h(ctx, d.rank, point)
	}
}

func (d *device) errf(op string, err error) error {
	return &RunError{Op: fmt.Sprintf("rank %d %s", d.rank, op), Err: err}
}

// run sets the device up and starts its three stages.
func (d *device) run(ctx context.Context) error {
	s, cfg, r := d.s, &d.s.cfg, d.rank
	var err error
	if d.b, err = s.opts.NewBackend(r); err != nil {
		return d.errf("back end", err)
	}
	topo := cfg.TopologyBytes
	if topo <= 0 {
		topo = layout.NoLimit
	}
	patch, err := layout.Build(s.in, s.pd.book, r, layout.Options{DeviceBytes: topo})
	if err != nil {
		return d.errf("patch", err)
	}
	scfg := csp.Config{Fanouts: cfg.Train.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted, Workers: 1}
	sc := d.comm(stSampler)
	if cfg.Scheme == LayerWise {
		d.sampler, err = csp.NewLayerSampler(sc, s.pd.book, patch, scfg, d.m)
	} else {
		d.sampler, err = csp.NewNodeSampler(sc, s.pd.book, patch, scfg, d.m)
	}
	if err != nil {
		return d.errf("sampler", err)
	}
	hot := s.hot
	if cfg.Hotness == cache.ByPreSampling {
		if hot, err = d.presample(ctx, sc); err != nil {
			return err
		}
	}
	budget := cfg.CacheBytes
	if budget < 0 {
		budget = int64(len(s.x)) * 4
	}
	plan, err := cache.NewPlan(s.pd.book, hot, s.dim, cache.PlanConfig{BudgetBytes: budget, Policy: cfg.CachePolicy, GroupSize: cfg.CacheGroup})
	if err != nil {
		return d.errf("cache plan", err)
	}
	if d.rank == 0 {
		s.mu.Lock()
		s.info.CacheLayout = CacheLayout(plan)
		s.mu.Unlock()
	}
	if d.loader, err = cache.NewLoader(d.comm(stLoader), d.b, plan, s.x, int(s.in.NumRows), s.dim, d.m); err != nil {
		return d.errf("feature cache", err)
	}
	if err := d.buildModel(); err != nil {
		return err
	}
	if s.resumed != nil {
		if err := s.resumed.Load(d.b, d.model.Params(), d.opt); err != nil {
			return d.errf("resume", err)
		}
	}
	s.mu.Lock()
	s.info.PerDevice[r] = DeviceInfo{Rank: r, Backend: d.b.Name(), Nodes: patch.NumRows(), Edges: patch.NumEdges(),
		TopologyDeviceBytes: patch.DeviceBytes(), TopologyHostBytes: patch.HostBytes(), CachedRows: d.loader.CachedRows(),
		CacheBytes: d.loader.DeviceBytes(), LocationTableBytes: plan.TableBytes()}
	s.mu.Unlock()

	capq := cfg.QueueCapacity
	toLoader := pipeline.NewQueue[*item]("sampler->loader", r, capq, cfg.WaitTimeout)
	toTrainer := pipeline.NewQueue[*item]("loader->trainer", r, capq, cfg.WaitTimeout)
	s.mu.Lock()
	s.queues[r] = []func() metrics.QueueSnapshot{toLoader.Stats, toTrainer.Stats}
	s.mu.Unlock()
	s.group.Go(fmt.Sprintf("rank %d sampler", r), func() error { return d.samplerStage(ctx, toLoader) })
	s.group.Go(fmt.Sprintf("rank %d loader", r), func() error { return d.loaderStage(ctx, toLoader, toTrainer) })
	s.group.Go(fmt.Sprintf("rank %d trainer", r), func() error { return d.trainerStage(ctx, toTrainer) })
	return nil
}

// presample ranks nodes by how often the epoch-0 batches of every device,
// drawn with a separate key, use them as input nodes.
func (d *device) presample(ctx context.Context, c comm.Comm) ([]graph.NodeID, error) {
	s, cfg := d.s, &d.s.cfg
	counts := make([]int64, s.in.NumRows)
	key := rng.Derive(cfg.Train.Seed, tagPresample)
	plan, err := assign(s.pd.ds.Train, s.pd.book, cfg.Train.BatchSize, cfg.Rebalance, key, 0)
	if err != nil {
		return nil, d.errf("presample", err)
	}
	for i, seeds := range plan.batches[d.rank] {
		mb, err := d.sampler.SampleContext(ctx, seeds, sample.Key{Seed: key, Batch: i*cfg.Devices + d.rank})
		if err != nil {
			return nil, d.errf("presample", err)
		}
		for _, v := range mb.InputNodes() {
			counts[v]++
		}
	}
	if err := c.AllReduce(ctx, comm.I64(counts), comm.Sum); err != nil {
		return nil, d.errf("presample", err)
	}
	return cache.ByCounts(counts), nil
}

func (d *device) buildModel() error {
	s, cfg := d.s, &d.s.cfg.Train
	mc := ModelConfig(*cfg, s.dim, s.pd.ds.NumClasses)
	var err error
	if d.model, err = nn.New(d.b, mc); err != nil {
		return d.errf("model", err)
	}
	d.opt = NewOptimizer(d.b, d.model.Params(), *cfg)
	// Gradients are averaged in buckets of BucketBytes; the step's loss
	// rides along as one more "gradient" of one element.
	sizes := make([]int, 0, len(d.model.Params())+1)
	for _, p := range d.model.Params() {
		sizes = append(sizes, p.Len())
		d.host = append(d.host, make([]float32, p.Len()))
	}
	sizes = append(sizes, 1)
	d.host = append(d.host, make([]float32, 1))
	if d.grads, err = comm.NewBucketer(d.comm(stTrainer), sizes, comm.BucketOptions{BucketBytes: d.s.cfg.BucketBytes, Op: comm.Mean}); err != nil {
		return d.errf("gradient buckets", err)
	}
	if d.rank == 0 {
		d.s.mu.Lock()
		d.s.info.GradientBuckets = len(d.grads.Buckets())
		d.s.mu.Unlock()
	}
	return nil
}

func (d *device) free() {
	if d.loader != nil {
		d.loader.Close()
	}
	if d.grads != nil {
		d.grads.Close()
	}
	if d.opt != nil {
		d.opt.Free()
	}
	if d.model != nil {
		nn.FreeParams(d.b, d.model.Params())
	}
	d.eval.free()
	d.loader, d.opt, d.model, d.eval = nil, nil, nil, nil
}

// samplerStage draws the device's batches, epoch after epoch.
func (d *device) samplerStage(ctx context.Context, out *pipeline.Queue[*item]) error {
	defer out.Close()
	cfg := &d.s.cfg
	k := cfg.Devices
	for e := d.s.firstEpoch(); e < cfg.Train.Epochs; e++ {
		plan, err := assign(d.s.pd.ds.Train, d.s.pd.book, cfg.Train.BatchSize, cfg.Rebalance, cfg.Train.Seed, e)
		if err != nil {
			return d.errf("batches", err)
		}
		mine := plan.batches[d.rank]
		if d.rank == 0 {
			d.s.mu.Lock()
			d.s.info.BatchesPerDevice, d.s.info.DroppedSeeds = len(mine), plan.dropped
			d.s.mu.Unlock()
		}
		for i, seeds := range mine {
			d.trk.work(stSampler, fmt.Sprintf("sampling epoch %d batch %d", e+1, i))
			d.hook(ctx, "sampler")
			t0 := time.Now()
			global := i*k + d.rank
			mb, err := d.sampler.SampleContext(ctx, seeds, sample.Key{Seed: cfg.Train.Seed, Epoch: e, Batch: global})
			if err != nil {
				return d.errf(fmt.Sprintf("sampler epoch %d batch %d", e+1, i), err)
			}
			d.m.StageBusy(metrics.Sampler, time.Since(t0))
			t1 := time.Now()
			d.trk.block(stSampler, "waiting for room in queue sampler->loader")
			if err := out.Push(ctx, "sampler", &item{epoch: e, batch: i, global: global, last: i == len(mine)-1, seeds: seeds, mb: mb}); err != nil {
				return err
			}
			d.m.StageWaitOut(metrics.Sampler, time.Since(t1))
		}
	}
	d.trk.finish(stSampler)
	return nil
}

// loaderStage fetches every batch's input features.
func (d *device) loaderStage(ctx context.Context, in, out *pipeline.Queue[*item]) error {
	defer out.Close()
	for {
		t0 := time.Now()
		d.trk.work(stLoader, "")
		d.trk.block(stLoader, "waiting for a batch in queue sampler->loader")
		it, ok, err := in.Pop(ctx, "loader")
		if err != nil {
			return err
		}
		if !ok {
			d.trk.finish(stLoader)
			return nil
		}
		d.m.StageWaitIn(metrics.Loader, time.Since(t0))
		d.trk.work(stLoader, fmt.Sprintf("loading epoch %d batch %d", it.epoch+1, it.batch))
		d.hook(ctx, "loader")
		t1 := time.Now()
		if it.feats, err = d.loader.Load(ctx, it.mb.InputNodes()); err != nil {
			return d.errf(fmt.Sprintf("loader epoch %d batch %d", it.epoch+1, it.batch), err)
		}
		d.m.StageBusy(metrics.Loader, time.Since(t1))
		t2 := time.Now()
		d.trk.block(stLoader, "waiting for room in queue loader->trainer")
		if err := out.Push(ctx, "loader", it); err != nil {
			return err
		}
		d.m.StageWaitOut(metrics.Loader, time.Since(t2))
	}
}

// trainerStage runs the optimizer steps and, on device 0, evaluates after
// every epoch. At the end it checks that the replicas agree.
func (d *device) trainerStage(ctx context.Context, in *pipeline.Queue[*item]) error {
	c := d.comm(stTrainer)
	for {
		t0 := time.Now()
		d.trk.work(stTrainer, "")
		d.trk.block(stTrainer, "waiting for a batch in queue loader->trainer")
		it, ok, err := in.Pop(ctx, "trainer")
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		d.m.StageWaitIn(metrics.Trainer, time.Since(t0))
		d.trk.work(stTrainer, fmt.Sprintf("training epoch %d batch %d", it.epoch+1, it.batch))
		d.hook(ctx, "trainer")
		t1 := time.Now()
		if it.batch == 0 && d.epochT.IsZero() {
			d.epochT = t1
		}
		loss, err := d.step(ctx, it)
		if err != nil {
			return d.errf(fmt.Sprintf("trainer epoch %d batch %d", it.epoch+1, it.batch), err)
		}
		d.m.StageBusy(metrics.Trainer, time.Since(t1))
		if f := d.s.opts.OnBatch; f != nil {
			f(d.rank, it.epoch, it.batch, loss)
		}
		if d.rank == 0 {
			d.losses = append(d.losses, loss)
			if it.last {
				d.trk.work(stTrainer, fmt.Sprintf("evaluating epoch %d", it.epoch+1))
				if err := d.endEpoch(it.epoch); err != nil {
					return d.errf(fmt.Sprintf("evaluation after epoch %d", it.epoch+1), err)
				}
				d.trk.work(stTrainer, fmt.Sprintf("writing the checkpoint after epoch %d", it.epoch+1))
				if err := d.saveCheckpoint(it.epoch + 1); err != nil {
					return d.errf(fmt.Sprintf("checkpoint after epoch %d", it.epoch+1), err)
				}
			}
		}
	}
	d.trk.work(stTrainer, "checking the replicas")
	if err := d.checkReplicas(ctx, c); err != nil {
		return err
	}
	d.trk.finish(stTrainer)
	return nil
}

// step trains on one batch and returns its loss averaged over devices.
func (d *device) step(ctx context.Context, it *item) (float64, error) {
	b, s := d.b, d.s
	t := autograd.NewTape(b)
	defer t.Release()
	seed := rng.Derive(s.cfg.Train.Seed, tagDropout, uint64(it.epoch), uint64(it.global))
	logits, cleanup, err := forward(b, t, d.model, it.mb, it.feats, s.sparse, s.dim, true, seed)
	defer cleanup()
	if err != nil {
		return 0, err
	}
	idx := make([]int32, len(it.seeds))
	labels := make([]int32, len(it.seeds))
	for i, v := range it.seeds {
		idx[i], labels[i] = int32(i), s.pd.ds.Labels[v]
	}
	rowsBuf, err := upload(b, idx)
	if err != nil {
		return 0, err
	}
	defer b.Free(rowsBuf)
	labelsBuf, err := upload(b, labels)
	if err != nil {
		return 0, err
	}
	defer b.Free(labelsBuf)
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
	if err := d.opt.ZeroGrad(); err != nil {
		return 0, err
	}
	if err := t.Backward(lossVar); err != nil {
		return 0, err
	}
	mean, err := d.allReduce(ctx, loss)
	if err != nil {
		return 0, err
	}
	if err := d.opt.Step(); err != nil {
		return 0, err
	}
	return mean, nil
}

// allReduce averages the gradients over the devices with the Bucketer
// (each bucket is reduced as soon as its gradients are on the host, while
// the next ones are downloaded) and returns the loss averaged likewise.
// One device keeps its exact float64 loss.
func (d *device) allReduce(ctx context.Context, loss float64) (float64, error) {
	ps := d.model.Params()
	k := d.s.cfg.Devices
	// Backward produces the last layers first; hand them over first.
	last := len(ps)
	d.host[last][0] = float32(loss)
	if err := d.grads.Ready(ctx, last, d.host[last]); err != nil {
		return 0, err
	}
	for i := len(ps) - 1; i >= 0; i-- {
		if err := d.b.Download(d.host[i], ps[i].Grad); err != nil {
			return 0, err
		}
		if err := d.grads.Ready(ctx, i, d.host[i]); err != nil {
			return 0, err
		}
	}
	if err := d.grads.Wait(ctx); err != nil {
		return 0, err
	}
	n := 1
	for i, p := range ps {
		n += p.Len()
		if err := d.b.Upload(p.Grad, d.host[i]); err != nil {
			return 0, err
		}
	}
	// A ring all-reduce sends 2(k-1)/k of the buffer from each device.
	d.m.AddBytes(metrics.Gradient, metrics.Peer, int64(2*(k-1)*4*n/k))
	if k == 1 {
		return loss, nil
	}
	return float64(d.host[last][0]), nil
}

// checkReplicas verifies that every device ends with the same parameters,
// bit for bit (BSP with averaged gradients must keep them equal).
func (d *device) checkReplicas(ctx context.Context, c comm.Comm) error {
	if err := CheckReplicas(ctx, d.b, d.model.Params(), c, d.s.cfg.Devices); err != nil {
		return d.errf("replica check", err)
	}
	return nil
}

func upload[T int32 | float32](b backend.Backend, v []T) (backend.Buffer, error) {
	dt := backend.Float32
	if _, ok := any(v).([]int32); ok {
		dt = backend.Int32
	}
	buf, err := b.Alloc(dt, len(v))
	if err != nil {
		return nil, err
	}
	if err := b.Upload(buf, v); err != nil {
		b.Free(buf)
		return nil, err
	}
	return buf, nil
}

// forward uploads a batch's blocks and input features (dense rows,
// turned into a sparse matrix when the features are sparse, exactly as
// the single-device trainer gathers them) and runs the model. Sparse
// features get the dense rows' dropout masks (nn.ForwardSparseAsDense),
// so the loss does not depend on the storage: the device engine
// (dsp/gpurun) keeps the rows dense. cleanup frees the uploads; call it
// after the tape is released.
func forward(b backend.Backend, t *autograd.Tape, model nn.Model, mb *sample.MiniBatch, feats []float32, sparse bool, dim int, training bool, seed uint64) (*autograd.Var, func(), error) {
	var blocks []*nn.Block
	var xs *autograd.SparseInput
	var xb backend.Buffer
	cleanup := func() {
		nn.FreeBlocks(blocks)
		xs.Free(b)
		if xb != nil {
			b.Free(xb)
		}
	}
	blocks, err := nn.UploadBlocks(b, mb)
	if err != nil {
		return nil, cleanup, err
	}
	rows := len(mb.InputNodes())
	if sparse {
		h, err := autograd.HostSparseFromDense(rows, dim, feats)
		if err != nil {
			return nil, cleanup, err
		}
		if xs, err = autograd.NewSparseInput(b, h.Rows, h.Cols, h.Indptr, h.Indices, h.Values); err != nil {
			return nil, cleanup, err
		}
		out, err := nn.ForwardSparseAsDense(model, t, xs, h, blocks, training, seed)
		return out, cleanup, err
	}
	if xb, err = upload(b, feats); err != nil {
		return nil, cleanup, err
	}
	x, err := t.Const(xb, rows, dim)
	if err != nil {
		return nil, cleanup, err
	}
	out, err := model.Forward(t, x, blocks, training, seed)
	return out, cleanup, err
}
