package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/comm/shm"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/comm/tcp"
	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/machines"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// Stage indices (coordinator stages and communicator groups): the
// sampler (worker 0), the loader, the trainer, then the other sampler
// workers (samplerStage).
const (
	stSampler = iota
	stLoader
	stTrainer
	numFixedStages
)

const numStages = numFixedStages + MaxSamplerWorkers - 1

// samplerStage is sampler worker w's stage: each worker has its own
// coordinator stage, communicators and tracker line.
func samplerStage(w int) int {
	if w == 0 {
		return stSampler
	}
	return numFixedStages + w - 1
}

// samplerWorker is the sampler worker of stage st, or -1.
func samplerWorker(st int) int {
	switch {
	case st == stSampler:
		return 0
	case st >= numFixedStages && st < numStages:
		return st - numFixedStages + 1
	}
	return -1
}

var stageNames = func() (n [numStages]string) {
	n[stSampler], n[stLoader], n[stTrainer] = "sampler", "loader", "trainer"
	for w := 1; w < MaxSamplerWorkers; w++ {
		n[samplerStage(w)] = fmt.Sprintf("sampler %d", w+1)
	}
	return n
}()

// SamplerStandIn describes Config.Sampler "full": every device samples
// the whole graph.
const SamplerStandIn = "gpusample over the whole graph on every device"

// shared is what every device of a run reads.
type shared struct {
	cfg    Config
	opts   Options
	w      *world.World // the job's processes; this one owns w.Ranks()
	pd     *partitioned
	in     *graph.CSR
	feats  *train.Features // dense: the devices gather and cache rows
	x      []float32       // feats.Dense
	sparse bool            // train.MostlyZero(x)
	dim    int
	plan   *cache.Plan
	capRow int               // rows a device's cache budget holds (the plan's capacity)
	svc    *machines.Service // the feature service of a per-machine layout, or nil
	coords []*comm.Coordinator
	dcs    [numStages][]comm.Comm // nil groups are not used
	hcs    [numStages][]comm.Comm
	group  *pipeline.Group
	// Indexed by global rank; only this process's ranks are filled.
	ctrs   []metrics.Counters
	trk    []tracker
	sdevs  [][]backend.Sibling // [rank][worker]: the sampler workers' sibling handles of the GPUs (own streams); nil when shared
	ldevs  []backend.Sibling   // the loaders', likewise
	queues [][]func() metrics.QueueSnapshot

	clock   *setupClock
	placing *progress.Phase // the placement phase: Add the feature bytes uploaded
	patches []*layout.Patch // per device: its patch of the topology

	dsID     train.DatasetID // the caller's dataset's fingerprint (checkpoints)
	ckptPath string          // the checkpoint file, "" for none
	resumed  *resumeState    // the checkpoint this run continues from, or nil

	evalLogged bool // evalInputs said where the evaluation reads its input (device 0's goroutine)
	evalHinted bool // the log said the evaluations cost more than the training (device 0's goroutine)
	closeOnce  sync.Once
	mu         sync.Mutex
	info       Info
	run        RunInfo
	history    []train.EpochRecord
	epochs     epochLog  // device 0's, read after the run
	devs       []*device // every rank's, for device 0's whole-graph evaluation over all of them
}

// Run trains cfg on ds with one device per opts.Backends entry and
// returns the report. With opts.World the devices are this process's
// share of a job's cfg.Devices ranks; the error of a failed job names
// the processes behind it (world.Explain).
func Run(ctx context.Context, ds *dataset.Dataset, cfg Config, opts Options) (*Report, error) {
	w := opts.World
	if w == nil {
		w = world.Single(len(opts.Backends))
	}
	rep, err := runJob(ctx, ds, cfg, opts, w)
	return rep, w.Explain(err)
}

