package fullgraph

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// Options are the run's environment: devices, communication and output.
type Options struct {
	// Backends are the devices, one per rank (at least one). Entries may
	// repeat a back end: P CPU virtual devices can share one CPU back end.
	Backends []backend.Backend
	// Comms are the ranks' communicators (Comms[i] has rank i), required
	// to be nil or one per device. Nil: Run makes an in-process group
	// (comm/inproc), one goroutine per device, and closes it at the end.
	// A rank that fails closes its communicator so the others stop too.
	Comms []comm.Comm
	// DeviceComms, when set (one per device, DeviceComms[i] of rank i,
	// on Backends[i]), carry the embedding blocks, the gradient
	// contributions and the weight-gradient all-reduce between device
	// buffers (NCCL or GPU shared memory: see comm/nccl.OpenLocal and
	// comm/gpushm.NewLocal), so the bulk data never stages through host
	// memory. Comms (or the in-process group Run makes) still carry the
	// small control messages. Nil: everything goes through Comms.
	DeviceComms []comm.Comm
	// Offsets, when set, says the dataset is already renumbered into
	// len(Offsets)-1 contiguous blocks, one per device (as
	// PartitionDataset or a partition file gives it): Run uses them
	// instead of partitioning.
	Offsets []int64
	// CommTimeout bounds each collective of an in-process group made by
	// Run (comm.DefaultTimeout if zero).
	CommTimeout time.Duration
	// CheckpointDir, when set, receives train.CheckpointFile (the
	// parameters, the optimizer state, the epochs done and the report so
	// far; device 0 writes it) every CheckpointEvery epochs (counted from
	// the start of training; 0: none), when the context is cancelled and
	// at the end. Not with Config.Staleness: the historical embeddings
	// the devices keep are part of the state and are not saved.
	CheckpointDir   string
	CheckpointEvery int
	// Resume continues from CheckpointDir's checkpoint when there is one
	// (and starts afresh when there is none): on the same devices, it
	// goes on exactly as the uninterrupted run. Without Resume an
	// existing checkpoint is an error rather than being overwritten.
	Resume bool
	// Log receives a line per logged epoch (about 25 per run) and a
	// summary; nil for none. Progress bars follow internal/progress.
	Log io.Writer
	// OnEpoch, when set, is called after every epoch with its record.
	OnEpoch func(train.EpochRecord)
	// Keep, when set, keeps the parameters of the epoch a saved model
	// holds (device 0's, after each epoch).
	Keep *train.Keeper
	// Task, when set, replaces node classification as the objective
	// (task.go; link prediction: package link/multi): the dataset then
	// needs no labels or node splits. Not with Engine "tape",
	// checkpoints, Keep or Eval "sampled".
	Task Task
	// World, when set, is the job this process is part of (comm/world):
	// the devices of every process are the run's ranks (World.Size()),
	// Backends (and Comms, DeviceComms when given) are this process's
	// (its ranks World.Ranks()), and without Comms the host
	// communicators are a World.HostGroup spanning the job. Device 0
	// (process 0) logs, checkpoints and reports; the other processes'
	// reports hold their own devices' memory. Nil: one process owns
	// every rank.
	World *world.World
}

// RunError reports a failure of one device.
type RunError struct {
	Rank int
	Op   string
	Err  error
}

func (e *RunError) Error() string {
	return fmt.Sprintf("fullgraph: device %d: %s: %v", e.Rank, e.Op, e.Err)
}
func (e *RunError) Unwrap() error { return e.Err }

// ErrInterrupted is wrapped by Run's error when the context was cancelled
// (train's: errors.Is matches either).
var ErrInterrupted = train.ErrInterrupted

