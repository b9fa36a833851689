package cudadsp

// The DSP engine's GPU pieces: the full sampler on a GPU, batches in
// device memory and their hand-over between a GPU's handles (streams),
// and the deferred frees behind the trainer's stream.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// gpuDevice is a back end that runs the engine's GPU paths: kernels
// compiled at run time and a queue to launch them on (the CUDA back end).
// The paths assert the further capabilities they use where they use them.
type gpuDevice interface {
	backend.Backend
	backend.Kernels
	backend.Enqueuer
}

// IsGPU reports whether b runs the engine's GPU paths.
func IsGPU(b backend.Backend) bool {
	_, ok := b.(gpuDevice)
	return ok
}

// newFence is a fence on dev's queue.
func newFence(dev backend.Backend) (backend.Fence, error) {
	fs, ok := dev.(backend.Fences)
	if !ok {
		return nil, fmt.Errorf("cudadsp: %s has no fences (backend.Fences)", dev.Name())
	}
	return fs.NewFence()
}

// FullSampler samples with gpusample over the whole graph on the device
// (the engine's sampler "full"): it queues the batch, waits for the
// stream with a fence (without the device lock, so that stages sharing
// the device keep queueing work) and collects it.
type FullSampler struct {
	dev   backend.Backend
	s     *gpusample.Sampler
	fence backend.Fence
	m     *metrics.Counters
}

// NewFullSampler is gpusample over in on dev (scfg), its waits counted
// into m as the sampler stage's.
func NewFullSampler(dev backend.Backend, in *graph.CSR, scfg gpusample.Config, m *metrics.Counters) (*FullSampler, error) {
	s, err := gpusample.New(dev, in, scfg)
	if err != nil {
		return nil, err
	}
	return newFullSampler(dev, s, m)
}

// Sibling is a full sampler on dev, another handle of the same GPU,
// reading g's topology in place. Close it before g.
func (g *FullSampler) Sibling(dev backend.Backend) (*FullSampler, error) {
	s, err := g.s.Sibling(dev)
	if err != nil {
		return nil, err
	}
	return newFullSampler(dev, s, g.m)
}

// newFullSampler adds a fence to s; on failure it closes s.
func newFullSampler(dev backend.Backend, s *gpusample.Sampler, m *metrics.Counters) (*FullSampler, error) {
	f, err := newFence(dev)
	if err != nil {
		s.Close()
		return nil, err
	}
	return &FullSampler{dev: dev, s: s, fence: f, m: m}, nil
}

// Sample returns the batch of seeds once it is on the device.
func (g *FullSampler) Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (*Batch, error) {
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
	return NewBatch(g.dev, b), nil
}

func (g *FullSampler) Close() error { return errors.Join(g.s.Close(), g.fence.Close()) }

// Batch is a sampled batch in device memory, as the engine's stages use
// it: the input nodes stay on the device and the blocks reach the
// trainer's handle of the GPU by device-to-device copies.
type Batch struct {
	dev  backend.Backend // the sampler's device
	b    *gpusample.Batch
	prep []prepared // transposes built ahead (PrepareBackward), by block
}

// prepared is a block's matrix aliased on another handle of the GPU,
// whose transpose that handle built and owns.
type prepared struct {
	on backend.Backend
	a  backend.Sparse
}

// sparseAliaser is a GPU handle that builds a matrix's transpose on its
// own stream and aliases another handle's matrices (the CUDA back end).
type sparseAliaser interface {
	AliasSparse(a backend.Sparse) (backend.Sparse, error)
	BuildTranspose(a backend.Sparse) error
	FreeSparse(a backend.Sparse)
}

// PrepareBackward builds the transposes of blocks from.. (what the
// backward pass's transposed products read) on b's stream, a handle of
// the batch's GPU other than the trainer's (the loader's), so that the
// trainer's step does not sort edges. The caller waits for b's stream
// before handing the batch on; Free releases them.
func (g *Batch) PrepareBackward(b backend.Backend, from int) error {
	t, ok := b.(sparseAliaser)
	if !ok || !IsGPU(b) || g.prep != nil {
		return nil
	}
	g.prep = make([]prepared, len(g.b.Blocks))
	for i := max(from, 0); i < len(g.b.Blocks); i++ {
		a := g.b.Blocks[i].A
		if a == nil {
			return fmt.Errorf("block %d has no matrix", i)
		}
		if b != g.dev {
			var err error
			if a, err = t.AliasSparse(a); err != nil {
				return fmt.Errorf("block %d: %w", i, err)
			}
			g.prep[i] = prepared{on: b, a: a}
		}
		if err := t.BuildTranspose(a); err != nil {
			return fmt.Errorf("block %d: transpose: %w", i, err)
		}
	}
	return nil
}

// NewBatch wraps b, sampled on dev.
func NewBatch(dev backend.Backend, b *gpusample.Batch) *Batch { return &Batch{dev: dev, b: b} }

// Device is the handle that sampled the batch (whose stream wrote it).
func (g *Batch) Device() backend.Backend { return g.dev }

// NumInputs is the number of input nodes.
func (g *Batch) NumInputs() int {
	if in := g.b.InputNodes(); in != nil {
		return in.Len()
	}
	return 0
}

// IDs is nil: the input nodes are on the device (DeviceIDs).
func (g *Batch) IDs() []int32 { return nil }