func runJob(ctx context.Context, ds *dataset.Dataset, cfg Config, opts Options, w *world.World) (*Report, error) {
	start := time.Now()
	if err := cfg.Normalize(); err != nil {
		return nil, err
	}
	k := cfg.Devices
	if w.Size() != k {
		return nil, &ConfigError{Field: "devices", Msg: fmt.Sprintf("%d devices but the job has %d ranks", k, w.Size())}
	}
	if len(opts.Backends) != w.Local() {
		return nil, &ConfigError{Field: "devices", Msg: fmt.Sprintf("%d back ends for this process's %d devices", len(opts.Backends), w.Local())}
	}
	nCUDA := 0
	for i, b := range opts.Backends {
		if b == nil {
			return nil, &ConfigError{Field: "devices", Msg: fmt.Sprintf("back end %d is nil", i)}
		}
		if isGPU(b) {
			nCUDA++
		}
		for _, o := range opts.Backends[:i] {
			if o == b {
				return nil, &ConfigError{Field: "devices", Msg: fmt.Sprintf("back end %d (%s) repeats an earlier one", i, b.Name())}
			}
		}
	}
	gpus := nCUDA == len(opts.Backends)
	if nCUDA != 0 && !gpus {
		return nil, &ConfigError{Field: "devices", Msg: "mixes CUDA devices with other back ends"}
	}
	if _, _, err := jobCommKind(w, cfg.Comm, gpus); err != nil {
		return nil, err
	}
	var tce *train.ConfigError
	if err := cfg.Train.ResolvePrecision(opts.Backends...); errors.As(err, &tce) {
		return nil, &ConfigError{Field: tce.Field, Msg: tce.Msg}
	}
	profs := make([]*profiler, w.Local())
	for i, b := range opts.Backends {
		var err error
		if profs[i], err = newProfiler(b, cfg.ProfileEpoch); err != nil {
			return nil, err
		}
	}
	if nCUDA > 0 && cfg.Scheme == LayerWise && cfg.Sampler == SamplerFull {
		return nil, &ConfigError{Field: "sampler", Msg: "the full sampler on GPUs is node-wise (gpusample); layer-wise sampling there is collective (use csp)"}
	}
	clock := newSetupClock(&opts, start)
	defer clock.close()
	// The setup, phase by phase (SetupPhase): each reads the data once
	// at most, in parallel where it is large.
	ph := clock.begin("check", 0)
	task := opts.Task
	if task != nil {
		// The task checked its data; the engine reads the graph and
		// the features.
		switch {
		case opts.CheckpointDir != "":
			return nil, &ConfigError{Field: "checkpoint", Msg: "a run with a task other than node classification does not checkpoint yet"}
		case opts.Keep != nil:
			return nil, &ConfigError{Field: "save", Msg: "a run with a task other than node classification keeps no model yet"}
		case ds == nil || ds.Graph == nil || ds.Features == nil || ds.FeatDim <= 0 || int64(len(ds.Features)) != ds.NumNodes()*int64(ds.FeatDim):
			return nil, &RunError{Op: "dataset", Err: errors.New("a task needs a graph and a feature row per node")}
		}
	} else if err := train.CheckDataset(ds); err != nil && opts.Machine == nil {
		// A machine directory's dataset has no features (its shard
		// does); dataset.Open checked it and machines.Open its shard.
		var de *train.DataError
		if errors.As(err, &de) {
			return nil, &RunError{Op: "dataset", Err: errors.New(de.Msg)}
		}
	}
	ph.End()
	ph = clock.begin("partition", 0)
	var pd *partitioned
	var err error
	if opts.Machine != nil {
		pd, err = machinePartition(ctx, opts.Machine, &cfg, w)
	} else {
		pd, err = partitionData(ctx, ds, &cfg, opts.Log)
	}
	if err != nil {
		return nil, err
	}
	if task != nil {
		if err := task.Start(pd.oldToNew, pd.book); err != nil {
			return nil, &RunError{Op: "task", Err: err}
		}
	}
	ph.End()
	s := &shared{cfg: cfg, opts: opts, w: w, clock: clock, pd: pd, dim: pd.ds.FeatDim, ctrs: make([]metrics.Counters, k), trk: make([]tracker, k),
		queues: make([][]func() metrics.QueueSnapshot, k)}
	ph = clock.begin("graph", 0)
	if s.in = pd.ds.InGraph(); s.in == nil {
		return nil, &RunError{Op: "dataset", Err: errors.New("invalid graph")}
	}
	ph.End()
	ph = clock.begin("features", 0)
	if opts.Machine != nil {
		s.dim = opts.Machine.Manifest.Cols
		defer func() {
			if s.svc != nil {
				s.svc.Close()
			}
		}()
		if err := s.machineFeatures(ctx, opts.Machine); err != nil {
			return nil, err
		}
	} else {
		s.feats = train.NewDenseFeatures(pd.ds.Features, int(pd.ds.NumNodes()), s.dim, cfg.Train.RowNorm)
		s.feats.Round(cfg.Train.Prec()) // bf16: the stores hold bfloat16 rows (cache.ValueBytes)
		s.x = s.feats.Dense
		s.sparse = train.MostlyZero(s.x)
	}
	ph.End()
	// Before the devices start: the plan decides what each device
	// caches (pre-sampling runs on the GPUs themselves: presample.go).
	vb := cache.ValueBytes(cfg.Train.Prec())
	budget := cfg.CacheBytes
	if budget < 0 {
		budget = pd.ds.NumNodes() * int64(s.dim) * vb
	}
	if s.dim > 0 {
		s.capRow = int(min(budget/(vb*int64(s.dim)), math.MaxInt32))
	}
	ph = clock.begin("hotness", 0)
	var hot []graph.NodeID
	var presampleSec float64
	if s.cachesEverything(budget) {
		// Every device caches every row: no ranking changes what is
		// cached, so none is computed (a pre-sampling pass would sample
		// a whole epoch for nothing).
		hot = nodeOrder(pd.ds.NumNodes())
		if opts.Log != nil && cfg.Hotness != cache.ByInDegree {
			fmt.Fprintf(opts.Log, "every device caches every row: hotness %s not computed\n", cfg.Hotness)
		}
	} else if hot, presampleSec, err = s.hotOrder(ctx, gpus && !w.Multi()); err != nil {
		return nil, &RunError{Op: "hotness", Err: err}
	}
	ph.End()
	ph = clock.begin("plan", 0)
	if s.plan, err = cache.NewPlan(pd.book, hot, s.dim, cache.PlanConfig{BudgetBytes: budget, Policy: cfg.CachePolicy, GroupSize: cfg.CacheGroup, ValueBytes: vb}); err != nil {
		return nil, &RunError{Op: "cache plan", Err: err}
	}
	ph.End()
	// This process's devices' patches at once: one check of the graph,
	// the patches built concurrently.
	ph = clock.begin("patches", 0)
	if s.patches, err = s.topologyPatches(); err != nil {
		return nil, &RunError{Op: "patches", Err: err}
	}
	ph.End()
	defer s.closeComms()
	ph = clock.begin("comms", 0)
	if gpus && !cfg.SharedStream {
		// The samplers and the loaders run on second and third handles
		// of each GPU: their own streams, locks and allocators, so that
		// no stage waits behind another's work or holds a lock another
		// stage needs while it waits for a collective.
		// Their streams have the GPU's highest priority (unless NoStagePriority): their kernels
		// are short and on the pipeline's critical path, and would
		// otherwise queue behind the trainer's large ones.
		s.sdevs, s.ldevs = make([][]backend.Sibling, k), make([]backend.Sibling, k)
		o := backend.SiblingOptions{HighPriority: !cfg.NoStagePriority}
		for _, r := range w.Ranks() {
			b := s.backend(r)
			d, ok := b.(backend.Siblings)
			if !ok {
				return nil, &RunError{Op: "sampler streams", Err: fmt.Errorf("%s opens no sibling handles (backend.Siblings)", b.Name())}
			}
			s.sdevs[r] = make([]backend.Sibling, cfg.SamplerWorkers)
			for w := range s.sdevs[r] {
				h, err := d.Sibling(o)
				if err != nil {
					return nil, &RunError{Op: "sampler streams", Err: err}
				}
				s.sdevs[r][w] = h
			}
			h, err := d.Sibling(o)
			if err != nil {
				return nil, &RunError{Op: "loader streams", Err: err}
			}
			s.ldevs[r] = h
		}
	}
	if err := s.openComms(ctx, gpus); err != nil {
		return nil, err
	}
	ph.End()
	s.info = Info{Devices: k, Comm: s.info.Comm, CommReason: s.info.CommReason, Scheme: cfg.Scheme, Partition: pd.method, EdgeCut: pd.edgeCut,
		Book: pd.book.Offsets(), CachePolicy: string(cfg.CachePolicy), CacheGroup: cfg.CacheGroup, Hotness: string(cfg.Hotness),
		QueueCapacity: cfg.QueueCapacity, Rebalance: cfg.Rebalance, Coordinated: !cfg.NoCoordinator, BucketBytes: cfg.BucketBytes,
		RowNormalized: s.feats.RowNormalized, SparseFeatures: s.sparse, PerDevice: make([]DeviceInfo, k), CacheLayout: cacheLayout(s.plan)}
	sampler := "collective sampling over the device's patch (dsp/csp)"
	switch {
	case cfg.Sampler == SamplerFull && gpus:
		sampler = SamplerStandIn
	case cfg.Sampler == SamplerFull && cfg.Scheme == LayerWise:
		sampler = "host (layer-wise over the whole graph on each device)"
	case cfg.Sampler == SamplerFull:
		sampler = "host (sample.NeighborSampler over the whole graph)"
	case cfg.Scheme == LayerWise:
		sampler = "collective layer-wise sampling over the device's patch (dsp/csp)"
	}
	s.run = RunInfo{Pipeline: !cfg.NoPipeline, EvalEvery: cfg.Train.EvalEvery, Sampler: sampler, SamplerWorkers: cfg.SamplerWorkers,
		SamplerStream: s.sdevs != nil, FeaturesDense: true, Exchange: cache.Exchanges(s.plan), PeakDeviceBytes: make([]int64, k)}
	if s.sdevs != nil {
		if sb, ok := s.sdevs[w.First()][0].(backend.Siblings); ok {
			s.run.StagePriority = sb.QueuePriority()
		}
	}
	s.run.PresampleSeconds = presampleSec
	if opts.CheckpointDir != "" {
		ph = clock.begin("checkpoint", 0)
		if err := s.openCheckpoints(ctx, ds); err != nil {
			return nil, err
		}
		ph.End()
	}
	if s.dcs[stTrainer] != nil && s.info.Comm == comm.KindNCCL {
		s.run.AsyncCollectives = nccl.AsyncFor(nccl.Options{Async: !cfg.SyncCollectives})
	}

	g, gctx := pipeline.NewGroup(ctx)
	s.group = g
	// At the first failure, note where every stage was, and say so at
	// once (a stalled run may not return from a device call).
	var stalled, states []string
	g.OnFail = func(err error) {
		stalled, states = diagnose(s.trk, cfg.WaitTimeout/2)
		if w := opts.Log; w != nil {
			fmt.Fprintf(w, "failure: %v\nstages at the failure:\n  %s\n", err, strings.Join(states, "\n  "))
		}
	}
	// A failure releases the stages waiting for their turn or a peer.
	stop := context.AfterFunc(gctx, s.closeCoordinators)
	defer stop()
	devs := make([]*device, w.Local())
	s.devs = devs
	setupDone := make(chan struct{})
	var setupOnce sync.Once
	var setupWG sync.WaitGroup
	setupWG.Add(len(devs))
	// The GPUs' feature caches are what takes long to place: count their
	// bytes (CPU devices read the host table in place), this process's
	// ranks only.
	var upload int64
	for i, r := range w.Ranks() {
		if isGPU(opts.Backends[i]) {
			upload += s.plan.ValueBytes() * int64(len(s.plan.Rows(r))) * int64(s.dim)
		}
	}
	s.placing = clock.begin("placement", upload)
	go func() { setupWG.Wait(); s.placing.End(); clock.setupDone(); setupOnce.Do(func() { close(setupDone) }) }()
	warmDone := make(chan struct{})
	var warmWG sync.WaitGroup
	warmWG.Add(len(devs))
	go func() { warmWG.Wait(); close(warmDone) }()
	for i, r := range w.Ranks() {
		d := &device{s: s, rank: r, b: opts.Backends[i], m: &s.ctrs[r], trk: &s.trk[r], prof: profs[i]}
		devs[i] = d
		if s.sdevs != nil {
			d.sdevs, d.ldev = s.sdevs[r], s.ldevs[r]
		}
		g.Go(fmt.Sprintf("rank %d", r), func() error {
			err := d.setup()
			setupWG.Done()
			if err != nil {
				return err
			}
			// Start training when every device of this process is
			// ready, so that no collective waits for another device's
			// setup (the devices of other processes are ready once
			// their first collective answers).
			select {
			case <-setupDone:
			case <-gctx.Done():
				warmWG.Done()
				return gctx.Err()
			}
			// Then every device's products once, and start when all
			// are done: no first use of a kernel while a collective is
			// in flight (device.warm).
			if !opts.noWarm {
				err = d.warm()
			}
			warmWG.Done()
			if err != nil {
				return d.errf("warm-up", err)
			}
			select {
			case <-warmDone:
			case <-gctx.Done():
				return gctx.Err()
			}
			return d.start(gctx)
		})
	}
	err = g.Wait()
	s.run.SetupSeconds = devs[0].setupSeconds
	if opts.Log != nil {
		lateFamilies(opts.Log, devs)
	}
	for _, d := range devs {
		if m, ok := d.b.(backend.Memory); ok {
			s.run.PeakDeviceBytes[d.rank] = m.Stats().PeakBytes
		}
		if d.prof != nil && d.prof.out != nil {
			o := d.prof.out
			s.run.OpProfiles = append(s.run.OpProfiles, *o)
			if opts.Log != nil {
				writeProfile(opts.Log, o, 25)
			}
		}
		d.free()
	}
	if err != nil {
		if ctx.Err() != nil { // the caller cancelled: whatever failed then was interrupted
			return nil, &RunError{Op: "training", Err: fmt.Errorf("%w: %v", train.ErrInterrupted, err)}
		}
		names := make([]string, len(opts.Backends))
		for i, b := range opts.Backends {
			names[i] = b.Name()
		}
		return nil, &RunError{Op: "training", Err: err, Stalled: stalled, States: states, Hint: stallHint(cfg.Train.Prec(), names, stalled)}
	}
	rep := s.report(ds, opts.Backends[0].Name())
	if w.Multi() {
		// Every process's bytes per link and remote-feature latency, per
		// machine, summed by process 0 (which stays up, its feature
		// service and store with it, until every process has sent its
		// own; the others need nothing from it any more).
		pm, err := s.perMachine(ctx)
		if err != nil {
			return nil, &RunError{Op: "metrics", Err: err}
		}
		rep.World.PerMachine = pm
	}
	rep.TotalSeconds = time.Since(start).Seconds()
	return rep, nil
}

