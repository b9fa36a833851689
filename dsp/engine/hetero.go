package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/csp"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// HeteroOptions are the devices and the environment of a typed run on
// several devices (RunHetero).
type HeteroOptions struct {
	// Backends are the devices, one rank each (CPU back ends, or CUDA
	// devices: not mixed).
	Backends []backend.Backend
	// Comm is the communicators' kind (CommKinds; "" or auto: NCCL
	// between CUDA devices, in-process between CPU devices) and
	// CommTimeout every collective's deadline (default 5 minutes).
	Comm        string
	CommTimeout time.Duration
	GPUShm      gpushm.Options // Comm gpushm's settings
	// Log, OnBatch and Keep are device 0's (train.Options').
	Log     io.Writer
	OnBatch func(epoch, batch int, loss float64)
	Keep    *train.Keeper
	// EvalSampler makes device 0's sampler for Eval "sampled" (nil: the
	// host's sample.HeteroSampler).
	EvalSampler train.NewTypedSampler

	// replica, in tests, edits device r's replica before it starts.
	replica func(r int, rp *train.Replica)
}

// RunHetero trains cfg's typed model (rgcn or hsage) on h with sampled
// mini-batches on the devices of opts, data parallel, and returns device
// 0's report (with its Multi section). It runs one copy of the typed
// trainer (train.RunHetero: its Loop and step) per device, each a
// train.Replica:
//
//   - every epoch the training nodes are shuffled as on one device and
//     dealt by Deal (pad): each device takes the nodes of its range of
//     the target type, then the shares are balanced to ceil(T/K) or
//     floor(T/K) and cut into batches of BatchSize (per device), every
//     device taking the same number of steps; device r's batch i is
//     global batch i*K+r (its sampling key and dropout seed);
//   - the batches are drawn by the collective typed sampler
//     (csp.TypedSampler) over contiguous equal ranges of every node type
//     (nothing is renumbered), which draws sample.HeteroSampler's batch
//     whatever the number of devices;
//   - between the backward pass and the optimizer step the gradients and
//     the step's loss are averaged over the devices (one mean all-reduce
//     of a flat buffer per step, through a communicator of Comm's kind);
//   - device 0 evaluates (the whole typed graph, or sampled with
//     EvalSampler's sampler) and logs; at the end the replicas are
//     checked equal bit for bit.
//
// On one device it is train.RunHetero, loss for loss. A failure on one
// device cancels the others; the error is the device's that failed
// first (not a peer's report of it). Checkpoints are not supported.
func RunHetero(ctx context.Context, h *dataset.Hetero, cfg train.HeteroConfig, opts HeteroOptions) (*train.HeteroReport, error) {
	start := time.Now()
	k := len(opts.Backends)
	if k == 0 {
		return nil, &ConfigError{Field: "devices", Msg: "no devices"}
	}
	gpus := isGPU(opts.Backends[0])
	for r, b := range opts.Backends {
		if b == nil {
			return nil, &ConfigError{Field: "devices", Msg: fmt.Sprintf("device %d is nil", r)}
		}
		if isGPU(b) != gpus {
			return nil, &ConfigError{Field: "devices", Msg: fmt.Sprintf("device %d (%s) and device 0 (%s) are of different kinds", r, b.Name(), opts.Backends[0].Name())}
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := train.CheckHetero(h); err != nil {
		return nil, err
	}
	// The graph every replica trains on (reverse relations added once).
	gh, err := cfg.Graph(h)
	if err != nil {
		return nil, err
	}
	if _, err := cfg.RelationFanouts(gh); err != nil {
		return nil, err
	}
	kind, why, err := commKind(opts.Comm, gpus)
	if err != nil {
		return nil, err
	}
	timeout := opts.CommTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	var c *heteroComms
	if k == 1 {
		kind, why = "none", "one device"
	} else {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, "communication: %s (%s)\n", kind, why)
		}
		if c, err = openHeteroComms(ctx, kind, opts, gpus, comm.Options{Timeout: timeout}); err != nil {
			return nil, err
		}
		defer c.close()
	}
	nTarget := h.NodeTypes[h.Target].NumNodes
	owner := rangeOwner(nTarget, k)
	deal := func(order []int32) ([][][]int32, error) {
		b, _, err := Deal(order, owner, k, cfg.BatchSize, Pad)
		return b, err
	}
	// Pad's shares are ceil(T/K) at most: every device takes as many
	// batches as the largest share fills.
	share := (len(h.Train) + k - 1) / k
	batches := (share + cfg.BatchSize - 1) / cfg.BatchSize

	g, gctx := pipeline.NewGroup(ctx)
	reps := make([]*train.HeteroReport, k)
	errs := make([]error, k)
	// The first step's products warm before any gradient collective
	// (train.Replica.Barrier); families first met later are logged.
	first := newHostBarrier(k)
	warmed := make([]*device, k)
	for r, b := range opts.Backends {
		rp := &train.Replica{Rank: r, Size: k, Deal: deal, Batches: batches, Prepared: true}
		var sc comm.Comm
		if c != nil {
			sc = c.sampler[r]
			grads, host := c.grads[r], c.host[r]
			rp.Reduce = func(buf backend.Buffer) error { return grads.AllReduce(gctx, buf, comm.Mean) }
			rp.Done = func(params []*nn.Param) error { return checkReplicas(gctx, b, params, host, k) }
			rp.Barrier = func() error {
				d := &device{rank: r, b: b}
				d.warmFamilies, d.warmFallbacks, d.warmed = familiesSeen(b)
				warmed[r] = d
				return first.wait(gctx, r, timeout, "the first step")
			}
		}
		to := train.Options{Backend: b, Replica: rp, TypedSampler: collectiveTyped(gctx, sc, k)}
		if r == 0 {
			to.Log, to.OnBatch, to.Keep = opts.Log, opts.OnBatch, opts.Keep
			rp.EvalSampler = opts.EvalSampler
		}
		if opts.replica != nil {
			opts.replica(r, rp)
		}
		g.Go(fmt.Sprintf("device %d", r), func() error {
			reps[r], errs[r] = train.RunHetero(gctx, gh, cfg, to)
			if errs[r] != nil {
				errs[r] = &RunError{Op: fmt.Sprintf("rank %d (%s)", r, b.Name()), Err: errs[r]}
			}
			return errs[r]
		})
	}
	if err := g.Wait(); err != nil {
		if ctx.Err() != nil {
			return nil, &RunError{Op: "training", Err: fmt.Errorf("%w: %v", train.ErrInterrupted, err)}
		}
		return nil, rootError(errs)
	}
	if opts.Log != nil {
		var devs []*device
		for _, d := range warmed {
			if d != nil {
				devs = append(devs, d)
			}
		}
		lateFamilies(opts.Log, devs)
	}
	rep := reps[0]
	rep.Multi = &train.MultiDevice{Devices: k, Comm: kind, CommReason: why, BatchesPerDevice: batches,
		SteadyEpochSeconds: steadyEpochSeconds(rep.Epochs)}
	rep.TotalSeconds = time.Since(start).Seconds()
	return rep, nil
}