// HostIDs downloads the input nodes from the sampler's handle (nil
// without any): for a prefetch of their rows of other machines while the
// batch waits in a queue.
func (g *Batch) HostIDs() ([]int32, error) {
	in := g.DeviceIDs()
	if in == nil {
		return nil, nil
	}
	ids := make([]int32, in.Len())
	if err := g.dev.Download(ids, in); err != nil {
		return nil, fmt.Errorf("cudadsp: the batch's %d input IDs: %w", len(ids), err)
	}
	return ids, nil
}

// DeviceIDs are the input nodes (int32, on the sampler's handle), or nil.
func (g *Batch) DeviceIDs() backend.Buffer {
	if in := g.b.InputNodes(); in != nil {
		return in
	}
	return nil
}

// Free releases the batch's device memory.
func (g *Batch) Free() {
	for _, p := range g.prep {
		if p.a != nil {
			p.on.FreeSparse(p.a)
		}
	}
	g.prep = nil
	g.b.Free()
}

// Download copies the batch to the host (a task's edit of the blocks,
// engine.Task.Exclude).
func (g *Batch) Download() (*sample.MiniBatch, error) { return g.b.Download() }

// Blocks returns the blocks as nn blocks on b, the sampler's handle or
// another handle of its GPU (aliased there); the caller frees them.
func (g *Batch) Blocks(b backend.Backend) ([]*nn.Block, error) {
	if !IsGPU(b) {
		return nil, fmt.Errorf("a GPU batch for a %T back end", b)
	}
	if b == g.dev {
		return g.b.NNBlocks()
	}
	return g.aliasBlocks(b)
}

// aliasBlocks wraps the batch's block matrices, and the transposes built
// ahead, as nn blocks on b, another handle of the sampler's GPU, with no
// copy: the sampler waited for its stream before handing the batch on,
// the loader for its own after PrepareBackward, and the engine frees the
// batch once b's stream is past the step.
func (g *Batch) aliasBlocks(b backend.Backend) ([]*nn.Block, error) {
	t, ok := b.(sparseAliaser)
	if !ok {
		return nil, fmt.Errorf("a %T back end aliases no matrices", b)
	}
	out := make([]*nn.Block, 0, len(g.b.Blocks))
	fail := func(err error) ([]*nn.Block, error) {
		for _, o := range out {
			o.Free()
		}
		return nil, err
	}
	for i := range g.b.Blocks {
		src := g.b.Blocks[i].A
		if i < len(g.prep) && g.prep[i].a != nil {
			src = g.prep[i].a
		}
		if src == nil {
			return fail(fmt.Errorf("block %d has no matrix", i))
		}
		a, err := t.AliasSparse(src)
		if err != nil {
			return fail(fmt.Errorf("block %d: %w", i, err))
		}
		blk, err := nn.NewBlockFromSparse(b, a)
		if err != nil {
			t.FreeSparse(a)
			return fail(err)
		}
		out = append(out, blk)
	}
	return out, nil
}

// AliasBuffer returns src, a buffer of another handle of the same GPU, as
// a buffer of b without copying (backend.Siblings.Alias).
func AliasBuffer(b backend.Backend, src backend.Buffer) (backend.Buffer, error) {
	t, ok := b.(backend.Siblings)
	if !ok || !IsGPU(b) || src == nil {
		return nil, fmt.Errorf("aliasing a %T into a %T", src, b)
	}
	return t.Alias(src)
}

// AdoptBuffer copies src (a buffer of another handle of the same GPU,
// already written) into a new buffer of b on b's stream.
func AdoptBuffer(b backend.Backend, src backend.Buffer) (backend.Buffer, error) {
	t, ok := b.(gpuDevice)
	if !ok || src == nil {
		return nil, fmt.Errorf("adopting a %T into a %T", src, b)
	}
	var dst backend.Buffer
	err := t.Enqueue(func(l backend.Queue) error {
		var err error
		if dst, err = l.AllocRaw(src.DType(), src.Len()); err != nil {
			return err
		}
		if n := src.Len() * src.DType().Size(); n > 0 {
			return l.Copy(dst, src)
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

// Deferred frees batches once the trainer's stream has run the work
// queued before them (their blocks' copies): a ring of fences, so that a
// batch is freed two steps later, when its fence has long passed.
type Deferred struct {
	fences [3]backend.Fence
	items  [3][]func()
	next   int
}

// NewDeferred is a ring of fences on the trainer's handle dev.
func NewDeferred(dev backend.Backend) (*Deferred, error) {
	q := &Deferred{}
	for i := range q.fences {
		f, err := newFence(dev)
		if err != nil {
			q.Close()
			return nil, err
		}
		q.fences[i] = f
	}
	return q, nil
}

// Add marks the trainer's stream and queues frees to run after the mark.
func (q *Deferred) Add(frees ...func()) error {
	i := q.next
	q.next = (i + 1) % len(q.fences)
	if q.items[i] != nil {
		if err := q.fences[i].Wait(); err != nil {
			return err
		}
		runAll(q.items[i])
		q.items[i] = nil
	}
	if err := q.fences[i].Record(); err != nil {
		return err // leaked: the run fails anyway
	}
	q.items[i] = frees
	return nil
}

func runAll(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// Drain waits for every mark and runs the frees.
func (q *Deferred) Drain() error {
	var first error
	for i, fs := range q.items {
		if fs == nil {
			continue
		}
		if err := q.fences[i].Wait(); err != nil && first == nil {
			first = err
		}
		runAll(fs)
		q.items[i] = nil
	}
	return first
}

// Close drains q and releases its fences.
func (q *Deferred) Close() {
	q.Drain()
	for i, f := range q.fences {
		if f != nil {
			f.Close()
			q.fences[i] = nil
		}
	}
}