// Run trains cfg on ds over the devices of opts and returns the report.
// Every model runs on the distributed engine (any number of devices);
// Engine "tape" runs the nn layers on one device with the autograd tape.
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
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := w.Size()
	if p < 1 || p > maxDevices {
		return nil, cfgErr("devices", "%d devices, want 1..%d", p, maxDevices)
	}
	if len(opts.Backends) != w.Local() {
		return nil, cfgErr("devices", "%d back ends for this process's %d devices", len(opts.Backends), w.Local())
	}
	for i, b := range opts.Backends {
		if b == nil {
			return nil, cfgErr("devices", "device %d has no back end", i)
		}
	}
	if err := cfg.ResolvePrecision(opts.Backends...); err != nil {
		var te *train.ConfigError
		if errors.As(err, &te) {
			return nil, &ConfigError{Field: te.Field, Msg: te.Msg}
		}
		return nil, err
	}
	if opts.Comms != nil {
		if len(opts.Comms) != w.Local() {
			return nil, cfgErr("comms", "%d communicators for %d devices", len(opts.Comms), w.Local())
		}
		for i, c := range opts.Comms {
			if c == nil || c.Rank() != w.Rank(i) || c.Size() != p {
				return nil, cfgErr("comms", "communicator %d is not rank %d of %d", i, w.Rank(i), p)
			}
		}
	}
	if opts.DeviceComms != nil {
		if len(opts.DeviceComms) != w.Local() {
			return nil, cfgErr("comms", "%d device communicators for %d devices", len(opts.DeviceComms), w.Local())
		}
		for i, c := range opts.DeviceComms {
			if c == nil || c.Rank() != w.Rank(i) || c.Size() != p {
				return nil, cfgErr("comms", "device communicator %d is not rank %d of %d", i, w.Rank(i), p)
			}
		}
	}
	switch {
	case opts.CheckpointEvery < 0:
		return nil, cfgErr("checkpoint_every", "%d is negative", opts.CheckpointEvery)
	case opts.Resume && opts.CheckpointDir == "":
		return nil, cfgErr("resume", "resuming needs a checkpoint directory")
	case opts.CheckpointDir != "" && cfg.Staleness.Enabled:
		return nil, cfgErr("staleness", "no checkpoints with staleness: the historical embeddings each device keeps are not saved")
	}
	if opts.Task != nil {
		switch {
		case cfg.Engine == EngineTape:
			return nil, cfgErr("engine", "a task other than node classification runs on the distributed engine")
		case opts.CheckpointDir != "":
			return nil, cfgErr("checkpoint", "a run with a task other than node classification does not checkpoint yet")
		case opts.Keep != nil:
			return nil, cfgErr("save", "a run with a task other than node classification keeps no model yet")
		case cfg.Eval == train.Sampled:
			return nil, cfgErr("eval", "a task evaluates the full-graph embeddings (eval full)")
		case ds == nil || ds.Graph == nil || ds.Features == nil || ds.FeatDim <= 0 || int64(len(ds.Features)) != ds.NumNodes()*int64(ds.FeatDim):
			return nil, &DataError{Msg: "a task needs a graph and a feature row per node"}
		}
	} else if err := checkDataset(ds); err != nil {
		return nil, err
	}
	if opts.Offsets != nil {
		if len(opts.Offsets) != p+1 {
			return nil, cfgErr("offsets", "%d offsets for %d devices, want %d", len(opts.Offsets), p, p+1)
		}
		if opts.Offsets[0] != 0 || opts.Offsets[p] != ds.NumNodes() {
			return nil, cfgErr("offsets", "offsets run from %d to %d, want 0 to %d", opts.Offsets[0], opts.Offsets[p], ds.NumNodes())
		}
		for i := 0; i < p; i++ {
			if opts.Offsets[i+1] <= opts.Offsets[i] {
				return nil, cfgErr("offsets", "block %d is empty or reversed (%d..%d)", i, opts.Offsets[i], opts.Offsets[i+1])
			}
		}
	}
	tape := cfg.Engine == EngineTape
	if tape && p > 1 {
		return nil, cfgErr("devices", "the tape engine runs on one device, got %d", p)
	}
	if p > int(ds.NumNodes()) {
		return nil, cfgErr("devices", "%d devices for %d nodes", p, ds.NumNodes())
	}
	t0 := time.Now()
	pr, err := prepare(ctx, ds, &cfg, p, opts.Offsets)
	if err != nil {
		return nil, err
	}
	pr.part.Seconds = time.Since(t0).Seconds()
	if opts.Task != nil {
		if err := opts.Task.Start(pr.oldToNew, pr.offsets); err != nil {
			return nil, fmt.Errorf("fullgraph: task: %w", err)
		}
	}
	s, err := newSession(ctx, ds, pr, &cfg, opts, w)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if tape {
		err = runTape(ctx, s)
	} else {
		err = runEngine(ctx, s)
	}
	if err != nil {
		return nil, err
	}
	rep := s.rep
	rep.summarize()
	rep.TotalSeconds = time.Since(start).Seconds()
	if opts.Log != nil {
		m := rep.Memory
		act := make([]string, len(m.ActivationBytes))
		for i, a := range m.ActivationBytes {
			act[i] = humanBytes(a)
		}
		peak := make([]string, len(m.PeakBytes))
		for i, p := range m.PeakBytes {
			peak[i] = humanBytes(p)
		}
		fmt.Fprintf(opts.Log, "memory: activations per layer %s; peak per device %s\n", strings.Join(act, ", "), strings.Join(peak, ", "))
	}
	return rep, nil
}

