package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/csp"
	"github.com/strata-gnn/strata/dsp/internal/devbuf"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
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

// sampler draws a device's batches.
type sampler interface {
	Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (batch, error)
	Close() error
}

// gpuSampler samples with gpusample over the whole graph on the device:
// it queues the batch, waits for the stream with a fence (without the
// device lock, so that stages sharing the device keep queueing work) and
// collects it.
type gpuSampler struct {
	dev   *cuda.Device
	s     *gpusample.Sampler
	fence *devbuf.Fence
	m     *metrics.Counters
}

func (g *gpuSampler) Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (batch, error) {
	p, err := g.s.SampleAsync(seeds, key)
	if err != nil {
		return nil, err
	}
	t := time.Now()
	ferr := g.fence.Record()
	if ferr == nil {
		ferr = g.fence.Wait()
	}
	b, err := p.Wait() // every Pending must be waited for
	g.m.StageSync(metrics.Sampler, time.Since(t))
	if err != nil {
		return nil, err
	}
	if ferr != nil {
		b.Free()
		return nil, ferr
	}
	return &gpuBatch{dev: g.dev, b: b}, nil
}

func (g *gpuSampler) Close() error { return errors.Join(g.s.Close(), g.fence.Close()) }

// cspSampler is collective sampling over the device's patch (dsp/csp),
// on a GPU or a CPU back end: every device calls Sample once per batch,
// in the same order. It adds the sampler's exchange bytes to the device's
// metrics. Sample returns once the batch is on the device: its last step
// reads the blocks' sizes behind all of the batch's work on the
// sampler's stream.
type cspSampler struct {
	dev        *cuda.Device // the sampler's handle; nil on a CPU back end
	s          collective
	m          *metrics.Counters
	sent, kept int64         // totals already counted
	waited     time.Duration // the sampler's wait time already counted
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
	var sent int64
	for _, n := range st.BytesSent {
		sent += n
	}
	c.m.AddBytes(metrics.Sample, metrics.Peer, sent-c.sent)
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
	return &gpuBatch{dev: c.dev, b: b.Device}, nil
}

func (c *cspSampler) Close() error { return c.s.Close() }

type gpuBatch struct {
	dev *cuda.Device // the sampler's device
	b   *gpusample.Batch
}

func (g *gpuBatch) NumInputs() int {
	if in := g.b.InputNodes(); in != nil {
		return in.Len()
	}
	return 0
}
func (g *gpuBatch) IDs() []int32 { return nil }
func (g *gpuBatch) DeviceIDs() backend.Buffer {
	if in := g.b.InputNodes(); in != nil {
		return in
	}
	return nil
}
func (g *gpuBatch) Free() { g.b.Free() }

func (g *gpuBatch) Blocks(b backend.Backend) ([]*nn.Block, error) {
	t, ok := b.(*cuda.Device)
	if !ok {
		return nil, fmt.Errorf("a GPU batch for a %T back end", b)
	}
	if t == g.dev {
		return g.b.NNBlocks()
	}
	return adoptBlocks(t, g.b)
}

// adoptBlocks copies the batch's block matrices (row offsets and local
// column indices) into t's memory on t's stream and wraps them as nn
// blocks there. The sampler's device (the same GPU, another stream) has
// finished writing them: the sampler waited for its stream before handing
// the batch on.
func adoptBlocks(t *cuda.Device, b *gpusample.Batch) ([]*nn.Block, error) {
	out := make([]*nn.Block, 0, len(b.Blocks))
	fail := func(err error) ([]*nn.Block, error) {
		for _, o := range out {
			o.Free()
		}
		return nil, err
	}
	for i := range b.Blocks {
		k := &b.Blocks[i]
		if k.A == nil {
			return fail(fmt.Errorf("block %d has no matrix", i))
		}
		sp, sc := k.A.Indptr(), k.A.Indices()
		if sp.Len() != k.NumDst+1 || sc.Len() != k.NumEdges {
			return fail(fmt.Errorf("block %d: %d row offsets and %d indices for %d rows and %d edges", i, sp.Len(), sc.Len(), k.NumDst, k.NumEdges))
		}
		var ptr, col *cuda.Buffer
		err := t.Do(func(l *cuda.Locked) error {
			var err error
			if ptr, err = l.Alloc(backend.Int64, k.NumDst+1); err != nil {
				return err
			}
			if col, err = l.Alloc(backend.Int32, k.NumEdges); err != nil {
				l.Free(ptr)
				ptr = nil
				return err
			}
			if err := cu.MemcpyDtoDAsync(ptr.Ptr(), sp.Ptr(), uint64(8*(k.NumDst+1)), l.Stream()); err != nil {
				return err
			}
			if k.NumEdges > 0 {
				return cu.MemcpyDtoDAsync(col.Ptr(), sc.Ptr(), uint64(4*k.NumEdges), l.Stream())
			}
			return nil
		})
		if err != nil {
			if ptr != nil {
				t.Free(ptr)
				t.Free(col)
			}
			return fail(err)
		}
		a, err := t.NewSparseFromDevice(k.NumDst, k.NumSrc, ptr, col)
		if err != nil {
			t.Free(ptr)
			t.Free(col)
			return fail(err)
		}
		blk, err := nn.NewBlockFromSparse(t, a)
		if err != nil {
			t.FreeSparse(a)
			return fail(err)
		}
		out = append(out, blk)
	}
	return out, nil
}

