package csp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// Config configures a Sampler; Fanouts, Replace and Weighted mean what
// they mean in sample.Config and must be the same on every rank.
type Config struct {
	Fanouts           []int
	Replace, Weighted bool
	// EdgeIDs brings every sampled edge's global edge ID back (an extra
	// int64 all-to-all-v per hop). Without it Block.EdgeIDs holds -1 on
	// several ranks (a single rank fills them in: they cost nothing).
	EdgeIDs bool
	// Placement of the patch on a CUDA device: gpusample.OnDevice
	// (default), Mapped (pinned host memory read through UVA) or Split
	// (the rows the patch places on the device there, the others in host
	// memory). The CPU back end reads the patch in place.
	Placement gpusample.Placement
}

// Stats counts what a Sampler has done since New.
type Stats struct {
	// BytesSent[p] is what this rank sent to rank p through the
	// communicator (0 for itself: its own share is a device copy, counted
	// in BytesLocal).
	BytesSent []int64
	// BytesLocal is the share each exchange kept on this rank.
	BytesLocal int64
	// Frontier[h] sums this rank's frontier sizes at hop h (hop 0: seeds).
	Frontier []int64
	// Exchanges counts collectives through the communicator.
	Exchanges int64
	// Waits counts the times the host waited for the device: each
	// collective through the communicator (it returns when the device has
	// run it) and each device-to-host read of sizes. One rank sampling
	// directly waits once per batch (plus once per fanout -1 hop).
	Waits int64
	// WaitTime is the host's time in those waits (the protocol's; the
	// rest of a step is spent queueing work).
	WaitTime time.Duration
	// Batches counts successful Sample calls.
	Batches int64
}

// local is the exchanger of a single rank: its share is a copy.
type local struct{ be backend.Backend }

func (x local) AllToAll(_ context.Context, dst, src backend.Buffer) error {
	return x.be.Copy(dst, src)
}
func (x local) AllToAllV(_ context.Context, dst backend.Buffer, _ []int, src backend.Buffer, _ []int) error {
	return x.be.Copy(dst, src)
}

// Batch is a collective sampler's mini-batch on its rank's back end:
// Device on a CUDA device (the blocks in device memory, as
// gpusample.Sampler.SampleDevice returns them), Host on the CPU back end
// (the blocks are the CPU machine's buffers, no copy). One is set.
type Batch struct {
	Device *gpusample.Batch
	Host   *sample.MiniBatch
}

// Download returns the batch on the host: Host, or a copy of Device.
func (b *Batch) Download() (*sample.MiniBatch, error) {
	if b.Host != nil {
		return b.Host, nil
	}
	return b.Device.Download()
}

// Free releases the batch's device memory (Host's is Go's).
func (b *Batch) Free() {
	if b != nil && b.Device != nil {
		b.Device.Free()
	}
}

// numDst is block i's number of destinations.
func (b *Batch) numDst(i int) int {
	if b.Host != nil {
		return b.Host.Blocks[i].NumDst
	}
	return b.Device.Blocks[i].NumDst
}

// Sampler is one rank's collective sampler. Its methods serialize;
// Sample is a collective (see the package doc).
type Sampler struct {
	member
	// direct: a single rank samples its patch (the whole graph) with
	// the back end's single-device sampler, the same batch without the
	// protocol's steps (tests turn it off to run the protocol on one
	// device).
	direct bool
	cfg    Config

	m SamplerMachine // p.m: the patch's machine
	p *proto
}