// replica is one device's share of a run: a worker of the distributed
// engine, or the tape engine's model. Every device holds the same
// parameters and takes the same optimizer steps.
type replica interface {
	// grads computes the parameter gradients of epoch (0-based) with
	// dropout, scale being the adaptive scale of the staleness variation
	// bound, and returns the training loss (the same on every device)
	// and the epoch's communication. It does not step the optimizer.
	grads(epoch int, scale float64) (float64, EpochComm, error)
	// evaluate scores the model over the whole graph without dropout
	// (every device takes part).
	evaluate() (train.Tally, error)
	// model is the device's back end, parameters and optimizer.
	model() (backend.Backend, []*nn.Param, optim.Optimizer)
	// comm is the communication statistics the device keeps.
	comm() *CommStats
}

// session is what the devices of a run share: the configuration, the
// report device 0 fills in, the checkpoint, and device 0's sampled
// evaluation.
type session struct {
	cfg  *Config
	opts Options
	pr   *prepared
	p    int
	w    *world.World // the job's processes; this one runs w.Ranks()
	rep  *Report

	ckpt  string          // the checkpoint file, "" for none
	id    train.DatasetID // the original dataset's, with a checkpoint
	saved *saved          // the checkpoint resumed, nil for none

	mirror  nn.Model         // Eval sampled: device 0's model for the train.Evaluator
	mirrorB backend.Backend  // the mirror's back end
	eval    *train.Evaluator // Eval sampled, on device 0
}

func newSession(ctx context.Context, orig *dataset.Dataset, pr *prepared, cfg *Config, opts Options, w *world.World) (*session, error) {
	s := &session{cfg: cfg, opts: opts, pr: pr, p: w.Size(), w: w}
	ds := pr.ds
	rep := &Report{Report: *train.NewReport(ds, cfg.trainConfig(), opts.Backends[0].Name(), pr.feats.RowNormalized),
		Config: *cfg, Partition: pr.part, World: w.Info()}
	rep.Dataset = orig.Name
	for _, b := range opts.Backends {
		rep.Devices = append(rep.Devices, b.Name())
	}
	s.rep = rep
	if err := s.openCheckpoint(ctx, orig); err != nil {
		return nil, err
	}
	return s, nil
}

// trainConfig is the train.Config of c's common settings (Mode
// train.Full): train.Report's Config.
func (c *Config) trainConfig() train.Config {
	return train.Config{Common: c.Common, Mode: train.Full}
}

func (s *session) close() {
	s.eval.Close()
	if s.mirror != nil {
		nn.FreeParams(s.mirrorB, s.mirror.Params())
	}
}