// heteroComms are a typed run's communicators, one per rank each: the
// collective sampler's and the gradients' (of the run's kind), and a
// host one for the replica check.
type heteroComms struct {
	sampler, grads, host []comm.Comm
}

func openHeteroComms(ctx context.Context, kind string, opts HeteroOptions, gpus bool, o comm.Options) (*heteroComms, error) {
	c := &heteroComms{}
	var err error
	// Collectives wait for completion (NCCL's Async off): each device
	// runs its sampler, forward, backward and step one after another,
	// and a collective's deadline then covers the whole exchange.
	if c.sampler, err = openLocalGroup(ctx, kind, "hetero-sampler", opts.Backends, gpus, o, false, opts.GPUShm); err == nil {
		if c.grads, err = openLocalGroup(ctx, kind, "hetero-grads", opts.Backends, gpus, o, false, opts.GPUShm); err == nil {
			c.host, err = inproc.New(len(opts.Backends), o)
		}
	}
	if err != nil {
		c.close()
		return nil, &RunError{Op: kind + " communicators", Err: err}
	}
	return c, nil
}

func (c *heteroComms) close() {
	for _, cs := range [][]comm.Comm{c.sampler, c.grads, c.host} {
		for _, x := range cs {
			if x != nil {
				x.Close()
			}
		}
	}
}