// openComms opens the control communicator (coordinator), a host
// communicator per stage (headers, the replica check) and a communicator
// of device buffers per stage that needs one, each spanning the job's
// ranks with this process's devices as its local members (comm/world).
// In one process the kind is Config.Comm's (commKind, openGroup); in a
// job of several processes jobCommKind's (nccl, shm or tcp through
// World.DeviceGroup). One device needs no device communicator.
func (s *shared) openComms(ctx context.Context, gpus bool) error {
	cfg, w := &s.cfg, s.w
	k := cfg.Devices
	o := comm.Options{Timeout: cfg.CommTimeout}
	if !cfg.NoCoordinator {
		ctrl, err := w.HostGroup(ctx, "dsp-control", o)
		if err != nil {
			return &RunError{Op: "communicators", Err: err}
		}
		s.coords = make([]*comm.Coordinator, k)
		for i, r := range w.Ranks() {
			s.coords[r] = comm.NewCoordinator(ctrl[i], comm.CoordOptions{Timeout: s.waitTimeout()})
		}
	}
	for st := range numFixedStages {
		hs, err := w.HostGroup(ctx, fmt.Sprintf("dsp-host%d", st), o)
		if err != nil {
			return &RunError{Op: "communicators", Err: err}
		}
		s.hcs[st] = byRank(w, k, hs)
	}
	kind, why, err := jobCommKind(w, cfg.Comm, gpus)
	if err != nil {
		return err
	}
	s.info.Comm, s.info.CommReason = kind, why
	if k == 1 {
		s.info.Comm, s.info.CommReason = "none", "one device"
		return nil
	}
	if w := s.opts.Log; w != nil {
		fmt.Fprintf(w, "communication: %s (%s)\n", kind, why)
	}
	need := []int{stTrainer}
	if cache.Exchanges(s.plan) {
		need = append(need, stLoader)
	}
	if cfg.Sampler == SamplerCSP {
		for w := range cfg.SamplerWorkers {
			need = append(need, samplerStage(w))
		}
	}
	for _, st := range need {
		devs := make([]backend.Backend, w.Local())
		for i, r := range w.Ranks() {
			devs[i] = s.backend(r)
			if wk := samplerWorker(st); wk >= 0 && s.sdevs != nil {
				devs[i] = s.sdevs[r][wk] // a sampler's collectives go on its stream
			}
			if st == stLoader && s.ldevs != nil {
				devs[i] = s.ldevs[r]
			}
		}
		var dcs []comm.Comm
		if w.Multi() {
			// See openGroup on NCCL's Async.
			dcs, _, err = w.DeviceGroup(ctx, fmt.Sprintf("dsp-dev%d", st), devs,
				world.DeviceOptions{Options: o, Kind: kind, Prefix: "dsp-" + stageNames[st], Async: !cfg.SyncCollectives})
		} else {
			dcs, err = s.openGroup(ctx, kind, st, devs, gpus, o)
		}
		if err != nil {
			return &RunError{Op: kind + " communicators", Err: err}
		}
		s.dcs[st] = byRank(w, k, dcs)
	}
	return nil
}

