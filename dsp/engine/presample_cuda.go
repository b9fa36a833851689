package engine

// The pre-sampling pass on CUDA devices (presampleOnHost's, counted on
// the GPUs).

import (
	"context"
	"fmt"
	"sync"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/csp"
	"github.com/strata-gnn/strata/dsp/internal/devbuf"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"golang.org/x/sync/errgroup"
)

// presampler is a temporary sampler of the pre-sampling pass.
type presampler interface {
	Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (*csp.Batch, error)
	Close() error
}

// fullPresampler is gpusample over the whole graph (Config.Sampler full).
type fullPresampler struct{ s *gpusample.Sampler }

func (f fullPresampler) Sample(_ context.Context, seeds []graph.NodeID, key sample.Key) (*csp.Batch, error) {
	b, err := f.s.SampleDevice(seeds, key)
	if err != nil {
		return nil, err
	}
	return &csp.Batch{Device: b}, nil
}

func (f fullPresampler) Close() error { return f.s.Close() }

// presampleFlushEvery is how many batches a device counts before it adds
// its histogram to the host's counts and clears it: the histogram is
// float32 (the back end's scatter-add), whose integers are exact up to
// 2^24, and a batch adds at most 1 to a node. A variable for the tests.
var presampleFlushEvery = 1<<24 - 1