// first is the first epoch to train.
func (s *session) first() int {
	if s.saved == nil {
		return 0
	}
	return s.saved.meta.EpochsDone
}

// run trains every epoch from the first on device rank's replica r;
// device 0 records them in the report, logs them and saves the
// checkpoints.
func (s *session) run(ctx context.Context, rank int, r replica) error {
	cfg := s.cfg
	if err := s.load(rank, r); err != nil {
		return err
	}
	_, _, opt := r.model()
	var el *epochLog
	if rank == 0 {
		el = newEpochLog(cfg.Epochs, s.opts.Log)
	}
	var firstLoss, lastLoss float64
	for e := s.first(); e < cfg.Epochs; e++ {
		if err := ctx.Err(); err != nil {
			return s.interrupted(rank, r, e, err)
		}
		if el != nil {
			el.start(e)
		}
		scale := 1.0
		if pol := cfg.Staleness; pol.Enabled && pol.Adaptive && e > 0 && firstLoss > 0 {
			scale = min(1, max(pol.AdaptiveFloor, lastLoss/firstLoss))
		}
		t0 := time.Now()
		loss, ec, err := r.grads(e, scale)
		if err != nil {
			if ctx.Err() != nil { // no step was taken: the state is the last epoch's
				return s.interrupted(rank, r, e, ctx.Err())
			}
			return fmt.Errorf("epoch %d: %w", e+1, err)
		}
		if err := opt.Step(); err != nil {
			return fmt.Errorf("epoch %d: %w", e+1, err)
		}
		if e == 0 {
			firstLoss = loss
		}
		lastLoss = loss
		rec := train.EpochRecord{Epoch: e + 1, Loss: loss, BatchLosses: []float64{loss}}
		taskLine := ""
		if w, ok := r.(*worker); ok && w.task != nil {
			// The task evaluates (every rank embeds; rank 0 scores).
			rec.SetEvaluation(nil)
			if cfg.Evaluates(e) {
				t1 := time.Now()
				if taskLine, err = w.taskEvaluate(e); err != nil {
					return fmt.Errorf("epoch %d evaluation: %w", e+1, err)
				}
				rec.EvalSeconds = time.Since(t1).Seconds()
			}
		} else if cfg.Evaluates(e) {
			t1 := time.Now()
			t, err := s.evaluate(rank, r)
			if err != nil {
				return fmt.Errorf("epoch %d evaluation: %w", e+1, err)
			}
			rec.SetEvaluation(&t)
			rec.EvalSeconds = time.Since(t1).Seconds()
		} else {
			rec.SetEvaluation(nil)
		}
		rec.Seconds = time.Since(t0).Seconds()
		if rank != 0 {
			if n := s.opts.CheckpointEvery; n > 0 && (e+1)%n == 0 {
				if err := s.saveState(rank, r, e+1); err != nil {
					return err
				}
			}
			continue
		}
		if b, params, _ := r.model(); s.opts.Keep != nil {
			if err := s.opts.Keep.Offer(&rec, e == cfg.Epochs-1, b, params); err != nil {
				return err
			}
		}
		s.rep.Epochs = append(s.rep.Epochs, rec)
		s.rep.EpochComm = append(s.rep.EpochComm, ec)
		el.done(e, &rec, &ec, taskLine)
		if s.opts.OnEpoch != nil {
			s.opts.OnEpoch(rec)
		}
		if n := s.opts.CheckpointEvery; n > 0 && (e+1)%n == 0 {
			if err := s.save(r, e+1); err != nil {
				return err
			}
		}
	}
	if rank != 0 {
		return s.saveState(rank, r, cfg.Epochs)
	}
	if s.opts.Log != nil && s.p > 1 {
		st := *r.comm()
		st.finish()
		fmt.Fprintf(s.opts.Log, "broadcasts: %d of %d skipped, %s sent, %s avoided (%.1f%%); gradients: %s sent, %s avoided\n",
			st.BroadcastsSkipped, st.Broadcasts, humanBytes(st.BytesSent), humanBytes(st.BytesAvoided), 100*st.AvoidedFraction,
			humanBytes(st.GradBytesSent), humanBytes(st.GradBytesAvoided))
	}
	return s.save(r, cfg.Epochs)
}