// commKind resolves Config.Comm for the devices (gpus: CUDA devices) and
// says why.
func commKind(kind string, gpus bool) (string, string, error) {
	switch kind {
	case "", comm.KindAuto:
		if gpus {
			return comm.KindNCCL, "auto: NCCL between CUDA devices", nil
		}
		return comm.KindInproc, "auto: the devices are goroutines of this process", nil
	case comm.KindNCCL:
		if !gpus {
			return "", "", &ConfigError{Field: "comm", Msg: "nccl needs CUDA devices"}
		}
	case comm.KindGPUShm, comm.KindShm, comm.KindTCP:
	default:
		return "", "", &ConfigError{Field: "comm", Msg: fmt.Sprintf("unknown kind %q (want %s)", kind, strings.Join(CommKinds, ", "))}
	}
	return kind, "requested", nil
}

// jobCommKind is commKind for a job: in one process Config.Comm as
// commKind resolves it; across processes only the kinds that span them
// (nccl, shm on one host, tcp), auto picking NCCL on GPUs and else the
// world's host transport (shm on one host, tcp across hosts).
func jobCommKind(w *world.World, kind string, gpus bool) (string, string, error) {
	got, why, err := commKind(kind, gpus)
	if err != nil || !w.Multi() {
		return got, why, err
	}
	n := len(w.Processes())
	switch got {
	case comm.KindInproc: // auto on CPU devices
		hk := w.HostKind()
		if hk == comm.KindShm {
			return hk, fmt.Sprintf("auto: the job's %d processes share one host", n), nil
		}
		return hk, fmt.Sprintf("auto: the job's %d processes span hosts", n), nil
	case comm.KindGPUShm:
		return "", "", &ConfigError{Field: "comm", Msg: fmt.Sprintf("gpushm cannot span processes (a job of %d); use nccl, shm or tcp", n)}
	case comm.KindShm:
		if !w.SameHost() {
			return "", "", &ConfigError{Field: "comm", Msg: fmt.Sprintf("shm needs the job's %d processes on one host; use tcp or nccl", n)}
		}
	}
	return got, why, nil
}

