package cudadsp

// The pre-sampling pass of the DSP engine on GPUs: the hotness ranking
// by input-node counts, counted on the devices.

import (
	"context"
	"fmt"
	"sync"

	"github.com/strata-gnn/strata/dsp/csp"
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

// fullPresampler is gpusample over the whole graph (the full sampler).
type fullPresampler struct{ s *gpusample.Sampler }

func (f fullPresampler) Sample(_ context.Context, seeds []graph.NodeID, key sample.Key) (*csp.Batch, error) {
	b, err := f.s.SampleDevice(seeds, key)
	if err != nil {
		return nil, err
	}
	return &csp.Batch{Device: b}, nil
}

func (f fullPresampler) Close() error { return f.s.Close() }

// Presample is a pre-sampling pass: every device samples its batches
// with a temporary sampler of the kind it trains with, alone over the
// whole graph (no communicator is open yet), and counts how often each
// node is an input node.
type Presample struct {
	Graph   *graph.CSR    // the whole graph (the full sampler's topology)
	Whole   *layout.Patch // its one-device patch (csp's), within the topology budget
	Offsets []int64       // the one-device partition offsets
	// Batches[r] are device r's batches' seeds, Key(r, i) the key of
	// its batch i.
	Batches [][][]graph.NodeID
	Key     func(r, i int) sample.Key
	// Full: gpusample over Graph; else csp, layer-wise with Layer.
	Full, Layer       bool
	Fanouts           []int
	Replace, Weighted bool
	// FlushEvery is how many batches a device counts before it adds its
	// histogram to the host's counts and clears it: the histogram is
	// float32 (the back end's scatter-add), whose integers are exact up
	// to 2^24, and a batch adds at most 1 to a node.
	FlushEvery int
}

// Run samples device r's batches on devs[r], all devices at once: it
// counts each batch's input nodes on the device (a scatter-add of ones)
// and returns the counts per node, added on the host (integers, so in
// any order): the collective samplers' batches depend only on the
// graph, the seeds and the key, not on the partition (csp's guarantee),
// so the counts are the host pass's, bit for bit.
func (p *Presample) Run(ctx context.Context, devs []backend.Backend) ([]int64, error) {
	if len(p.Batches) != len(devs) || p.FlushEvery < 1 || p.FlushEvery >= 1<<24 {
		return nil, fmt.Errorf("presample: %d devices' batches for %d devices, flushing every %d batches", len(p.Batches), len(devs), p.FlushEvery)
	}
	n := int(p.Graph.NumRows)
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
	g, gctx := errgroup.WithContext(ctx)
	for r, dev := range devs {
		g.Go(func() error {
			if err := p.device(gctx, r, dev, add); err != nil {
				return fmt.Errorf("presample on device %d: %w", r, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return total, nil
}

// device samples device r's batches on dev over the whole graph and
// hands its histogram of input nodes to add (every FlushEvery batches
// and at the end).
func (p *Presample) device(ctx context.Context, r int, dev backend.Backend, add func(r int, dev backend.Backend, hist backend.Buffer, since int) error) (err error) {
	whole := p.Whole
	place := gpusample.OnDevice
	if whole.HostBytes() > 0 {
		place = gpusample.Split
	}
	var smp presampler
	switch {
	case p.Full:
		scfg := gpusample.Config{Fanouts: p.Fanouts, Replace: p.Replace, Weighted: p.Weighted, Placement: place}
		if place == gpusample.Split {
			scfg.DeviceRows = whole.DeviceRowIDs()
		}
		gs, err := gpusample.New(dev, p.Graph, scfg)
		if err != nil {
			return fmt.Errorf("sampler: %w", err)
		}
		smp = fullPresampler{gs}
	case p.Layer:
		ccfg := csp.Config{Fanouts: p.Fanouts, Replace: p.Replace, Weighted: p.Weighted, Placement: place}
		if smp, err = csp.NewLayer(dev, whole, p.Offsets, nil, ccfg); err != nil {
			return fmt.Errorf("layer-wise sampler: %w", err)
		}
	default:
		ccfg := csp.Config{Fanouts: p.Fanouts, Replace: p.Replace, Weighted: p.Weighted, Placement: place}
		if smp, err = csp.New(dev, whole, p.Offsets, nil, ccfg); err != nil {
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
	n := int(p.Graph.NumRows)
	if hist, err = dev.Alloc(backend.Float32, n); err != nil {
		return err
	}
	if err := dev.Fill(hist, 0); err != nil {
		return err
	}
	since := 0
	for i, seeds := range p.Batches[r] {
		if err := ctx.Err(); err != nil {
			return err
		}
		bt, err := smp.Sample(ctx, seeds, p.Key(r, i))
		if err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
		err = countInputs(dev, hist, &ones, bt.Device.InputNodes(), n)
		bt.Free() // stream-ordered: the scatter-add has been queued before
		if err != nil {
			return fmt.Errorf("batch %d: counting input nodes: %w", i, err)
		}
		if since++; since == p.FlushEvery {
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
	src, err := backend.View(*ones, 0, m)
	if err != nil {
		return err
	}
	return dev.ScatterAddRows(hist, src, in, n, 1)
}