// rangeOwner is the owner of a node of a type of n nodes split into k
// contiguous equal ranges (rangeOffsets).
func rangeOwner(n int64, k int) func(int32) int {
	off := rangeOffsets(n, k)
	return func(v int32) int {
		// The largest r with off[r] <= v (empty ranges skipped).
		lo, hi := 0, k-1
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if off[mid] <= int64(v) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		return lo
	}
}

// rangeOffsets splits n IDs into k contiguous ranges of floor or ceil of
// n/k: range r is [off[r], off[r+1]).
func rangeOffsets(n int64, k int) []int64 {
	off := make([]int64, k+1)
	for r := range off {
		off[r] = n * int64(r) / int64(k)
	}
	return off
}

// collectiveTyped makes a run's training sampler: the collective typed
// sampler over contiguous equal ranges of every node type among k ranks
// (c nil: one rank, the whole graph), its collectives bounded by ctx.
func collectiveTyped(ctx context.Context, c comm.Comm, k int) train.NewTypedSampler {
	return func(b backend.Backend, numNodes []int64, rels []sample.Relation, scfg sample.HeteroConfig) (sample.TypedSampler, error) {
		off := make([][]int64, len(numNodes))
		for t, n := range numNodes {
			off[t] = rangeOffsets(n, k)
		}
		s, err := csp.NewTyped(b, numNodes, rels, off, c, csp.TypedConfig{Fanouts: scfg.Fanouts, Replace: scfg.Replace, Weighted: scfg.Weighted})
		if err != nil {
			return nil, err
		}
		return &ctxTyped{ctx: ctx, s: s}, nil
	}
}

// ctxTyped is a collective typed sampler as the typed trainer draws
// from it (sample.TypedSampler, whose calls take no context): ctx is
// the run's. Closing it closes the sampler.
type ctxTyped struct {
	ctx context.Context
	s   *csp.TypedSampler
}

func (c *ctxTyped) Sample(seedType int, seeds []graph.NodeID, key sample.Key) (*sample.HeteroMiniBatch, error) {
	return c.s.Sample(c.ctx, seedType, seeds, key)
}

func (c *ctxTyped) SampleTypes(seeds [][]graph.NodeID, key sample.Key) (*sample.HeteroMiniBatch, error) {
	return c.s.SampleTypes(c.ctx, seeds, key)
}

func (c *ctxTyped) NumHops() int { return c.s.NumHops() }
func (c *ctxTyped) Close() error { return c.s.Close() }

// rootError is the error of the device that failed first: the first
// that is not a peer's report of another's failure, nor a cancellation
// that followed it.
func rootError(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = err
		}
		if !secondary(err) {
			return err
		}
	}
	return first
}

// secondary reports whether err is a device's report of another's
// failure, or the cancellation that followed it.
func secondary(err error) bool {
	for _, e := range []error{csp.ErrPeer, context.Canceled, train.ErrInterrupted,
		comm.ErrAborted, comm.ErrPeerLost, comm.ErrBroken, comm.ErrClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// steadyEpochSeconds is the mean training seconds (evaluation excluded)
// of the epochs after the first (the first's with one).
func steadyEpochSeconds(eps []train.EpochRecord) float64 {
	if len(eps) == 0 {
		return 0
	}
	if len(eps) == 1 {
		return eps[0].Seconds - eps[0].EvalSeconds
	}
	var s float64
	for _, e := range eps[1:] {
		s += e.Seconds - e.EvalSeconds
	}
	return s / float64(len(eps)-1)
}
