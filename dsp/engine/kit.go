package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/csp"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/cudadsp"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// batch is a sampled mini-batch.
type batch interface {
	// NumInputs is the number of input nodes (unique), whose features
	// the first layer reads.
	NumInputs() int
	// IDs are the input nodes on the host, or nil for a batch on a
	// device (DeviceIDs): nothing needs them there, and copying them
	// would make the sampler wait for the copy every batch.
	IDs() []int32
	// DeviceIDs are the input nodes in an int32 device buffer (of the
	// sampler's handle, already written), or nil when the batch has none.
	DeviceIDs() backend.Buffer
	// Blocks returns the blocks as package nn blocks on the trainer's
	// back end b (first layer first), copied there when the batch lives
	// on another device (the sampler's stream); the caller frees them.
	// The batch must then stay alive until b has run the copies.
	Blocks(b backend.Backend) ([]*nn.Block, error)
	// Free releases what the batch still holds.
	Free()
}

// backwardPreparer is a batch whose blocks' transposes, which the
// backward pass's transposed products read, can be built ahead on
// another handle of the GPU (cudadsp.Batch).
type backwardPreparer interface {
	PrepareBackward(b backend.Backend, from int) error
}

// sampler draws a device's batches.
type sampler interface {
	Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (batch, error)
	Close() error
}

// cspSampler is collective sampling over the device's patch (dsp/csp),
// on a GPU or a CPU back end: every device calls Sample once per batch,
// in the same order. It adds the sampler's exchange bytes to the device's
// metrics. Sample returns once the batch is on the device: its last step
// reads the blocks' sizes behind all of the batch's work on the
// sampler's stream.
type cspSampler struct {
	dev        backend.Backend // the sampler's handle; nil on a CPU back end
	s          collective
	m          *metrics.Counters
	links      []metrics.Link // per destination rank: peer, or network to another machine (nil: all peer)
	sent, kept int64          // totals already counted
	net        int64          // of sent, to other machines
	waited     time.Duration  // the sampler's wait time already counted
}

// collective is what cspSampler uses of csp's node-wise Sampler and
// LayerSampler.
type collective interface {
	Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (*csp.Batch, error)
	Stats() csp.Stats
	Close() error
}

func (c *cspSampler) Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (batch, error) {
	b, err := c.s.Sample(ctx, seeds, key)
	st := c.s.Stats()
	var sent, net int64
	for r, n := range st.BytesSent {
		sent += n
		if r < len(c.links) && c.links[r] == metrics.Network {
			net += n
		}
	}
	// BytesSent are totals: the network's share of what is new is
	// counted at the cumulative split (net is a running total too).
	c.m.AddBytes(metrics.Sample, metrics.Network, net-c.net)
	c.m.AddBytes(metrics.Sample, metrics.Peer, (sent-net)-(c.sent-c.net))
	c.net = net
	c.m.AddBytes(metrics.Sample, metrics.Local, st.BytesLocal-c.kept)
	c.sent, c.kept = sent, st.BytesLocal
	c.m.StageSync(metrics.Sampler, st.WaitTime-c.waited)
	c.waited = st.WaitTime
	if err != nil {
		return nil, err
	}
	if b.Host != nil {
		return &hostBatch{mb: b.Host}, nil
	}
	return cudadsp.NewBatch(c.dev, b.Device), nil
}

func (c *cspSampler) Close() error { return c.s.Close() }

// hostSampler samples on the host over the whole graph, the batches of
// collective sampling (wholeGraphSamplers): the CPU back ends' sampler
// "full".
type hostSampler func([]graph.NodeID, sample.Key) (*sample.MiniBatch, error)

func (h hostSampler) Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (batch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mb, err := h(seeds, key)
	if err != nil {
		return nil, err
	}
	return &hostBatch{mb: mb}, nil
}

func (h hostSampler) Close() error { return nil }

// gpuSampler is the full sampler on a GPU (package internal/cudadsp).
type gpuSampler struct{ *cudadsp.FullSampler }