// aliasBuffer returns src, a buffer of another handle of the same GPU, as
// a buffer of b without copying (cuda.Device.Alias).
func aliasBuffer(b backend.Backend, src backend.Buffer) (backend.Buffer, error) {
	t, ok := b.(*cuda.Device)
	sb, ok2 := src.(*cuda.Buffer)
	if !ok || !ok2 {
		return nil, fmt.Errorf("aliasing a %T into a %T", src, b)
	}
	return t.Alias(sb)
}

// adoptBuffer copies src (a buffer of another handle of the same GPU,
// already written) into a new buffer of b on b's stream.
func adoptBuffer(b backend.Backend, src backend.Buffer) (backend.Buffer, error) {
	t, ok := b.(*cuda.Device)
	sb, ok2 := src.(*cuda.Buffer)
	if !ok || !ok2 {
		return nil, fmt.Errorf("adopting a %T into a %T", src, b)
	}
	var dst *cuda.Buffer
	err := t.Do(func(l *cuda.Locked) error {
		var err error
		if dst, err = l.Alloc(sb.DType(), sb.Len()); err != nil {
			return err
		}
		if n := sb.Len() * sb.DType().Size(); n > 0 {
			return cu.MemcpyDtoDAsync(dst.Ptr(), sb.Ptr(), uint64(n), l.Stream())
		}
		return nil
	})
	if err != nil {
		if dst != nil {
			t.Free(dst)
		}
		return nil, err
	}
	return dst, nil
}

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
	devs    []*cuda.Device
	workers int
	csp     bool
	layer   bool
	patch   *layout.Patch
	offsets []int64
	comms   []comm.DeviceComm
	m       *metrics.Counters
}

// newKit builds a device's samplers and feature store: csp on spec's
// handles (or, not collective, gpusample over the whole graph on a GPU,
// sample.NeighborSampler on the host otherwise) and the feature
// package's store on b (a host table on a CPU back end). hot lists the
// rows the device caches, in cache order.
func newKit(b backend.Backend, in *graph.CSR, x []float32, rows, cols int, hot []graph.NodeID, scfg gpusample.Config, spec samplerSpec) (*kit, error) {
	workers := max(spec.workers, 1)
	dev, ok := b.(*cuda.Device)
	if !ok {
		k := &kit{store: &cache.HostStore{B: b, Table: x, Rows: rows, Cols: cols, Hot: len(hot)}}
		for w := range workers {
			var s sampler
			var err error
			if spec.csp {
				s, err = spec.collective(b, scfg, w, k.smps)
			} else {
				var ss []func([]graph.NodeID, sample.Key) (*sample.MiniBatch, error)
				ss, err = wholeGraphSamplers(in, spec.layer, sample.Config{Fanouts: scfg.Fanouts, Replace: scfg.Replace, Weighted: scfg.Weighted}, 1)
				if err == nil {
					s = hostSampler(ss[0])
				}
			}
			if err != nil {
				k.close()
				return nil, err
			}
			k.smps = append(k.smps, s)
		}
		return k, nil
	}
	if spec.layer && !spec.csp {
		return nil, errors.New("layer-wise sampling on GPUs is collective (csp)")
	}
	if len(spec.devs) != 0 && len(spec.devs) != workers || len(spec.devs) == 0 && workers > 1 {
		return nil, fmt.Errorf("%d sampler workers on %d handles", workers, len(spec.devs))
	}
	k := &kit{}
	for w := range workers {
		s, err := spec.sampler(dev, in, scfg, w, k.smps)
		if err != nil {
			k.close()
			return nil, err
		}
		k.smps = append(k.smps, s)
	}
	st, err := cache.NewCUDAStore(dev, x, rows, cols, hot)
	if err != nil {
		k.close()
		return nil, fmt.Errorf("feature store: %w", err)
	}
	k.store = st
	return k, nil
}

// sampler builds CUDA sampler worker w (dev: the trainer's handle;
// before: workers 0..w-1). Workers after the first read the first one's
// topology in place (layer-wise: their own copy).
func (spec *samplerSpec) sampler(dev *cuda.Device, in *graph.CSR, scfg gpusample.Config, w int, before []sampler) (sampler, error) {
	sd := dev
	if len(spec.devs) > 0 {
		sd = spec.devs[w]
	}
	if spec.csp {
		return spec.collective(sd, scfg, w, before)
	}
	var s *gpusample.Sampler
	var err error
	if w > 0 {
		s, err = before[0].(*gpuSampler).s.Sibling(sd)
	} else {
		s, err = gpusample.New(sd, in, scfg)
	}
	if err != nil {
		return nil, fmt.Errorf("sampler %d: %w", w+1, err)
	}
	f, err := devbuf.NewFence(sd)
	if err != nil {
		s.Close()
		return nil, err
	}
	return &gpuSampler{dev: sd, s: s, fence: f, m: spec.m}, nil
}

// collective builds collective sampler worker w on be (a GPU handle or a
// CPU back end, which reads the patch in place whatever scfg's placement;
// before: workers 0..w-1). Node-wise workers after the first are its
// siblings.
func (spec *samplerSpec) collective(be backend.Backend, scfg gpusample.Config, w int, before []sampler) (sampler, error) {
	ccfg := csp.Config{Fanouts: scfg.Fanouts, Replace: scfg.Replace, Weighted: scfg.Weighted, Placement: scfg.Placement}
	var c comm.DeviceComm
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
	dev, _ := be.(*cuda.Device)
	return &cspSampler{dev: dev, s: cs, m: spec.m}, nil
}