// presampleOnDevices is presampleOnHost's pass on the CUDA devices.
// Device r samples device r's batches of the presamplePlan with a temporary sampler of the kind it trains with
// (csp node- or layer-wise, or gpusample with the full sampler), alone
// over the whole graph: the collective samplers' batches depend only on
// the graph, the seeds and the key, not on the partition (csp's
// guarantee), and no communicator is open yet. It counts each batch's
// input nodes on the device (a scatter-add of ones), the host adds the
// devices' counts (integers, so in any order) and ranks them with
// cache.ByCounts: the order is presampleOnHost's, bit for bit.
// The whole topology goes to every device for the pass, within the
// topology budget (the rest read from host memory, as a full sampler
// does), and is freed before the devices set up.
func (s *shared) presampleOnDevices(ctx context.Context) ([]graph.NodeID, error) {
	cfg := &s.cfg
	plan, err := newPresamplePlan(s.pd, cfg)
	if err != nil {
		return nil, err
	}
	if len(plan.batches) != len(s.opts.Backends) {
		return nil, fmt.Errorf("presample: %d devices' batches for %d back ends", len(plan.batches), len(s.opts.Backends))
	}
	topo := cfg.TopologyBytes
	if topo <= 0 {
		topo = layout.NoLimit
	}
	whole, b, err := layout.BuildWhole(s.in, layout.Options{DeviceBytes: topo})
	if err != nil {
		return nil, fmt.Errorf("presample: topology: %w", err)
	}
	n := int(s.in.NumRows)
	total := make([]int64, n)
	var mu sync.Mutex // guards total and host
	var host []float32
	// add adds device r's histogram, counted over since batches, to total.
	add := func(r int, dev backend.Backend, hist backend.Buffer, since int) error {
		mu.Lock()
		defer mu.Unlock()
		if host == nil {
			host = make([]float32, n)
		}
		if err := dev.Download(host, hist); err != nil {
			return err
		}
		for v, x := range host {
			c := int64(x)
			if float32(c) != x || c < 0 || c > int64(since) {
				return fmt.Errorf("node %d counted %v times in %d batches", v, x, since)
			}
			total[v] += c
		}
		return nil
	}
	devs := make([]backend.Backend, len(s.opts.Backends))
	for r, be := range s.opts.Backends {
		if !isGPU(be) {
			return nil, fmt.Errorf("presample: back end %d (%s) has no run-time kernels and queue (backend.Kernels, Enqueuer)", r, be.Name())
		}
		devs[r] = be
	}
	g, gctx := errgroup.WithContext(ctx)
	for r, dev := range devs {
		g.Go(func() error {
			if err := s.presampleDevice(gctx, r, dev, plan, whole, b.Offsets(), add); err != nil {
				return fmt.Errorf("presample on device %d: %w", r, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return cache.ByCounts(total), nil
}

// presampleDevice samples device r's batches of plan on dev over the
// whole graph (whole, with the one-device partition offsets) and hands
// its histogram of input nodes to add (every presampleFlushEvery batches
// and at the end).
func (s *shared) presampleDevice(ctx context.Context, r int, dev backend.Backend, plan *presamplePlan, whole *layout.Patch, offsets []int64,
	add func(r int, dev backend.Backend, hist backend.Buffer, since int) error) (err error) {
	cfg := &s.cfg
	place := gpusample.OnDevice
	if whole.HostBytes() > 0 {
		place = gpusample.Split
	}
	var smp presampler
	switch {
	case cfg.Sampler == SamplerFull:
		scfg := gpusample.Config{Fanouts: cfg.Train.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted, Placement: place}
		if place == gpusample.Split {
			scfg.DeviceRows = whole.DeviceRowIDs()
		}
		gs, err := gpusample.New(dev, s.in, scfg)
		if err != nil {
			return fmt.Errorf("sampler: %w", err)
		}
		smp = fullPresampler{gs}
	case cfg.Scheme == LayerWise:
		ccfg := csp.Config{Fanouts: cfg.Train.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted, Placement: place}
		if smp, err = csp.NewLayer(dev, whole, offsets, nil, ccfg); err != nil {
			return fmt.Errorf("layer-wise sampler: %w", err)
		}
	default:
		ccfg := csp.Config{Fanouts: cfg.Train.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted, Placement: place}
		if smp, err = csp.New(dev, whole, offsets, nil, ccfg); err != nil {
			return fmt.Errorf("sampler: %w", err)
		}
	}
	var hist, ones backend.Buffer
	defer func() {
		for _, x := range []backend.Buffer{hist, ones} {
			if x != nil {
				dev.Free(x)
			}
		}
		if cerr := smp.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("closing the sampler: %w", cerr)
		}
	}()
	n := int(s.in.NumRows)
	if hist, err = dev.Alloc(backend.Float32, n); err != nil {
		return err
	}
	if err := dev.Fill(hist, 0); err != nil {
		return err
	}
	since := 0
	for i, seeds := range plan.batches[r] {
		if err := ctx.Err(); err != nil {
			return err
		}
		bt, err := smp.Sample(ctx, seeds, plan.key(r, i))
		if err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
		err = countInputs(dev, hist, &ones, bt.Device.InputNodes(), n)
		bt.Free() // stream-ordered: the scatter-add has been queued before
		if err != nil {
			return fmt.Errorf("batch %d: counting input nodes: %w", i, err)
		}
		if since++; since == presampleFlushEvery {
			if err := add(r, dev, hist, since); err != nil {
				return err
			}
			if err := dev.Fill(hist, 0); err != nil {
				return err
			}
			since = 0
		}
	}
	if since > 0 {
		return add(r, dev, hist, since)
	}
	return nil
}

// countInputs adds 1 to hist (float32, one entry per node of n) at every
// input node in (int32 device IDs, distinct), with the back end's
// scatter-add; ones holds at least len(in) ones and grows as needed.
func countInputs(dev backend.Backend, hist backend.Buffer, ones *backend.Buffer, in backend.Buffer, n int) error {
	if in == nil || in.Len() == 0 {
		return nil
	}
	m := in.Len()
	if *ones == nil || (*ones).Len() < m {
		size := m
		if *ones != nil {
			size = max(m, 2*(*ones).Len())
			dev.Free(*ones)
			*ones = nil
		}
		o, err := dev.Alloc(backend.Float32, size)
		if err != nil {
			return err
		}
		*ones = o
		if err := dev.Fill(o, 1); err != nil {
			return err
		}
	}
	src, err := devbuf.View(*ones, 0, m)
	if err != nil {
		return err
	}
	return dev.ScatterAddRows(hist, src, in, n, 1)
}
