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
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/tensor/backend"
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
	DeviceComms []comm.DeviceComm
	// Offsets, when set, says the dataset is already renumbered into
	// len(Offsets)-1 contiguous blocks, one per device (as
	// PartitionDataset or a partition file gives it): Run uses them
	// instead of partitioning.
	Offsets []int64
	// CommTimeout bounds each collective of an in-process group made by
	// Run (comm.DefaultTimeout if zero).
	CommTimeout time.Duration
	// Log receives a line per logged epoch (about 25 per run) and a
	// summary; nil for none. Progress bars follow internal/progress.
	Log io.Writer
	// OnEpoch, when set, is called after every epoch with its record.
	OnEpoch func(EpochRecord)
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

// ErrInterrupted is wrapped by Run's error when the context was cancelled.
var ErrInterrupted = errors.New("interrupted")

// Run trains cfg on ds over the devices of opts and returns the report.
// Every model runs on the distributed engine (any number of devices);
// Engine "tape" runs the nn layers on one device with the autograd tape.
func Run(ctx context.Context, ds *dataset.Dataset, cfg Config, opts Options) (*Report, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := len(opts.Backends)
	if p < 1 || p > maxDevices {
		return nil, cfgErr("devices", "%d devices, want 1..%d", p, maxDevices)
	}
	for i, b := range opts.Backends {
		if b == nil {
			return nil, cfgErr("devices", "device %d has no back end", i)
		}
	}
	if opts.Comms != nil {
		if len(opts.Comms) != p {
			return nil, cfgErr("comms", "%d communicators for %d devices", len(opts.Comms), p)
		}
		for i, c := range opts.Comms {
			if c == nil || c.Rank() != i || c.Size() != p {
				return nil, cfgErr("comms", "communicator %d is not rank %d of %d", i, i, p)
			}
		}
	}
	if opts.DeviceComms != nil {
		if len(opts.DeviceComms) != p {
			return nil, cfgErr("comms", "%d device communicators for %d devices", len(opts.DeviceComms), p)
		}
		for i, c := range opts.DeviceComms {
			if c == nil || c.Rank() != i || c.Size() != p {
				return nil, cfgErr("comms", "device communicator %d is not rank %d of %d", i, i, p)
			}
		}
	}
	if err := checkDataset(ds); err != nil {
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
	var rep *Report
	if tape {
		rep, err = runTape(ctx, pr, &cfg, opts)
	} else {
		rep, err = runEngine(ctx, pr, &cfg, opts)
	}
	if err != nil {
		return nil, err
	}
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

// newReport fills the fields every engine shares.
func newReport(pr *prepared, cfg *Config, opts Options, engine string) *Report {
	ds := pr.ds
	rep := &Report{Schema: ReportVersion, Dataset: ds.Name, Model: cfg.Model, Mode: Mode, Engine: engine,
		Seed: cfg.Seed, RowNormalized: pr.rowNorm, Partition: pr.part, Config: *cfg,
		Graph: GraphStats{Nodes: ds.NumNodes(), Edges: ds.Graph.NumEdges(), Features: ds.FeatDim,
			Classes: ds.NumClasses, Train: len(ds.Train), Val: len(ds.Val), Test: len(ds.Test)}}
	for _, b := range opts.Backends {
		rep.Devices = append(rep.Devices, b.Name())
	}
	return rep
}

// epochLog drives the progress bar and log lines of a run.
type epochLog struct {
	epochs, every int
	log           io.Writer
	bar           *progress.Bar
	barEnd        int
}

func newEpochLog(epochs int, log io.Writer) *epochLog {
	every := 1
	if epochs > 30 {
		every = (epochs + 24) / 25
	}
	return &epochLog{epochs: epochs, every: every, log: log, barEnd: -1}
}

func (l *epochLog) start(e int) {
	if e > l.barEnd {
		l.barEnd = min(l.epochs-1, (e/l.every+1)*l.every-1)
		l.bar = progress.New(int64(l.barEnd-e+1), fmt.Sprintf("epoch %d/%d", e+1, l.epochs))
	}
}

func (l *epochLog) done(e int, rec *EpochRecord, skip float64) {
	l.bar.Add(1)
	desc := fmt.Sprintf("epoch %d/%d loss %.4f", e+1, l.epochs, rec.Loss)
	if rec.Broadcasts > 0 {
		desc += fmt.Sprintf(" skip %.0f%% age<=%d drift %.2f", 100*skip, rec.MaxAge, rec.MeanDrift)
	}
	l.bar.Describe(desc)
	if e == l.barEnd {
		l.bar.Finish()
	}
	if l.log != nil && (e == l.barEnd || e == 0) {
		w := len(fmt.Sprint(l.epochs))
		line := fmt.Sprintf("epoch %*d/%d  loss %.4f", w, e+1, l.epochs, rec.Loss)
		if rec.Evaluated {
			line += fmt.Sprintf("  train %.4f  val %.4f  test %.4f", rec.TrainAccuracy, rec.ValAccuracy, rec.TestAccuracy)
		}
		if rec.Broadcasts > 0 {
			line += fmt.Sprintf("  skipped %d/%d broadcasts (%.0f%% of bytes), max age %d, mean drift %.3f",
				rec.Skipped, rec.Broadcasts, 100*skip, rec.MaxAge, rec.MeanDrift)
		}
		fmt.Fprintf(l.log, "%s  (%.3fs)\n", line, rec.Seconds+rec.EvalSeconds)
	}
}

// runEngine runs the distributed engine: one goroutine per device.
func runEngine(ctx context.Context, pr *prepared, cfg *Config, opts Options) (*Report, error) {
	p := len(opts.Backends)
	agg := AggGCN // GAT: the same self-loop structure (nn.Block.WithSelfLoops), its weights unused
	if cfg.Model == SAGE {
		agg = AggMean
	}
	lay, err := NewLayout(pr.in, pr.offsets, agg)
	if err != nil {
		return nil, err
	}
	pr.part.Edges, pr.part.RemoteEdges = lay.Edges()
	if pr.part.Edges > 0 {
		pr.part.RemoteFraction = float64(pr.part.RemoteEdges) / float64(pr.part.Edges)
	}
	comms := opts.Comms
	if comms == nil && p > 1 {
		if comms, err = inproc.New(p, comm.Options{Timeout: opts.CommTimeout}); err != nil {
			return nil, err
		}
		defer func() {
			for _, c := range comms {
				c.Close()
			}
		}()
	}
	rep := newReport(pr, cfg, opts, "distributed")
	workers := make([]*worker, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r := 0; r < p; r++ {
		var c comm.Comm
		if comms != nil {
			c = comms[r]
		}
		var dc comm.DeviceComm
		if opts.DeviceComms != nil && p > 1 {
			dc = opts.DeviceComms[r]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := newWorker(ctx, r, opts.Backends[r], c, dc, cfg, pr, lay)
			if err == nil {
				workers[r] = w
				err = w.loop(ctx, rep, opts)
			}
			if err != nil {
				errs[r] = &RunError{Rank: r, Op: "training", Err: err}
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
		return nil, err
	}
	w0 := workers[0]
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
	rep.summarize()
	return rep, nil
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

// loop runs every epoch on this device; rank 0 records them in rep.
func (w *worker) loop(ctx context.Context, rep *Report, opts Options) error {
	cfg := w.cfg
	var el *epochLog
	if w.rank == 0 {
		el = newEpochLog(cfg.Epochs, opts.Log)
	}
	var firstLoss, lastLoss float64
	for e := 0; e < cfg.Epochs; e++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %v", ErrInterrupted, err)
		}
		if el != nil {
			el.start(e)
		}
		scale := 1.0
		if pol := cfg.Staleness; pol.Enabled && pol.Adaptive && e > 0 && firstLoss > 0 {
			scale = min(1, max(pol.AdaptiveFloor, lastLoss/firstLoss))
		}
		w.epsScale = scale
		w.ep = epochComm{}
		t0 := time.Now()
		loss, err := w.trainStep(e, scale)
		if err != nil {
			return fmt.Errorf("epoch %d: %w", e+1, err)
		}
		if e == 0 {
			firstLoss = loss
		}
		lastLoss = loss
		rec := EpochRecord{Epoch: e + 1, Loss: loss, Seconds: time.Since(t0).Seconds(), EpsScale: scale,
			Broadcasts: w.ep.Broadcasts, Skipped: w.ep.Skipped, BytesSent: w.ep.BytesSent, BytesAvoided: w.ep.BytesAvoided,
			GradBytesSent: w.ep.GradBytesSent, GradBytesAvoided: w.ep.GradBytesAvoided, MaxAge: w.ep.MaxAge}
		if w.ep.driftN > 0 {
			rec.MeanDrift = w.ep.driftSum / float64(w.ep.driftN)
		}
		if (e+1)%cfg.EvalEvery == 0 || e == cfg.Epochs-1 {
			t1 := time.Now()
			r, err := w.evaluate()
			if err != nil {
				return fmt.Errorf("epoch %d: %w", e+1, err)
			}
			rec.Evaluated = true
			rec.TrainAccuracy, rec.ValAccuracy, rec.TestAccuracy, rec.ValLoss = r.acc[0], r.acc[1], r.acc[2], r.valLoss
			rec.EvalSeconds = time.Since(t1).Seconds()
		}
		if w.rank != 0 {
			continue
		}
		rep.Epochs = append(rep.Epochs, rec)
		skip := 0.0
		if t := rec.BytesSent + rec.BytesAvoided; t > 0 {
			skip = float64(rec.BytesAvoided) / float64(t)
		}
		el.done(e, &rec, skip)
		if opts.OnEpoch != nil {
			opts.OnEpoch(rec)
		}
	}
	if w.rank == 0 && opts.Log != nil && w.p > 1 {
		st := w.stats
		st.finish()
		fmt.Fprintf(opts.Log, "broadcasts: %d of %d skipped, %s sent, %s avoided (%.1f%%); gradients: %s sent, %s avoided\n",
			st.BroadcastsSkipped, st.Broadcasts, humanBytes(st.BytesSent), humanBytes(st.BytesAvoided), 100*st.AvoidedFraction,
			humanBytes(st.GradBytesSent), humanBytes(st.GradBytesAvoided))
	}
	return nil
}

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