func (g gpuSampler) Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (batch, error) {
	b, err := g.FullSampler.Sample(ctx, seeds, key)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// isGPU reports whether b runs the engine's GPU paths (kernels compiled
// at run time and a queue: the CUDA back end).
func isGPU(b backend.Backend) bool { return cudadsp.IsGPU(b) }

type hostBatch struct{ mb *sample.MiniBatch }

func (h *hostBatch) NumInputs() int            { return len(h.mb.InputNodes()) }
func (h *hostBatch) IDs() []int32              { return h.mb.InputNodes() }
func (h *hostBatch) DeviceIDs() backend.Buffer { return nil }
func (h *hostBatch) Free()                     {}

func (h *hostBatch) Blocks(b backend.Backend) ([]*nn.Block, error) { return nn.UploadBlocks(b, h.mb) }

// kit is what a device needs besides the model: its samplers (one per
// sampler worker) and feature store.
type kit struct {
	smps  []sampler
	store cache.Store
	// How long building the samplers (the topology on the device) and
	// the store (the feature cache) took.
	topology, features time.Duration
}

// close closes the samplers, the workers' before the first (they may
// read its topology).
func (k *kit) close() error {
	var errs []error
	for i := len(k.smps) - 1; i >= 0; i-- {
		errs = append(errs, k.smps[i].Close())
	}
	return errors.Join(errs...)
}

// samplerSpec says how a device samples: on a GPU, on which handles (one
// per sampler worker: siblings of the trainer's on the same GPU with
// their own streams, or nil for one worker on the trainer's); whether
// collectively over its patch (csp: patch, offsets and each worker's
// sampler-stage communicator, nil with one device; the same on GPUs and
// CPU back ends) or over the whole graph (gpusample on a GPU, the host's
// wholeGraphSamplers' on a CPU back end); layer: layer-wise (LayerWise;
// collective only on GPUs), else node-wise.
type samplerSpec struct {
	devs    []backend.Sibling
	workers int
	csp     bool
	layer   bool
	patch   *layout.Patch
	offsets []int64
	comms   []comm.Comm
	m       *metrics.Counters
	links   []metrics.Link // per rank (rankLinks)
}

// newKit builds a device's samplers and feature store: csp on spec's
// handles (or, not collective, gpusample over the whole graph on a GPU,
// sample.NeighborSampler on the host otherwise) and the feature
// package's store on b (a host table on a CPU back end). hot lists the
// rows the device caches, in cache order; with onlyHot the store is asked
// for no other row (peers cache the rest: a GPU's store pins no copy of
// the table, a CPU device's refuses other rows); onUpload hears of the bytes of
// rows copied to a GPU. With sh (the per-machine layout) the store holds
// the machine's shard and fetches other machines' rows (cache.ShardStore:
// its host machine on a CPU back end, cudadsp's on a GPU), keeping in
// device memory the rows of hot it holds and its hot rows of other
// machines, up to sh.capacity rows (cache.NewShardCache); x is unused.
func newKit(b backend.Backend, in *graph.CSR, x []float32, rows, cols int, hot []graph.NodeID, onlyHot bool, scfg gpusample.Config, spec samplerSpec, onUpload func(int64), sh *shardSpec) (*kit, error) {
	workers := max(spec.workers, 1)
	gpu := isGPU(b)
	if gpu {
		if spec.layer && !spec.csp {
			return nil, errors.New("layer-wise sampling on GPUs is collective (csp)")
		}
		if len(spec.devs) != 0 && len(spec.devs) != workers || len(spec.devs) == 0 && workers > 1 {
			return nil, fmt.Errorf("%d sampler workers on %d handles", workers, len(spec.devs))
		}
	}
	k := &kit{}
	t0 := time.Now()
	for w := range workers {
		s, err := spec.sampler(b, in, scfg, w, k.smps)
		if err != nil {
			k.close()
			return nil, err
		}
		k.smps = append(k.smps, s)
	}
	k.topology = time.Since(t0)
	t0 = time.Now()
	if sh != nil {
		// The device keeps the plan's rows the machine holds and the
		// machine's hot rows of other machines, within its budget.
		var m cache.ShardMachine
		c, err := cache.NewShardCache(hot, sh.hotIDs, sh.hotX, rows, cols, sh.lo, sh.hi, sh.capacity)
		if err == nil {
			if gpu {
				m, err = cudadsp.NewShardMachine(b, sh.x, sh.lo, sh.hi, cols, c, onUpload)
			} else {
				m, err = cache.NewHostShard(b, sh.x, sh.lo, sh.hi, cols, c)
			}
		}
		if err == nil {
			k.store, err = cache.NewShardStore(b, m, sh.src, rows, cols, sh.lo, sh.hi)
			if err != nil {
				m.Close()
			}
		}
		if err != nil {
			k.close()
			return nil, fmt.Errorf("feature store: %w", err)
		}
		k.features = time.Since(t0)
		return k, nil
	}
	if !gpu {
		k.store = &cache.HostStore{B: b, Table: x, Rows: rows, Cols: cols, Hot: len(hot), Order: hot, OnlyHot: onlyHot}
		k.features = time.Since(t0)
		return k, nil
	}
	st, err := cudadsp.NewStore(b, x, rows, cols, hot, onlyHot, onUpload)
	if err != nil {
		k.close()
		return nil, fmt.Errorf("feature store: %w", err)
	}
	k.store = st
	k.features = time.Since(t0)
	return k, nil
}

// sampler builds sampler worker w (dev: the trainer's handle; before:
// workers 0..w-1): collective, or over the whole graph (gpusample on a
// GPU, whose workers after the first read the first one's topology in
// place; the host's wholeGraphSamplers' on a CPU back end).
func (spec *samplerSpec) sampler(dev backend.Backend, in *graph.CSR, scfg gpusample.Config, w int, before []sampler) (sampler, error) {
	sd := dev
	if len(spec.devs) > 0 {
		sd = spec.devs[w]
	}
	if spec.csp {
		return spec.collective(sd, scfg, w, before)
	}
	if !isGPU(sd) {
		ss, err := wholeGraphSamplers(in, spec.layer, sample.Config{Fanouts: scfg.Fanouts, Replace: scfg.Replace, Weighted: scfg.Weighted}, 1)
		if err != nil {
			return nil, err
		}
		return hostSampler(ss[0]), nil
	}
	var s *cudadsp.FullSampler
	var err error
	if w > 0 {
		s, err = before[0].(gpuSampler).Sibling(sd)
	} else {
		s, err = cudadsp.NewFullSampler(sd, in, scfg, spec.m)
	}
	if err != nil {
		return nil, fmt.Errorf("sampler %d: %w", w+1, err)
	}
	return gpuSampler{s}, nil
}

// collective builds collective sampler worker w on be (a GPU handle or a
// CPU back end, which reads the patch in place whatever scfg's placement;
// before: workers 0..w-1). Node-wise workers after the first are its
// siblings.
func (spec *samplerSpec) collective(be backend.Backend, scfg gpusample.Config, w int, before []sampler) (sampler, error) {
	ccfg := csp.Config{Fanouts: scfg.Fanouts, Replace: scfg.Replace, Weighted: scfg.Weighted, Placement: scfg.Placement}
	var c comm.Comm
	if w < len(spec.comms) {
		c = spec.comms[w]
	}
	var cs collective
	var err error
	switch {
	case spec.layer:
		cs, err = csp.NewLayer(be, spec.patch, spec.offsets, c, ccfg)
	case w > 0:
		cs, err = before[0].(*cspSampler).s.(*csp.Sampler).Sibling(be, c)
	default:
		cs, err = csp.New(be, spec.patch, spec.offsets, c, ccfg)
	}
	if err != nil {
		return nil, fmt.Errorf("collective sampler %d: %w", w+1, err)
	}
	var dev backend.Backend
	if isGPU(be) {
		dev = be
	}
	return &cspSampler{dev: dev, s: cs, m: spec.m, links: spec.links}, nil
}