// openGroup opens the communicators of stage st on devs, one rank each
// (gpus: CUDA devices). The host kinds (inproc, shm, tcp) take CPU
// buffers as they are and stage GPU buffers through host memory
// (comm/staged).
func (s *shared) openGroup(ctx context.Context, kind string, st int, devs []backend.Backend, gpus bool, o comm.Options) ([]comm.Comm, error) {
	// NCCL collectives return once queued (unless SyncCollectives): the
	// trainer's optimizer step and next batch follow its all-reduce on
	// the stream while the GPUs reduce (waiting for it left each GPU
	// idle during the host's launches), and the coordinator's turn ends
	// at the launch, so one stage's long exchange does not hold back the
	// others' launches. Results are read through the stage's own stream
	// (downloads, or fences before a hand-over).
	return openLocalGroup(ctx, kind, "dsp-"+stageNames[st], devs, gpus, o, !s.cfg.SyncCollectives, s.opts.GPUShm)
}

// openLocalGroup opens communicators of kind on devs, one rank each, in
// this process (gpus: CUDA devices); prefix names NCCL's, async makes
// NCCL collectives return once queued, gso configures gpushm.
func openLocalGroup(ctx context.Context, kind, prefix string, devs []backend.Backend, gpus bool, o comm.Options, async bool, gso gpushm.Options) ([]comm.Comm, error) {
	k := len(devs)
	var hs []comm.Comm
	var err error
	switch kind {
	case comm.KindNCCL:
		return nccl.OpenLocal(ctx, devs, nccl.Options{Options: o, Prefix: prefix, Async: async})
	case comm.KindGPUShm:
		gso.Options = o
		return gpushm.NewLocal(devs, gso)
	case comm.KindShm:
		hs, err = shm.NewLocal(k, shm.Options{Options: o})
	case comm.KindTCP:
		hs, err = tcp.NewLocal(k, tcp.Options{Options: o})
	default:
		hs, err = inproc.New(k, o)
	}
	if err != nil {
		return nil, err
	}
	if !gpus {
		return hs, nil // CPU buffers are host memory
	}
	cs := make([]comm.Comm, k)
	for r, h := range hs {
		cs[r] = staged.Open(h, devs[r], o)
	}
	return cs, nil
}