// interrupted ends a run cancelled before epoch e's step: device 0 saves
// the state after e epochs when checkpoints are on.
func (s *session) interrupted(rank int, r replica, e int, cause error) error {
	var err error
	if rank == 0 {
		err = s.save(r, e)
	} else {
		err = s.saveState(rank, r, e)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: %v", ErrInterrupted, cause)
}

// evaluate scores the model after an epoch: over the whole graph on every
// device, or (Eval sampled) on device 0 with train.Evaluator, on an nn
// model holding this replica's parameters.
func (s *session) evaluate(rank int, r replica) (train.Tally, error) {
	if s.cfg.Eval != train.Sampled {
		return r.evaluate()
	}
	if rank != 0 {
		return train.Tally{}, nil
	}
	b, params, _ := r.model()
	if s.eval == nil {
		ds := s.pr.ds
		m, err := nn.New(b, s.cfg.ModelConfig(ds.FeatDim, ds.NumClasses))
		if err != nil {
			return train.Tally{}, err
		}
		s.mirror, s.mirrorB = m, b
		if s.eval, err = train.NewEvaluator(b, ds, s.pr.in, s.pr.feats, s.cfg.Common); err != nil {
			return train.Tally{}, err
		}
	}
	mp := s.mirror.Params()
	if len(mp) != len(params) {
		return train.Tally{}, fmt.Errorf("evaluation model has %d parameters, the engine %d", len(mp), len(params))
	}
	for i, p := range params {
		if err := b.Copy(mp[i].Value, p.Value); err != nil {
			return train.Tally{}, err
		}
	}
	return s.eval.Run(s.mirror)
}

// epochLog drives the progress bar and log lines of a run.
type epochLog struct {
	epochs, every int
	log           io.Writer
	bar           *progress.Bar
	barEnd        int
}

func newEpochLog(epochs int, log io.Writer) *epochLog {
	return &epochLog{epochs: epochs, every: train.LogEvery(epochs), log: log, barEnd: -1}
}

func (l *epochLog) start(e int) {
	if e > l.barEnd {
		l.barEnd = min(l.epochs-1, (e/l.every+1)*l.every-1)
		l.bar = progress.New(int64(l.barEnd-e+1), fmt.Sprintf("epoch %d/%d", e+1, l.epochs))
	}
}

func (l *epochLog) done(e int, rec *train.EpochRecord, ec *EpochComm, taskLine string) {
	l.bar.Add(1)
	desc := fmt.Sprintf("epoch %d/%d loss %.4f", e+1, l.epochs, rec.Loss)
	if ec.Broadcasts > 0 {
		desc += fmt.Sprintf(" skip %.0f%% age<=%d drift %.2f", 100*ec.SkippedShare(), ec.MaxAge, ec.MeanDrift)
	}
	l.bar.Describe(desc)
	if e == l.barEnd {
		l.bar.Finish()
	}
	if l.log != nil && (e == l.barEnd || e == 0) {
		line := train.EpochLine(rec, l.epochs)
		if taskLine != "" {
			line = fmt.Sprintf("epoch %*d/%d  loss %.4f  %s  (%.2fs)", len(fmt.Sprint(l.epochs)), rec.Epoch, l.epochs, rec.Loss, taskLine, rec.Seconds)
		}
		if ec.Broadcasts > 0 {
			line += fmt.Sprintf("  skipped %d/%d broadcasts (%.0f%% of bytes), max age %d, mean drift %.3f",
				ec.Skipped, ec.Broadcasts, 100*ec.SkippedShare(), ec.MaxAge, ec.MeanDrift)
		}
		fmt.Fprintln(l.log, line)
	}
}

// runEngine runs the distributed engine: one goroutine per device.
func runEngine(ctx context.Context, s *session) error {
	pr, cfg, opts, p := s.pr, s.cfg, s.opts, s.p
	agg := AggGCN // GAT: the same self-loop structure (nn.Block.WithSelfLoops), its weights unused
	if cfg.Model == SAGE {
		agg = AggMean
	}
	lay, err := NewLayout(pr.in, pr.offsets, agg)
	if err != nil {
		return err
	}
	pr.part.Edges, pr.part.RemoteEdges = lay.Edges()
	if pr.part.Edges > 0 {
		pr.part.RemoteFraction = float64(pr.part.RemoteEdges) / float64(pr.part.Edges)
	}
	comms := opts.Comms
	if comms == nil && p > 1 {
		if comms, err = s.w.HostGroup(ctx, "fullgraph", comm.Options{Timeout: opts.CommTimeout}); err != nil {
			return err
		}
		defer func() {
			for _, c := range comms {
				c.Close()
			}
		}()
	}
	rep := s.rep
	rep.Engine = "distributed"
	workers := make([]*worker, s.w.Local())
	errs := make([]error, s.w.Local())
	var wg sync.WaitGroup
	for i, r := range s.w.Ranks() {
		var c comm.Comm
		if comms != nil {
			c = comms[i]
		}
		var dc comm.Comm
		if opts.DeviceComms != nil && p > 1 {
			dc = opts.DeviceComms[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := newWorker(ctx, r, opts.Backends[i], c, dc, cfg, pr, lay, opts.Task)
			if err == nil {
				workers[i] = w
				err = s.run(ctx, r, w)
			}
			if err != nil {
				errs[i] = &RunError{Rank: r, Op: "training", Err: err}
				if c != nil {
					c.Close() // make the other ranks fail now, not at their deadline
				}
				if dc != nil {
					dc.Close()
				}
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, w := range workers {
			w.free()
		}
	}()
	if err := firstError(ctx, errs); err != nil {
		return err
	}
	w0 := workers[0]
	rep.Partition = pr.part
	rep.Comm = w0.stats
	rep.Comm.finish()
	mem := &rep.Memory
	mem.ActivationBytes = make([]int64, len(w0.act))
	for _, w := range workers {
		for l, a := range w.act {
			mem.ActivationBytes[l] = max(mem.ActivationBytes[l], a)
		}
		mem.PeakBytes = append(mem.PeakBytes, w.b.Peak())
		var cache int64
		for _, st := range w.st {
			cache += st.cacheBytes()
		}
		mem.CacheBytes = append(mem.CacheBytes, cache)
		mem.GraphBytes = append(mem.GraphBytes, w.b.SparseBytes())
	}
	return nil
}

// firstError picks the error to report: an interruption, else the first
// rank's error that is not a communication failure caused by another
// rank, else the first error.
func firstError(ctx context.Context, errs []error) error {
	var first, primary error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = err
		}
		var op *comm.OpError
		if primary == nil && !errors.As(err, &op) {
			primary = err
		}
	}
	if first == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("fullgraph: %w: %v", ErrInterrupted, ctx.Err())
	}
	if primary != nil {
		return primary
	}
	return first
}

// grads is replica.grads: the engine's gradients of the epoch, with
// the epoch's communication.
func (w *worker) grads(epoch int, scale float64) (float64, EpochComm, error) {
	w.epsScale = scale
	w.ep = epochComm{}
	loss, err := w.gradients(epoch, scale)
	return loss, w.ep.record(epoch+1, scale), err
}

func (w *worker) model() (backend.Backend, []*nn.Param, optim.Optimizer) { return w.b, w.params, w.opt }
func (w *worker) comm() *CommStats                                       { return &w.stats }

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	x, i := float64(n), 0
	for x >= unit && i < 4 {
		x /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", x, "KMGT"[i-1])
}