// New prepares rank c.Rank()'s sampler on be: patch is that rank's
// layout.Patch (the in-adjacency rows it owns, global column IDs),
// offsets the partition's node offsets (len P+1, contiguous ID ranges),
// c the sampler stage's device communicator on be (nil or Size()==1
// means one device: no communication). On a CUDA device the patch is
// copied there (cfg.Placement); the CPU back end reads it in place.
func New(be backend.Backend, patch *layout.Patch, offsets []int64, c comm.Comm, cfg Config) (*Sampler, error) {
	o, err := open("csp.New", be, patch, offsets, c, func() error {
		if len(cfg.Fanouts) == 0 || len(cfg.Fanouts) > maxHops {
			return fmt.Errorf("%d fanouts: want 1 to %d hops", len(cfg.Fanouts), maxHops)
		}
		for i, f := range cfg.Fanouts {
			if f != -1 && f <= 0 {
				return fmt.Errorf("fanout %d of hop %d: want -1 (all) or > 0", f, i)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cfg.Fanouts = slices.Clone(cfg.Fanouts)
	s := &Sampler{cfg: cfg}
	p := o.proto(&s.member, len(cfg.Fanouts))
	p.fan, p.edgeIDs, s.direct = cfg.Fanouts, cfg.EdgeIDs, !p.remote
	var m SamplerMachine
	if o.host != nil {
		m, err = newCPUSamplerMachine(o.host, patch, p.off, o.size, cfg)
	} else {
		m, err = device.Sampler(be, patch, p.off, o.size, cfg)
	}
	if err == nil {
		s.p, s.m = p, m
		err = p.setMachine(m)
	}
	if err != nil {
		s.Close()
		return nil, o.fail(err)
	}
	return s, nil
}

// Sibling returns this rank's sampler on dev, another handle of the same
// GPU (its own stream), or the CPU back end for a sampler there, whose
// collectives go through c, another communicator of the same ranks. It
// reads s's patch in place (on a GPU gpusample.Sampler.Sibling) and draws
// the same batches as s, so siblings on every rank can sample other
// batches while s's rank waits for its peers. Like s it is a collective:
// every rank calls its sibling's Sample in the same order. Close it
// before s.
func (s *Sampler) Sibling(dev backend.Backend, c comm.Comm) (*Sampler, error) {
	const op = "csp.Sibling"
	s.mu.Lock()
	defer s.mu.Unlock()
	rank, size := groupOf(c)
	bad := func(format string, args ...any) (*Sampler, error) {
		return nil, &Error{Rank: s.rank, Op: op, Hop: -1, Msg: fmt.Sprintf(format, args...), Err: ErrInput}
	}
	host, msg := backendOf(dev)
	_, onCPU := s.be.(*cpu.Backend)
	switch {
	case s.closed:
		return bad("sampler is closed")
	case msg != "":
		return bad("%s", msg)
	case (host != nil) != onCPU:
		return bad("a sibling on %s of a sampler on %s", dev.Name(), s.be.Name())
	case s.size > 1 && (c == nil || rank != s.rank || size != s.size), s.size == 1 && size != 1:
		return bad("communicator of rank %d of %d for a sampler of rank %d of %d", rank, size, s.rank, s.size)
	}
	b, err := book.New(s.p.off)
	if err != nil {
		return nil, &Error{Rank: s.rank, Op: op, Hop: -1, Err: err}
	}
	t := &Sampler{member: member{be: dev, rank: s.rank, size: s.size}, direct: s.direct, cfg: s.cfg}
	t.cfg.Fanouts = slices.Clone(s.cfg.Fanouts)
	p := newProto(dev, c, b, s.rank, &t.stats, len(t.cfg.Fanouts))
	p.fan, p.edgeIDs = t.cfg.Fanouts, t.cfg.EdgeIDs
	m, err := s.m.Sibling(dev)
	if err == nil {
		t.p, t.m = p, m
		err = p.setMachine(m)
	}
	if err != nil {
		t.closeLocked()
		return nil, &Error{Rank: s.rank, Op: op, Hop: -1, Err: err}
	}
	return t, nil
}

// NumHops is the number of blocks per batch.
func (s *Sampler) NumHops() int { return len(s.cfg.Fanouts) }

// Close releases the patch copy and the sampler's buffers (not the
// communicator, nor batches already returned).
func (s *Sampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeLocked()
}

func (s *Sampler) closeLocked() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return s.p.close()
}

// Sample draws the mini-batch of seeds (distinct global IDs; DSP passes
// nodes this rank owns, but any node works) with key. It is a
// collective: every rank calls it the same number of times, in the same
// order (seed counts may differ, including 0). The batch lives on this
// rank's back end and equals sample.NeighborSampler's (and
// gpusample.Sampler.SampleDevice's) over the whole graph with the same
// seeds and key.
func (s *Sampler) Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (*Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, s.p.errf(-1, ErrInput, "sampler is closed")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	L := len(s.cfg.Fanouts)
	if s.direct {
		b, err := s.m.Sample(seeds, key)
		s.stats.Waits++
		for _, k := range s.cfg.Fanouts {
			if k < 0 {
				s.stats.Waits++
			}
		}
		if err != nil {
			if errors.Is(err, sample.ErrNode) || errors.Is(err, sample.ErrDuplicate) {
				err = fmt.Errorf("%w: %w", ErrInput, err)
			}
			return nil, s.p.wrapErr(0, "sampling on one device", err)
		}
		for h := range L {
			s.stats.Frontier[h] += int64(b.numDst(L - 1 - h))
		}
		s.stats.Batches++
		return b, nil
	}
	return s.p.sampleBatch(ctx, seeds, key, s.p.sample)
}
