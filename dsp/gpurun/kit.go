package gpurun

import (
	"context"
	"fmt"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/gpucache"
	"github.com/strata-gnn/strata/dsp/gpucsp"
	"github.com/strata-gnn/strata/dsp/internal/devbuf"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// batch is a sampled mini-batch on a device.
type batch interface {
	// Inputs are the input nodes' IDs (int32, unique), whose features the
	// first layer reads.
	Inputs() backend.Buffer
	// Blocks hands the blocks to package nn (first layer first); the
	// caller frees them.
	Blocks() ([]*nn.Block, error)
	// Free releases what the batch still holds.
	Free()
}

// sampler draws a device's batches.
type sampler interface {
	Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (batch, error)
	Close() error
}

// gpuSampler samples with gpusample over the whole graph on the device
// (the stand-in for collective sampling over patches): it queues the
// batch, waits for the stream with a fence (without the device lock, so
// the device's other stages keep queueing meanwhile), then collects it.
type gpuSampler struct {
	s     *gpusample.Sampler
	fence *devbuf.Fence
}

func newGPUSampler(dev *cuda.Device, in *graph.CSR, cfg gpusample.Config) (*gpuSampler, error) {
	s, err := gpusample.New(dev, in, cfg)
	if err != nil {
		return nil, err
	}
	f, err := devbuf.NewFence(dev)
	if err != nil {
		s.Close()
		return nil, err
	}
	return &gpuSampler{s: s, fence: f}, nil
}

func (g *gpuSampler) Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (batch, error) {
	p, err := g.s.SampleAsync(seeds, key)
	if err != nil {
		return nil, err
	}
	ferr := g.fence.Record()
	if ferr == nil {
		ferr = g.fence.Wait()
	}
	b, err := p.Wait() // every Pending must be waited for
	if err != nil {
		return nil, err
	}
	if ferr != nil {
		b.Free()
		return nil, ferr
	}
	return gpuBatch{b}, nil
}

func (g *gpuSampler) Close() error {
	err := g.s.Close()
	if e := g.fence.Close(); err == nil {
		err = e
	}
	return err
}

// cspSampler is collective sampling over the device's patch (dsp/gpucsp):
// every device calls Sample once per batch, in the same order. It adds
// the sampler's exchange bytes to the device's metrics.
type cspSampler struct {
	s          *gpucsp.Sampler
	m          *metrics.Counters
	sent, kept int64 // totals already counted
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
	if err != nil {
		return nil, err
	}
	return gpuBatch{b}, nil
}

func (c *cspSampler) Close() error { return c.s.Close() }

type gpuBatch struct{ b *gpusample.Batch }

func (g gpuBatch) Inputs() backend.Buffer       { return g.b.InputNodes() }
func (g gpuBatch) Blocks() ([]*nn.Block, error) { return g.b.NNBlocks() }
func (g gpuBatch) Free()                        { g.b.Free() }

// hostSampler samples on the host (sample.NeighborSampler, the same
// batches) and uploads the blocks: the CPU back ends' sampler.
type hostSampler struct {
	s *sample.NeighborSampler
	b backend.Backend
}

func (h *hostSampler) Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (batch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mb, err := h.s.Sample(seeds, key)
	if err != nil {
		return nil, err
	}
	in, err := devbuf.Upload(h.b, mb.InputNodes())
	if err != nil {
		return nil, err
	}
	return &hostBatch{b: h.b, mb: mb, in: in}, nil
}

func (h *hostSampler) Close() error { return nil }

type hostBatch struct {
	b  backend.Backend
	mb *sample.MiniBatch
	in backend.Buffer
}

func (h *hostBatch) Inputs() backend.Buffer { return h.in }

func (h *hostBatch) Blocks() ([]*nn.Block, error) {
	out := make([]*nn.Block, 0, len(h.mb.Blocks))
	for i := range h.mb.Blocks {
		blk, err := nn.UploadBlock(h.b, &h.mb.Blocks[i])
		if err != nil {
			for _, o := range out {
				o.Free()
			}
			return nil, err
		}
		out = append(out, blk)
	}
	return out, nil
}

func (h *hostBatch) Free() {
	if h.in != nil {
		h.b.Free(h.in)
		h.in = nil
	}
}

// kit is what a device needs besides the model: its sampler and feature
// store, and how IDs reach the host.
type kit struct {
	smp   sampler
	store gpucache.Store
	fetch gpucache.Fetch
	close func() error // releases the fetcher
}

// samplerSpec says how a CUDA device samples: collectively over its
// patch (csp: patch, offsets and the sampler stage's communicator) or
// over the whole graph.
type samplerSpec struct {
	csp     bool
	patch   *layout.Patch
	offsets []int64
	comm    comm.DeviceComm // nil with one device
	m       *metrics.Counters
}

// newKit builds device rank's sampler and store on b: gpucsp (or
// gpusample over the whole graph) and the feature package on CUDA
// devices, host sampling and a host table otherwise. hot lists the rows
// the device caches, in cache order.
func newKit(b backend.Backend, in *graph.CSR, x []float32, rows, cols int, hot []graph.NodeID, scfg gpusample.Config, spec samplerSpec) (*kit, error) {
	dev, ok := b.(*cuda.Device)
	if !ok {
		s, err := sample.NewNeighborSampler(in, sample.Config{Fanouts: scfg.Fanouts, Replace: scfg.Replace, Weighted: scfg.Weighted})
		if err != nil {
			return nil, err
		}
		return &kit{smp: &hostSampler{s: s, b: b}, store: &gpucache.HostStore{B: b, Table: x, Rows: rows, Cols: cols, Hot: len(hot)},
			fetch: gpucache.HostFetch(b), close: func() error { return nil }}, nil
	}
	k := &kit{}
	var err error
	if spec.csp {
		cs, err := gpucsp.New(dev, spec.patch, spec.offsets, spec.comm,
			gpucsp.Config{Fanouts: scfg.Fanouts, Replace: scfg.Replace, Weighted: scfg.Weighted, Placement: scfg.Placement})
		if err != nil {
			return nil, fmt.Errorf("collective sampler: %w", err)
		}
		k.smp = &cspSampler{s: cs, m: spec.m}
	} else if k.smp, err = newGPUSampler(dev, in, scfg); err != nil {
		return nil, fmt.Errorf("sampler: %w", err)
	}
	st, err := gpucache.NewCUDAStore(dev, x, rows, cols, hot)
	if err != nil {
		k.smp.Close()
		return nil, fmt.Errorf("feature store: %w", err)
	}
	k.store = st
	f, err := gpucache.NewCUDAFetch(dev)
	if err != nil {
		k.smp.Close()
		st.Close()
		return nil, err
	}
	k.fetch, k.close = f.Fetch, f.Close
	return k, nil
}