// byRank spreads this process's communicators (local order) over a
// slice indexed by global rank.
func byRank[T any](w *world.World, k int, local []T) []T {
	out := make([]T, k)
	for i, r := range w.Ranks() {
		out[r] = local[i]
	}
	return out
}

// waitTimeout bounds a stage's waits for a queue or its turn: the
// configured WaitTimeout, plus CommTimeout in a job of several
// processes. There a stage may wait for one of another process that
// waits in a collective, and the collective's failure, which names the
// process missing, must come first: a queue's timeout can only say that
// the stage feeding it stalled.
func (s *shared) waitTimeout() time.Duration {
	if s.w.Multi() {
		return s.cfg.WaitTimeout + s.cfg.CommTimeout
	}
	return s.cfg.WaitTimeout
}

// backend is global rank r's back end (one of this process's).
func (s *shared) backend(r int) backend.Backend { return s.opts.Backends[r-s.w.First()] }

func (s *shared) closeCoordinators() {
	s.closeOnce.Do(func() {
		for _, c := range s.coords {
			if c != nil {
				c.Close()
			}
		}
	})
}

func (s *shared) closeComms() {
	s.closeCoordinators()
	for st := range numStages {
		for _, c := range s.dcs[st] {
			if c != nil {
				c.Close()
			}
		}
		for _, c := range s.hcs[st] {
			if c != nil {
				c.Close()
			}
		}
	}
	for _, ds := range append(slices.Clone(s.sdevs), s.ldevs) {
		for _, d := range ds {
			if d != nil {
				d.Close()
			}
		}
	}
}

// topologyPatches builds this process's devices' patches of the topology
// (their rows in global IDs, placed on the device up to the topology
// budget), indexed by rank: nil for the ranks of other processes.
func (s *shared) topologyPatches() ([]*layout.Patch, error) {
	topo := s.cfg.TopologyBytes
	if topo <= 0 {
		topo = layout.NoLimit
	}
	return layout.BuildRanks(s.in, s.pd.book, s.w.Ranks(), layout.Options{DeviceBytes: topo})
}

// deviceComm is device rank's coordinated device communicator of stage.
// The coordinator gives every device the same launch order across
// stages; on NCCL a collective's turn ends once it is queued.
func (s *shared) deviceComm(rank, stage int) comm.Comm {
	if s.dcs[stage] == nil {
		return nil
	}
	t := &s.trk[rank]
	c := &pipeline.Comm{Comm: s.dcs[stage][rank], Stage: stage, Name: stageNames[stage], Hook: s.opts.Hook,
		Track: func(b string) { t.blocked(stage, b) }}
	if s.coords != nil {
		c.Launch = s.coords[rank]
	}
	return c
}

// hostComm is device rank's coordinated host communicator of stage.
func (s *shared) hostComm(rank, stage int) comm.Comm {
	t := &s.trk[rank]
	c := &pipeline.Comm{Comm: s.hcs[stage][rank], Stage: stage, Name: stageNames[stage], Hook: s.opts.Hook,
		Track: func(b string) { t.blocked(stage, b) }}
	if s.coords != nil {
		c.Launch = s.coords[rank]
	}
	return c
}
